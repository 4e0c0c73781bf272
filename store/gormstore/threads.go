package gormstore

import (
	"context"
	"encoding/json"
	"time"
	"unsafe"

	"github.com/embedkit/embedkit/store"
)

func (t *txn) CreateThread(ctx context.Context, th store.Thread, msgs ...store.ThreadMessage) error {
	const op = "create thread"
	created := nowOr(th.CreatedAt).UnixNano()
	updated := created
	if !th.UpdatedAt.IsZero() {
		updated = th.UpdatedAt.UnixNano()
	}
	if _, err := t.exec(ctx, op,
		"INSERT INTO threads ("+threadCols+") VALUES (?, ?, ?, ?, ?, ?, ?)",
		th.AccountID, th.ChatID, th.AgentID, th.UserID, th.LastSort, created, updated); err != nil {
		return err
	}
	return t.insertMessages(ctx, op, th.AccountID, th.ChatID, msgs)
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
	return t.insertMessages(ctx, op, accountID, chatID, msgs)
}

// insertMessages upserts msgs of a thread that exists, in batched
// statements whose row count nobody needs (when pipelining, they go with
// the next statement or the commit).
func (t *txn) insertMessages(ctx context.Context, op string, accountID int64, chatID string, msgs []store.ThreadMessage) error {
	for chunk := range chunks(msgs, batchRows) {
		args := make([]any, 0, 5*len(chunk))
		for _, m := range chunk {
			args = append(args, accountID, chatID, m.ID, m.Sort, bodyText(m.Body))
		}
		if err := t.run(ctx, op,
			"INSERT INTO thread_messages (account_id, chat_id, id, sort, body) VALUES "+placeholders(len(chunk), 5)+
				" ON CONFLICT (account_id, chat_id, id) DO UPDATE SET sort = excluded.sort, body = excluded.body",
			args...); err != nil {
			return err
		}
	}
	return nil
}

// bodyText is a message body as the text parameter of its column, without
// a copy: both drivers copy a string parameter while the statement runs
// (or queue it until the commit, within the call's transaction) and never
// write to it, and the store does not keep msgs past the call, so
// the caller's bytes are only read, as the string's immutability requires,
// for as long as the transaction writing them lasts.
func bodyText(b json.RawMessage) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
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
func (s *Store) CreateThread(ctx context.Context, th store.Thread, msgs ...store.ThreadMessage) error {
	return write0(ctx, s, func(t *txn) error { return t.CreateThread(ctx, th, msgs...) })
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
