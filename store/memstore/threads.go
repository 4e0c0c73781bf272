package memstore

import (
	"cmp"
	"context"
	"slices"

	"github.com/embedkit/embedkit/store"
)

func (d *db) createThread(th store.Thread, msgs []store.ThreadMessage) error {
	const op = "create thread"
	if _, ok := d.users[th.UserID]; !ok {
		return notFound(op + ": user")
	}
	key := threadKey{th.AccountID, th.ChatID}
	if _, ok := d.threads[key]; ok {
		return conflict(op)
	}
	th.CreatedAt = d.now(th.CreatedAt)
	if th.UpdatedAt.IsZero() {
		th.UpdatedAt = th.CreatedAt
	} else {
		th.UpdatedAt = norm(th.UpdatedAt)
	}
	set(d, d.threads, key, th)
	nset(d, d.userThreads, th.UserID, key, struct{}{})
	d.putMessages(key, msgs)
	return nil
}

func (d *db) thread(accountID int64, chatID string) (store.Thread, error) {
	th, ok := d.threads[threadKey{accountID, chatID}]
	if !ok {
		return store.Thread{}, notFound("thread")
	}
	return th, nil
}

// deleteThread deletes a thread with its messages.
func (d *db) deleteThread(k threadKey) {
	for _, id := range sortedKeys(d.messages[k]) {
		ndel(d, d.messages, k, id)
	}
	ndel(d, d.userThreads, d.threads[k].UserID, k)
	del(d, d.threads, k)
}

func (d *db) appendMessages(accountID int64, chatID string, lastSort int64, msgs []store.ThreadMessage) error {
	key := threadKey{accountID, chatID}
	th, ok := d.threads[key]
	if !ok {
		return notFound("append messages")
	}
	th.LastSort = max(th.LastSort, lastSort)
	th.UpdatedAt = d.now(zeroTime)
	set(d, d.threads, key, th)
	d.putMessages(key, msgs)
	return nil
}

// putMessages stores copies of msgs in thread key, replacing those with the
// same ID.
func (d *db) putMessages(key threadKey, msgs []store.ThreadMessage) {
	for _, m := range msgs {
		m.Body = clone(m.Body)
		nset(d, d.messages, key, m.ID, m)
	}
}

func (d *db) threadMessages(accountID int64, chatID string) ([]store.ThreadMessage, error) {
	stored := d.messages[threadKey{accountID, chatID}]
	out := make([]store.ThreadMessage, 0, len(stored))
	for _, m := range stored {
		m.Body = clone(m.Body)
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b store.ThreadMessage) int {
		return cmp.Or(cmp.Compare(a.Sort, b.Sort), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// CreateThread implements [store.Threads]. An unknown user is
// [store.ErrNotFound]. A zero CreatedAt is set from the clock, a zero
// UpdatedAt to CreatedAt.
func (s *Store) CreateThread(ctx context.Context, th store.Thread, msgs ...store.ThreadMessage) error {
	return write0(s, ctx, func(d *db) error { return d.createThread(th, msgs) })
}

// Thread implements [store.Threads].
func (s *Store) Thread(ctx context.Context, accountID int64, chatID string) (store.Thread, error) {
	return read(s, ctx, func(d *db) (store.Thread, error) { return d.thread(accountID, chatID) })
}

// AppendMessages implements [store.Threads]; it sets the thread's UpdatedAt
// from the clock.
func (s *Store) AppendMessages(ctx context.Context, accountID int64, chatID string, lastSort int64, msgs []store.ThreadMessage) error {
	return write0(s, ctx, func(d *db) error { return d.appendMessages(accountID, chatID, lastSort, msgs) })
}

// Messages implements [store.Threads]: ordered by Sort, then ID. An unknown
// thread has no messages.
func (s *Store) Messages(ctx context.Context, accountID int64, chatID string) ([]store.ThreadMessage, error) {
	return read(s, ctx, func(d *db) ([]store.ThreadMessage, error) { return d.threadMessages(accountID, chatID) })
}

func (t *txView) CreateThread(ctx context.Context, th store.Thread, msgs ...store.ThreadMessage) error {
	return call0(t, ctx, func(d *db) error { return d.createThread(th, msgs) })
}

func (t *txView) Thread(ctx context.Context, accountID int64, chatID string) (store.Thread, error) {
	return call(t, ctx, func(d *db) (store.Thread, error) { return d.thread(accountID, chatID) })
}

func (t *txView) AppendMessages(ctx context.Context, accountID int64, chatID string, lastSort int64, msgs []store.ThreadMessage) error {
	return call0(t, ctx, func(d *db) error { return d.appendMessages(accountID, chatID, lastSort, msgs) })
}

func (t *txView) Messages(ctx context.Context, accountID int64, chatID string) ([]store.ThreadMessage, error) {
	return call(t, ctx, func(d *db) ([]store.ThreadMessage, error) { return d.threadMessages(accountID, chatID) })
}
