package gormstore

import (
	"context"

	"github.com/embedkit/embedkit/store"
)

// attemptSQLite runs one attempt of InTx in its own database transaction on
// the writer connection, which transactions take in arrival order (SQLite
// has one writer). Every statement carries the caller's context values, so
// that a host's logger and tracing callbacks see it under its own request;
// it runs without the context's cancellation (go-sqlite3 runs every
// statement of a cancelable context on a new goroutine, which costs more
// than a small statement), and the deadline is checked between statements
// (txn.check) and before the commit.
func (s *Store) attemptSQLite(ctx, actx context.Context, fn func(tx store.Tx) error) error {
	if err := s.acquireWriter(actx); err != nil {
		return err
	}
	defer s.releaseWriter()
	tx := s.on(context.WithoutCancel(ctx), s.writer).Begin()
	if tx.Error != nil {
		return wrapErr("begin", tx.Error)
	}
	t := &txn{s: s, db: tx, inTx: true, deadline: actx, shard: -1}
	committed := false
	defer func() {
		t.finished = true
		if !committed {
			_ = tx.Rollback().Error
		}
	}()
	if err := fn(t); err != nil {
		if t.abort != nil && isRetryable(t.abort) {
			return t.abort
		}
		return err
	}
	if t.abort != nil {
		return t.abort // a statement failed: nothing of fn is kept
	}
	if err := actx.Err(); err != nil {
		return wrapErr("commit", err) // ran out of time: not committed
	}
	committed = true
	if err := tx.Commit().Error; err != nil {
		_ = tx.Rollback().Error
		return wrapErr("commit", err)
	}
	return nil
}
