package gormstore

import (
	"context"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/embedkit/embedkit/store"
)

// userAlive is the predicate of a session or token whose user has not
// expired at the bound time.
const userAlive = "EXISTS (SELECT 1 FROM embedkit_users u WHERE u.id = user_id AND (NOT u.ephemeral OR u.expires_at IS NULL OR u.expires_at > ?))"

func keyHash(h []byte) []byte {
	if len(h) == 0 {
		return nil
	}
	return h
}

func (t *txn) CreateSession(ctx context.Context, hash []byte, s store.Session) error {
	_, err := t.do(ctx, "create session", func(db *gorm.DB) *gorm.DB {
		return db.Create(&Session{Hash: hash, AccountID: s.AccountID, UserID: s.UserID, DeploymentID: s.DeploymentID,
			EmbedTenantID: s.EmbedTenantID, EmbedTenantName: s.EmbedTenantName, CreatorMode: s.CreatorMode,
			CreatedAt: nanos(nowOr(s.CreatedAt)), ExpiresAt: nanos(s.ExpiresAt), KeyHash: keyHash(s.KeyHash)})
	})
	return err
}

// ExchangeSession marks the session used (an UPDATE that a concurrent
// exchange of the same id waits for and then finds used) and stores the
// token.
func (t *txn) ExchangeSession(ctx context.Context, sessionHash, tokenHash []byte, tokenExpiresAt, now time.Time) (store.Session, error) {
	const op = "exchange session"
	n0 := nanos(nowOr(now))
	var out store.Session
	err := t.atomic(ctx, func(t *txn) error {
		var s Session
		n, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
			return db.Model(&s).Clauses(clause.Returning{}).
				Where("hash = ? AND used_at IS NULL AND expires_at > ? AND "+userAlive, sessionHash, n0, n0).
				Update("used_at", n0)
		})
		if err != nil {
			return err
		}
		if n == 0 {
			return newErr(op, store.ErrNotFound)
		}
		tok := Token{Hash: tokenHash, AccountID: s.AccountID, UserID: s.UserID, DeploymentID: s.DeploymentID,
			EmbedTenantID: s.EmbedTenantID, EmbedTenantName: s.EmbedTenantName, CreatorMode: s.CreatorMode,
			CreatedAt: n0, ExpiresAt: nanos(tokenExpiresAt), KeyHash: s.KeyHash}
		if _, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB { return db.Create(&tok) }); err != nil {
			return err
		}
		out = tok.session()
		return nil
	})
	return out, err
}

func (r Token) session() store.Session {
	return store.Session{AccountID: r.AccountID, UserID: r.UserID, DeploymentID: r.DeploymentID,
		EmbedTenantID: r.EmbedTenantID, EmbedTenantName: r.EmbedTenantName, CreatorMode: r.CreatorMode,
		CreatedAt: fromNanos(r.CreatedAt), ExpiresAt: fromNanos(r.ExpiresAt), KeyHash: r.KeyHash}
}

func (t *txn) SessionByToken(ctx context.Context, tokenHash []byte, now time.Time) (store.Session, error) {
	const op = "session by token"
	n0 := nanos(nowOr(now))
	var row Token
	n, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
		return db.Where("hash = ? AND expires_at > ? AND "+userAlive, tokenHash, n0, n0).Limit(1).Find(&row)
	})
	if err != nil {
		return store.Session{}, err
	}
	if n == 0 {
		return store.Session{}, newErr(op, store.ErrNotFound)
	}
	return row.session(), nil
}

func (t *txn) RevokeUserSessions(ctx context.Context, userID int64) error {
	return t.atomic(ctx, func(t *txn) error {
		for _, model := range []any{&Session{}, &Token{}} {
			if _, err := t.do(ctx, "revoke sessions", func(db *gorm.DB) *gorm.DB {
				return db.Where("user_id = ?", userID).Delete(model)
			}); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteExpired deletes, per kind, at most limit expired rows chosen by a
// subquery (DELETE has no LIMIT on PostgreSQL). Ephemeral users never
// counted toward the persistent-user count.
func (t *txn) DeleteExpired(ctx context.Context, now time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	n0 := nanos(nowOr(now))
	kinds := []struct {
		model any
		key   string
		where string
	}{
		{&Session{}, "hash", "expires_at <= ? OR used_at IS NOT NULL"},
		{&Token{}, "hash", "expires_at <= ?"},
		{&AccountQuota{}, "account_id, name", "expires_at <= ?"},
		{&User{}, "id", "ephemeral AND expires_at <= ?"},
	}
	total := 0
	err := t.atomic(ctx, func(t *txn) error {
		total = 0
		for _, k := range kinds {
			n, err := t.do(ctx, "delete expired", func(db *gorm.DB) *gorm.DB {
				sub := db.Session(&gorm.Session{NewDB: true}).Model(k.model).Select(k.key).Where(k.where, n0).Limit(limit)
				return db.Where("("+k.key+") IN (?)", sub).Delete(k.model)
			})
			if err != nil {
				return err
			}
			total += int(n)
		}
		return nil
	})
	return total, err
}
