package gormstore

import (
	"context"
	"slices"
	"sync"

	"github.com/embedkit/embedkit/store"
)

// SQLite write transactions are committed in groups. SQLite has one writer,
// so transactions run one after the other anyway; what costs is the commit,
// which writes every page the transaction changed to the WAL. When several
// InTx calls wait, the first of them (the leader) runs the whole group in
// one database transaction, each fn inside its own SAVEPOINT: a fn that fails
// is rolled back to its savepoint and the others are unaffected, exactly as
// if each had its own transaction. One COMMIT then makes the group durable,
// and only after it does any InTx of the group return. Pages shared by the
// group (the sessions table, its indexes, the catalog) are written once.
//
// There is no background goroutine: the leader is a caller of InTx. When it
// is done it hands the lead to the first request still waiting, if any.
// Requests are served in arrival order.

// maxBatch bounds the transactions committed together.
const maxBatch = 32

type batcher struct {
	mu    sync.Mutex
	busy  bool // a leader is running
	queue []*writeReq
}

// writeReq is one InTx attempt waiting for, or running in, a group.
type writeReq struct {
	ctx      context.Context // the caller's
	actx     context.Context // the caller's, bounded by the query timeout
	fn       func(store.Tx) error
	err      error
	panicked bool
	panicVal any
	done     chan struct{} // closed when err is set or lead is true
	lead     bool
}

func (r *writeReq) result() error {
	if r.panicked {
		panic(r.panicVal)
	}
	return r.err
}

func (s *Store) attemptSQLite(ctx, actx context.Context, fn func(tx store.Tx) error) error {
	req := &writeReq{ctx: ctx, actx: actx, fn: fn, done: make(chan struct{})}
	b := &s.batch
	b.mu.Lock()
	if !b.busy {
		b.busy = true
		b.mu.Unlock()
		return s.lead(req)
	}
	b.queue = append(b.queue, req)
	b.mu.Unlock()
	select {
	case <-req.done:
	case <-actx.Done():
		b.mu.Lock()
		if i := slices.Index(b.queue, req); i >= 0 {
			b.queue = slices.Delete(b.queue, i, i+1)
			b.mu.Unlock()
			return wrapErr("wait for writer", actx.Err())
		}
		b.mu.Unlock()
		<-req.done // already taken into a group, or made leader
	}
	if req.lead {
		return s.lead(req)
	}
	return req.result()
}

// lead runs first and the requests waiting behind it as one group, then
// passes the lead on and wakes the group.
func (s *Store) lead(first *writeReq) error {
	b := &s.batch
	b.mu.Lock()
	n := min(len(b.queue), maxBatch-1)
	group := make([]*writeReq, 0, n+1)
	group = append(group, first)
	group = append(group, b.queue[:n]...)
	b.queue = slices.Delete(b.queue, 0, n)
	b.mu.Unlock()

	s.runGroup(group)

	b.mu.Lock()
	var next *writeReq
	if len(b.queue) > 0 {
		next = b.queue[0]
		b.queue = slices.Delete(b.queue, 0, 1)
		next.lead = true
	} else {
		b.busy = false
	}
	b.mu.Unlock()
	if next != nil {
		close(next.done)
	}
	for _, r := range group[1:] {
		close(r.done)
	}
	return first.result()
}

// runGroup runs the requests of group in one transaction on the writer
// connection and sets each request's outcome.
func (s *Store) runGroup(group []*writeReq) {
	fail := func(err error) {
		for _, r := range group {
			if r.err == nil && !r.panicked {
				r.err = err
			}
		}
	}
	// The slot is contended only by migrations, Close and in-memory reads;
	// each member's own deadline is checked before its fn runs.
	actx, cancel := context.WithTimeout(context.Background(), s.cfg.queryTimeout)
	defer cancel()
	w, err := s.acquireWriter(actx)
	if err != nil {
		fail(err)
		return
	}
	defer s.releaseWriter()
	bg := context.WithoutCancel(group[0].ctx)
	ctl := func(sql string) error {
		_, err := w.ExecContext(bg, sql)
		return err
	}
	if err := ctl("BEGIN IMMEDIATE"); err != nil {
		fail(wrapErr("begin", err))
		return
	}
	single := len(group) == 1
	ok := 0
	for _, r := range group {
		if err := r.actx.Err(); err != nil {
			r.err = wrapErr("wait for writer", err)
			continue
		}
		if !single {
			if err := ctl("SAVEPOINT embedkit_tx"); err != nil {
				_ = ctl("ROLLBACK")
				fail(wrapErr("savepoint", err))
				return
			}
		}
		t := &txn{s: s, ex: w, deadline: r.actx, shard: -1}
		r.err, r.panicked, r.panicVal = runFn(r.fn, t)
		t.finished = true
		if r.err == nil && !r.panicked {
			if err := r.actx.Err(); err != nil {
				r.err = wrapErr("commit", err) // ran out of time: not committed
			}
		}
		failed := r.err != nil || r.panicked
		if !single {
			if failed {
				if err := ctl("ROLLBACK TO embedkit_tx"); err != nil {
					_ = ctl("ROLLBACK")
					fail(wrapErr("rollback to savepoint", err))
					return
				}
			}
			if err := ctl("RELEASE embedkit_tx"); err != nil {
				_ = ctl("ROLLBACK")
				fail(wrapErr("release savepoint", err))
				return
			}
		}
		if !failed {
			ok++
		}
	}
	if ok == 0 {
		_ = ctl("ROLLBACK")
		return
	}
	if err := ctl("COMMIT"); err != nil {
		_ = ctl("ROLLBACK")
		fail(wrapErr("commit", err))
	}
}

func runFn(fn func(store.Tx) error, t *txn) (err error, panicked bool, val any) {
	defer func() {
		if v := recover(); v != nil {
			err, panicked, val = nil, true, v
		}
	}()
	return fn(t), false, nil
}
