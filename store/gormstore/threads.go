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
		"INSERT INTO embedkit_threads ("+threadCols+") VALUES (?, ?, ?, ?, ?, ?, ?)",
		th.AccountID, th.ChatID, th.AgentID, th.UserID, th.LastSort, created, updated); err != nil {
		return err
	}
	return t.insertMessages(ctx, op, th.AccountID, th.ChatID, msgs)
}

func (t *txn) Thread(ctx context.Context, accountID int64, chatID string) (store.Thread, error) {
	var row threadRow
	n, err := t.find(ctx, "thread", &row,
		"SELECT "+threadCols+" FROM embedkit_threads WHERE account_id = ? AND chat_id = ?", accountID, chatID)
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
		`UPDATE embedkit_threads SET last_sort = CASE WHEN last_sort < ? THEN ? ELSE last_sort END, updated_at = ?
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

// upsertMessages is the statement of insertMessages and AppendToThreads for
// rows rows.
func upsertMessages(rows int) string {
	return "INSERT INTO embedkit_thread_messages (account_id, chat_id, id, sort, body) VALUES " + placeholders(rows, 5) +
		" ON CONFLICT (account_id, chat_id, id) DO UPDATE SET sort = excluded.sort, body = excluded.body"
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
		if err := t.run(ctx, op, upsertMessages(len(chunk)), args...); err != nil {
			return err
		}
	}
	return nil
}

// threadKey names a thread.
type threadKey struct {
	accountID int64
	chatID    string
}

// messageKey names a message.
type messageKey struct {
	threadKey
	id string
}

// keyedMessage is a message with its thread, a row of AppendToThreads'
// insert.
type keyedMessage struct {
	threadKey
	m store.ThreadMessage
}

func (t *txn) AppendToThreads(ctx context.Context, appends []store.ThreadAppend) error {
	const op = "append to threads"
	// A statement must not update a row twice (PostgreSQL refuses it, or
	// picks one of the rows): one row per thread, with its highest
	// LastSort, and one per message, the last with its ID.
	threadAt := make(map[threadKey]int, len(appends))
	threads := make([]store.ThreadAppend, 0, len(appends))
	n := 0
	for _, a := range appends {
		k := threadKey{a.AccountID, a.ChatID}
		if i, ok := threadAt[k]; ok {
			threads[i].LastSort = max(threads[i].LastSort, a.LastSort)
		} else {
			threadAt[k] = len(threads)
			threads = append(threads, store.ThreadAppend{AccountID: a.AccountID, ChatID: a.ChatID, LastSort: a.LastSort})
		}
		n += len(a.Messages)
	}
	msgAt := make(map[messageKey]int, n)
	msgs := make([]keyedMessage, 0, n)
	for _, a := range appends {
		k := threadKey{a.AccountID, a.ChatID}
		for _, m := range a.Messages {
			if i, ok := msgAt[messageKey{k, m.ID}]; ok {
				msgs[i].m = m
			} else {
				msgAt[messageKey{k, m.ID}] = len(msgs)
				msgs = append(msgs, keyedMessage{k, m})
			}
		}
	}

	now := time.Now().UnixNano()
	if !t.pg() {
		// SQLite: the threads as one JSON array joined with json_each.
		// FROM (VALUES ...) would be materialized into a temporary b-tree
		// on every execution (see liteList for what one costs).
		rows := make([][3]any, len(threads))
		for i, th := range threads {
			rows[i] = [3]any{th.AccountID, th.ChatID, th.LastSort}
		}
		list, _ := json.Marshal(rows) // numbers and strings: cannot fail
		updated, err := t.exec(ctx, op,
			`UPDATE embedkit_threads SET last_sort = CASE WHEN embedkit_threads.last_sort < j.value->>2 THEN j.value->>2 ELSE embedkit_threads.last_sort END, updated_at = ?
			FROM json_each(?) AS j WHERE embedkit_threads.account_id = j.value->>0 AND embedkit_threads.chat_id = j.value->>1`,
			now, string(list))
		if err != nil {
			return err
		}
		if updated != int64(len(threads)) {
			return newErr(op, store.ErrNotFound)
		}
		threads = nil
	}
	for chunk := range chunks(threads, batchRows) {
		args := make([]any, 0, 1+3*len(chunk))
		args = append(args, now)
		for _, th := range chunk {
			args = append(args, th.AccountID, th.ChatID, th.LastSort)
		}
		// PostgreSQL: the first row's casts type the VALUES columns.
		rows := "(CAST(? AS BIGINT), CAST(? AS TEXT), CAST(? AS BIGINT))"
		if len(chunk) > 1 {
			rows += ", " + placeholders(len(chunk)-1, 3)
		}
		updated, err := t.exec(ctx, op,
			`UPDATE embedkit_threads SET last_sort = CASE WHEN embedkit_threads.last_sort < v.column3 THEN v.column3 ELSE embedkit_threads.last_sort END, updated_at = ?
			FROM (VALUES `+rows+`) AS v WHERE embedkit_threads.account_id = v.column1 AND embedkit_threads.chat_id = v.column2`,
			args...)
		if err != nil {
			return err
		}
		if updated != int64(len(chunk)) {
			return newErr(op, store.ErrNotFound)
		}
	}
	for chunk := range chunks(msgs, batchRows) {
		args := make([]any, 0, 5*len(chunk))
		for _, m := range chunk {
			args = append(args, m.accountID, m.chatID, m.m.ID, m.m.Sort, bodyText(m.m.Body))
		}
		if err := t.run(ctx, op, upsertMessages(len(chunk)), args...); err != nil {
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
		"SELECT id, sort, body FROM embedkit_thread_messages WHERE account_id = ? AND chat_id = ? ORDER BY sort, id",
		accountID, chatID); err != nil {
		return nil, err
	}
	out := make([]store.ThreadMessage, len(rows))
	for i, r := range rows {
		out[i] = store.ThreadMessage{ID: r.ID, Sort: r.Sort, Body: json.RawMessage(r.Body)}
	}
	return out, nil
}

func (t *txn) DeleteThread(ctx context.Context, accountID int64, chatID string) error {
	const op = "delete thread"
	n, err := t.exec(ctx, op, "DELETE FROM embedkit_threads WHERE account_id = ? AND chat_id = ?", accountID, chatID)
	if err != nil {
		return err
	}
	if n == 0 {
		return newErr(op, store.ErrNotFound)
	}
	return nil
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

// AppendToThreads implements [store.Threads] in its own transaction.
func (s *Store) AppendToThreads(ctx context.Context, appends []store.ThreadAppend) error {
	return write0(ctx, s, func(t *txn) error { return t.AppendToThreads(ctx, appends) })
}

// Messages implements [store.Threads].
func (s *Store) Messages(ctx context.Context, accountID int64, chatID string) ([]store.ThreadMessage, error) {
	return readPrimary(ctx, s, func(t *txn) ([]store.ThreadMessage, error) { return t.Messages(ctx, accountID, chatID) })
}

// DeleteThread implements [store.Threads] in its own transaction.
func (s *Store) DeleteThread(ctx context.Context, accountID int64, chatID string) error {
	return write0(ctx, s, func(t *txn) error { return t.DeleteThread(ctx, accountID, chatID) })
}
