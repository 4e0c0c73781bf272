package gormstore

import (
	"context"
	"encoding/json"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/embedkit/embedkit/store"
)

const userAlive = "EXISTS (SELECT 1 FROM embedkit_users u WHERE u.id = user_id AND (NOT u.ephemeral OR u.expires_at IS NULL OR u.expires_at > ?))"

func (t *txn) CreateSession(ctx context.Context, hash []byte, s store.Session) error {
	if len(s.KeyHash) == 0 {
		s.KeyHash = nil // no key, not a key with an empty hash
	}
	_, err := t.write(ctx, "create session", func(db *gorm.DB) *gorm.DB {
		return db.Create(&Session{Hash: hash, AccountID: s.AccountID, UserID: s.UserID, DeploymentID: s.DeploymentID,
			EmbedTenantID: s.EmbedTenantID, EmbedTenantName: s.EmbedTenantName, CreatorMode: s.CreatorMode,
			CreatedAt: nowOr(s.CreatedAt).UnixNano(), ExpiresAt: s.ExpiresAt.UnixNano(), KeyHash: s.KeyHash})
	})
	return err
}

// ExchangeSession marks the session used (a concurrent exchange waits for
// the UPDATE, then finds it used) and stores the token.
func (t *txn) ExchangeSession(ctx context.Context, sessionHash, tokenHash []byte, tokenExpiresAt, now time.Time) (store.Session, error) {
	const op = "exchange session"
	n0 := nowOr(now).UnixNano()
	return atomically(t, ctx, func(t *txn) (store.Session, error) {
		var s Session
		n, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
			return db.Model(&s).Clauses(clause.Returning{}).
				Where("hash = ? AND used_at IS NULL AND expires_at > ? AND "+userAlive, sessionHash, n0, n0).
				Update("used_at", n0)
		})
		if err := someRow(op, n, err); err != nil {
			return store.Session{}, err
		}
		tok := Token{Hash: tokenHash, AccountID: s.AccountID, UserID: s.UserID, DeploymentID: s.DeploymentID,
			EmbedTenantID: s.EmbedTenantID, EmbedTenantName: s.EmbedTenantName, CreatorMode: s.CreatorMode,
			CreatedAt: n0, ExpiresAt: tokenExpiresAt.UnixNano(), KeyHash: s.KeyHash}
		_, err = t.do(ctx, op, func(db *gorm.DB) *gorm.DB { return db.Create(&tok) })
		return tok.session(), err
	})
}

func (r Token) session() store.Session {
	return store.Session{AccountID: r.AccountID, UserID: r.UserID, DeploymentID: r.DeploymentID,
		EmbedTenantID: r.EmbedTenantID, EmbedTenantName: r.EmbedTenantName, CreatorMode: r.CreatorMode,
		CreatedAt: fromNanos(r.CreatedAt), ExpiresAt: fromNanos(r.ExpiresAt), KeyHash: r.KeyHash}
}

func (t *txn) SessionByToken(ctx context.Context, tokenHash []byte, now time.Time) (store.Session, error) {
	n0 := nowOr(now).UnixNano()
	row, err := first[Token](t, ctx, "session by token", primary, whereSQL("hash = ? AND expires_at > ? AND "+userAlive, tokenHash, n0, n0))
	return row.session(), err
}

func (t *txn) RevokeUserSessions(ctx context.Context, userID int64) error {
	return t.atomic(ctx, func(t *txn) (err error) {
		for _, model := range []any{&Session{}, &Token{}} {
			if err == nil {
				_, err = t.do(ctx, "revoke sessions", func(db *gorm.DB) *gorm.DB { return db.Where("user_id = ?", userID).Delete(model) })
			}
		}
		return err
	})
}

// DeleteExpired deletes at most limit rows of each kind, chosen by a
// subquery (PostgreSQL's DELETE has no LIMIT) and checked again by the
// DELETE, which on PostgreSQL sees what a concurrent writer committed (a
// user converted to persistent meanwhile stays).
func (t *txn) DeleteExpired(ctx context.Context, now time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	n0 := nowOr(now).UnixNano()
	return atomically(t, ctx, func(t *txn) (int, error) {
		total := 0
		for _, k := range []struct {
			model      any
			key, where string
		}{
			{&Session{}, "hash", "expires_at <= ? OR used_at IS NOT NULL"}, {&Token{}, "hash", "expires_at <= ?"},
			{&AccountQuota{}, "account_id, name", "expires_at <= ?"}, {&User{}, "id", "ephemeral AND expires_at <= ?"},
		} {
			n, err := t.do(ctx, "delete expired", func(db *gorm.DB) *gorm.DB {
				sub := db.Session(&gorm.Session{NewDB: true}).Model(k.model).Select(k.key).Where(k.where, n0).Limit(limit)
				return db.Where("("+k.key+") IN (?)", sub).Where(k.where, n0).Delete(k.model)
			})
			if err != nil {
				return 0, err
			}
			total += int(n)
		}
		return total, nil
	})
}

// messageBatch keeps the parameters of one INSERT below drivers' limits.
const messageBatch = 500

func (t *txn) putMessages(ctx context.Context, op string, accountID int64, chatID string, msgs []store.ThreadMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	rows := convert(msgs, func(m store.ThreadMessage) ThreadMessage {
		return ThreadMessage{AccountID: accountID, ChatID: chatID, ID: m.ID, Sort: m.Sort, Body: string(m.Body)}
	})
	_, err := t.write(ctx, op, func(db *gorm.DB) *gorm.DB {
		return db.Clauses(upsert([]string{"account_id", "chat_id", "id"}, "sort", "body")).CreateInBatches(&rows, messageBatch)
	})
	return err
}

func (t *txn) CreateThread(ctx context.Context, th store.Thread, msgs ...store.ThreadMessage) error {
	const op = "create thread"
	return t.atomic(ctx, func(t *txn) error {
		if _, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
			return db.Omit(clause.Associations).Create(&Thread{AccountID: th.AccountID, ChatID: th.ChatID, AgentID: th.AgentID,
				UserID: th.UserID, LastSort: th.LastSort, CreatedAt: nowOr(th.CreatedAt).UnixNano(), UpdatedAt: nowOr(th.UpdatedAt).UnixNano()})
		}); err != nil {
			return err
		}
		return t.putMessages(ctx, op, th.AccountID, th.ChatID, msgs)
	})
}

func (t *txn) Thread(ctx context.Context, accountID int64, chatID string) (store.Thread, error) {
	r, err := first[Thread](t, ctx, "thread", primary, whereSQL("account_id = ? AND chat_id = ?", accountID, chatID))
	return store.Thread{AccountID: r.AccountID, ChatID: r.ChatID, AgentID: r.AgentID, UserID: r.UserID, LastSort: r.LastSort,
		CreatedAt: fromNanos(r.CreatedAt), UpdatedAt: fromNanos(r.UpdatedAt)}, err
}

func (t *txn) AppendMessages(ctx context.Context, accountID int64, chatID string, lastSort int64, msgs []store.ThreadMessage) error {
	const op = "append messages"
	if lastSort <= 0 && len(msgs) > 0 && len(msgs) <= messageBatch {
		return t.putMessages(ctx, op, accountID, chatID, msgs) // one statement, a write of its own
	}
	return t.atomic(ctx, func(t *txn) error {
		// The thread's row is written only when lastSort rises, as few of a
		// running turn's writes need (chatstream passes 0 when it knows the
		// stored mark covers it); a missing thread then fails the messages'
		// foreign key.
		var n int64
		var err error
		if lastSort > 0 {
			n, err = t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
				return db.Model(&Thread{}).Where("account_id = ? AND chat_id = ? AND last_sort < ?", accountID, chatID, lastSort).
					Updates(map[string]any{"last_sort": lastSort, "updated_at": time.Now().UnixNano()})
			})
		}
		if err == nil && n == 0 && len(msgs) == 0 {
			_, err = t.Thread(ctx, accountID, chatID)
		}
		if err != nil {
			return err
		}
		return t.putMessages(ctx, op, accountID, chatID, msgs)
	})
}

func (t *txn) Messages(ctx context.Context, accountID int64, chatID string) ([]store.ThreadMessage, error) {
	return list(t, ctx, "messages", func(r ThreadMessage) store.ThreadMessage {
		return store.ThreadMessage{ID: r.ID, Sort: r.Sort, Body: json.RawMessage(r.Body)}
	}, "sort, id", primary, whereSQL("account_id = ? AND chat_id = ?", accountID, chatID))
}

func (t *txn) DeleteThread(ctx context.Context, accountID int64, chatID string) error {
	return t.deleteRows(ctx, "delete thread", &Thread{}, "account_id = ? AND chat_id = ?", accountID, chatID)
}
