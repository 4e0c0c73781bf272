package gormstore

import (
	"context"
	"encoding/json"
	"time"

	"github.com/embedkit/embedkit/store"
)

func (t *txn) CreateThread(ctx context.Context, th store.Thread) error {
	created := nowOr(th.CreatedAt).UnixNano()
	updated := created
	if !th.UpdatedAt.IsZero() {
		updated = th.UpdatedAt.UnixNano()
	}
	_, err := t.exec(ctx, "create thread",
		"INSERT INTO threads ("+threadCols+") VALUES (?, ?, ?, ?, ?, ?, ?)",
		th.AccountID, th.ChatID, th.AgentID, th.UserID, th.LastSort, created, updated)
	return err
}

func (t *txn) Thread(ctx context.Context, accountID int64, chatID string) (store.Thread, error) {
	var row threadRow
	n, err := t.find(ctx, "thread", &row,
		"SELECT "+threadCols+" FROM threads WHERE account_id = ? AND chat_id = ?", accountID, chatID)
	if err != nil {
		return store.Thread{}, err
	}
	if n == 0 {
		return store.Thread{}, newErr("thread", store.ErrNotFound)
	}
	return row.thread(), nil
}

func (t *txn) AppendMessages(ctx context.Context, accountID int64, chatID string, lastSort int64, msgs []store.ThreadMessage) error {
	const op = "append messages"
	n, err := t.exec(ctx, op,
		`UPDATE threads SET last_sort = CASE WHEN last_sort < ? THEN ? ELSE last_sort END, updated_at = ?
		WHERE account_id = ? AND chat_id = ?`,
		lastSort, lastSort, time.Now().UnixNano(), accountID, chatID)
	if err != nil {
		return err
	}
	if n == 0 {
		return newErr(op, store.ErrNotFound)
	}
	for chunk := range chunks(msgs, batchRows) {
		args := make([]any, 0, 5*len(chunk))
		for _, m := range chunk {
			args = append(args, accountID, chatID, m.ID, m.Sort, string(m.Body))
		}
		if _, err := t.exec(ctx, op,
			"INSERT INTO thread_messages (account_id, chat_id, id, sort, body) VALUES "+placeholders(len(chunk), 5)+
				" ON CONFLICT (account_id, chat_id, id) DO UPDATE SET sort = excluded.sort, body = excluded.body",
			args...); err != nil {
			return err
		}
	}
	return nil
}

func (t *txn) Messages(ctx context.Context, accountID int64, chatID string) ([]store.ThreadMessage, error) {
	var rows messageRows
	if _, err := t.find(ctx, "messages", &rows,
		"SELECT id, sort, body FROM thread_messages WHERE account_id = ? AND chat_id = ? ORDER BY sort, id",
		accountID, chatID); err != nil {
		return nil, err
	}
	out := make([]store.ThreadMessage, len(rows))
	for i, r := range rows {
		out[i] = store.ThreadMessage{ID: r.ID, Sort: r.Sort, Body: json.RawMessage(r.Body)}
	}
	return out, nil
}

// CreateThread implements [store.Threads].
func (s *Store) CreateThread(ctx context.Context, th store.Thread) error {
	return write0(ctx, s, func(t *txn) error { return t.CreateThread(ctx, th) })
}

// Thread implements [store.Threads].
func (s *Store) Thread(ctx context.Context, accountID int64, chatID string) (store.Thread, error) {
	return readPrimary(ctx, s, func(t *txn) (store.Thread, error) { return t.Thread(ctx, accountID, chatID) })
}

// AppendMessages implements [store.Threads] in its own transaction.
func (s *Store) AppendMessages(ctx context.Context, accountID int64, chatID string, lastSort int64, msgs []store.ThreadMessage) error {
	return write0(ctx, s, func(t *txn) error { return t.AppendMessages(ctx, accountID, chatID, lastSort, msgs) })
}

// Messages implements [store.Threads].
func (s *Store) Messages(ctx context.Context, accountID int64, chatID string) ([]store.ThreadMessage, error) {
	return readPrimary(ctx, s, func(t *txn) ([]store.ThreadMessage, error) { return t.Messages(ctx, accountID, chatID) })
}
