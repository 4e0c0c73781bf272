package gormstore

import (
	"context"
	"encoding/json"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/embedkit/embedkit/store"
)

// messageBatch bounds the rows of one INSERT so that its parameters stay
// below every driver's limit.
const messageBatch = 500

func messageRows(accountID int64, chatID string, msgs []store.ThreadMessage) []ThreadMessage {
	rows := make([]ThreadMessage, len(msgs))
	for i, m := range msgs {
		rows[i] = ThreadMessage{AccountID: accountID, ChatID: chatID, ID: m.ID, Sort: m.Sort, Body: string(m.Body)}
	}
	return rows
}

// putMessages stores msgs, replacing stored messages of the same IDs.
func (t *txn) putMessages(ctx context.Context, op string, accountID int64, chatID string, msgs []store.ThreadMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	rows := messageRows(accountID, chatID, msgs)
	_, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
		return db.Clauses(upsert([]string{"account_id", "chat_id", "id"}, "sort", "body")).CreateInBatches(&rows, messageBatch)
	})
	return err
}

func (t *txn) CreateThread(ctx context.Context, th store.Thread, msgs ...store.ThreadMessage) error {
	const op = "create thread"
	return t.atomic(ctx, func(t *txn) error {
		if _, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
			return db.Omit(clause.Associations).Create(&Thread{AccountID: th.AccountID, ChatID: th.ChatID, AgentID: th.AgentID,
				UserID: th.UserID, LastSort: th.LastSort, CreatedAt: nanos(nowOr(th.CreatedAt)), UpdatedAt: nanos(nowOr(th.UpdatedAt))})
		}); err != nil {
			return err
		}
		return t.putMessages(ctx, op, th.AccountID, th.ChatID, msgs)
	})
}

func (t *txn) Thread(ctx context.Context, accountID int64, chatID string) (store.Thread, error) {
	const op = "thread"
	var r Thread
	n, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
		return db.Where("account_id = ? AND chat_id = ?", accountID, chatID).Limit(1).Find(&r)
	})
	if err != nil {
		return store.Thread{}, err
	}
	if n == 0 {
		return store.Thread{}, newErr(op, store.ErrNotFound)
	}
	return store.Thread{AccountID: r.AccountID, ChatID: r.ChatID, AgentID: r.AgentID, UserID: r.UserID, LastSort: r.LastSort,
		CreatedAt: fromNanos(r.CreatedAt), UpdatedAt: fromNanos(r.UpdatedAt)}, nil
}

func (t *txn) AppendMessages(ctx context.Context, accountID int64, chatID string, lastSort int64, msgs []store.ThreadMessage) error {
	const op = "append messages"
	return t.atomic(ctx, func(t *txn) error {
		n, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
			return db.Model(&Thread{}).Where("account_id = ? AND chat_id = ?", accountID, chatID).Updates(map[string]any{
				"last_sort":  gorm.Expr("CASE WHEN last_sort < ? THEN ? ELSE last_sort END", lastSort, lastSort),
				"updated_at": nanos(time.Now()),
			})
		})
		if err != nil {
			return err
		}
		if n == 0 {
			return newErr(op, store.ErrNotFound)
		}
		return t.putMessages(ctx, op, accountID, chatID, msgs)
	})
}

func (t *txn) Messages(ctx context.Context, accountID int64, chatID string) ([]store.ThreadMessage, error) {
	var rows []ThreadMessage
	if _, err := t.do(ctx, "messages", func(db *gorm.DB) *gorm.DB {
		return db.Where("account_id = ? AND chat_id = ?", accountID, chatID).Order("sort, id").Find(&rows)
	}); err != nil {
		return nil, err
	}
	out := make([]store.ThreadMessage, len(rows))
	for i, r := range rows {
		out[i] = store.ThreadMessage{ID: r.ID, Sort: r.Sort, Body: json.RawMessage(r.Body)}
	}
	return out, nil
}

// DeleteThread deletes the thread; its messages go with it (ON DELETE
// CASCADE).
func (t *txn) DeleteThread(ctx context.Context, accountID int64, chatID string) error {
	const op = "delete thread"
	n, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
		return db.Where("account_id = ? AND chat_id = ?", accountID, chatID).Delete(&Thread{})
	})
	if err == nil && n == 0 {
		err = newErr(op, store.ErrNotFound)
	}
	return err
}
