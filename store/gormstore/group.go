package gormstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"gorm.io/gorm"

	"github.com/embedkit/embedkit/store"
)

// group is SQLite's group commit (docs/storage.md): the InTx calls that
// queue share one transaction, which a goroutine of the store's, the
// writer, runs while calls wait: each call's fn under its caller's context
// in a savepoint of its own, then one commit for all. Running the fns
// itself, the writer never holds the write lock while the scheduler finds
// a caller a core.
type group struct {
	mu      sync.Mutex
	waiting []*member
	running bool           // a writer goroutine is draining waiting
	wg      sync.WaitGroup // the writer, for Close
	w       groupTx        // the writer's connection and statements
	keep    bool           // keep w between runs: the pool has room for two more (a smaller pool gets it back: reads need it)
}

type member struct {
	ctx   context.Context
	fn    func(store.Tx) error
	state atomic.Int32 // 0 queued, 1 taken by the writer, 2 given up by the caller
	out   outcome      // its fn's failure; none: the commit's
	done  chan outcome // buffered: the writer never waits for the caller
}

// outcome is a call's error or its commit's, or its fn's panic (errGoexit:
// runtime.Goexit), which the caller's goroutine repeats.
type outcome struct {
	err   error
	panic any
}

func (o outcome) failed() bool { return o.err != nil || o.panic != nil }

var errGoexit = new(int)

const maxGroup = 64 // calls per transaction, so that commits come while calls keep arriving

// errGroupAborted fails the calls of a transaction ended by another call's failure; InTx runs them again.
var errGroupAborted = fmt.Errorf("gormstore: commit: a call sharing the transaction failed: %w", store.ErrUnavailable)

// join runs fn in the group's next transaction; ctx bounds the wait until the writer takes the call.
func (s *Store) join(ctx context.Context, fn func(store.Tx) error) error {
	m := &member{ctx: ctx, fn: fn, done: make(chan outcome, 1)}
	g := s.group
	g.mu.Lock()
	if s.closed.Load() { // checked under g.mu, as Close sets it: no writer starts after Close's Wait
		g.mu.Unlock()
		return errClosed
	}
	g.waiting = append(g.waiting, m)
	if !g.running {
		g.running = true
		g.wg.Go(s.write)
	}
	g.mu.Unlock()
	var o outcome
	select {
	case o = <-m.done:
	case <-ctx.Done():
		if m.state.CompareAndSwap(0, 2) { // the writer skips it
			return wrapErr("begin", ctx.Err())
		}
		o = <-m.done // taken: its writes may commit, so wait for the outcome
	}
	switch o.panic {
	case nil:
		return o.err
	case errGoexit:
		runtime.Goexit()
	}
	panic(o.panic)
}

// write commits groups while calls wait.
func (s *Store) write() {
	for s.commit() {
	}
}

// next takes the next call the writer may run, or nil; with none and last
// set, the writer stops, and gives its connection back unless it keeps it.
func (g *group) next(last bool) *member {
	g.mu.Lock()
	defer g.mu.Unlock()
	for len(g.waiting) > 0 {
		m := g.waiting[0]
		if g.waiting = g.waiting[1:]; m.state.CompareAndSwap(0, 1) {
			return m
		}
	}
	if last {
		g.running = false
		if !g.keep {
			g.w.release()
		}
	}
	return nil
}

// commit runs waiting calls in one transaction and reports whether any
// waited. It runs on a connection rather than in a *sql.Tx, and statements
// under contexts that cannot end: database/sql starts a goroutine for each
// query of a *sql.Tx, or under a context that can.
func (s *Store) commit() bool {
	gtx := &s.group.w
	cur := s.group.next(true)
	if cur == nil {
		return false
	}
	// Calls are answered when the transaction has ended, failed ones too: until then its locks stay.
	var ran []*member
	cerr, committed := errGroupAborted, false
	defer func() {
		for _, m := range ran {
			if !m.out.failed() {
				m.out.err = cerr
			}
			m.done <- m.out
		}
		if cur != nil { // runtime.Goexit in cur's fn ends this writer: its writes go with the transaction
			cur.done <- outcome{panic: errGoexit}
			s.group.wg.Go(s.write)
		}
	}()
	var err error
	if gtx.Conn == nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.queryTimeout)
		gtx.Conn, err = s.sqlDB.Conn(ctx)
		cancel()
	}
	if err == nil {
		defer func() {
			// A transaction that did not commit (its BEGIN, a savepoint or
			// its COMMIT failed: the database broke, or its file did) is
			// rolled back and its connection dropped: after an I/O error
			// SQLite may leave a connection that can never write again.
			if !committed {
				_ = gtx.Rollback()
				_ = gtx.Raw(func(any) error { return driver.ErrBadConn })
				gtx.release()
			}
		}()
		err = gtx.end("BEGIN IMMEDIATE")
	}
	if err != nil {
		cur.done <- outcome{err: wrapErr("begin", err)}
		cur = nil
		return true
	}
	tx := s.db.WithContext(context.Background())
	tx.Statement.ConnPool = gtx
	ok := true
	for n := 1; ok && cur != nil; n++ {
		cur.out, ok = s.step(tx, cur)
		ran = append(ran, cur)
		if cur = nil; ok && n < maxGroup {
			cur = s.group.next(false)
		}
	}
	if ok {
		err = gtx.Commit()
		cerr, committed = wrapErr("commit", err), err == nil
	}
	return true
}

// step runs m's fn in a savepoint, which a failure or a panic rolls back;
// !ok: the transaction is lost and commit ends it.
func (s *Store) step(tx *gorm.DB, m *member) (o outcome, ok bool) {
	if err := m.ctx.Err(); err != nil {
		return outcome{err: wrapErr("begin", err)}, true
	}
	if err := s.group.w.end("SAVEPOINT embedkit_call"); err != nil {
		return outcome{err: wrapErr("begin", err)}, false
	}
	var broke error // the database's own error, if a statement failed
	func() {
		defer func() {
			if p := recover(); p != nil {
				o = outcome{panic: p}
			}
		}()
		o.err, broke = s.run(tx, m.fn)
	}()
	end := "RELEASE embedkit_call"
	if o.failed() {
		end = "ROLLBACK TO embedkit_call"
	}
	xerr := s.group.w.end(end)
	if xerr != nil && !o.failed() {
		o.err = errGroupAborted
	}
	// A statement that failed for the database's sake (an I/O error, a
	// file that cannot be written) ends the transaction: its connection
	// may be unable to write for good (SQLite opens a file it cannot write
	// read-only), and commit drops it; the others run again on another.
	// What the call itself returned is not judged: it may quote a client.
	if broke != nil && !errors.Is(broke, context.DeadlineExceeded) { // a statement out of time breaks nothing
		if kind, retry := classify(broke); kind == store.ErrUnavailable && !retry {
			return o, false
		}
	}
	return o, xerr == nil
}

// run runs fn on the transaction tx; a failed statement fails it. abort
// is that statement's error.
func (s *Store) run(tx *gorm.DB, fn func(store.Tx) error) (err, abort error) {
	t := &txn{s: s, db: tx, inTx: true}
	err = fn(t)
	if t.abort != nil && (err == nil || isRetryable(t.abort)) {
		err = t.abort
	}
	return err, t.abort
}

// groupTx is the group's connection, in its transaction, as GORM's pool;
// Commit and Rollback make it a transaction to GORM's plugins (dbresolver
// leaves its statements on it). A started statement is not interrupted by
// its context (interrupting SQLite rolls back the whole transaction, which
// other calls share); a call whose context ended fails before its next.
type groupTx struct{ *sql.Conn }

func (t *groupTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return t.Conn.ExecContext(context.WithoutCancel(ctx), q, args...)
}

func (t *groupTx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return t.Conn.QueryContext(context.WithoutCancel(ctx), q, args...)
}

func (t *groupTx) Commit() error   { return t.end("COMMIT") }
func (t *groupTx) Rollback() error { return t.end("ROLLBACK") }

func (t *groupTx) end(q string) error {
	_, err := t.ExecContext(context.Background(), q)
	return err
}

func (t *groupTx) release() {
	if t.Conn != nil {
		_ = t.Conn.Close()
		t.Conn = nil
	}
}
