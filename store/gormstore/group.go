package gormstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"gorm.io/gorm"

	"github.com/embedkit/embedkit/store"
)

// group is SQLite's group commit. SQLite writes one transaction at a time
// and a commit (the changed pages written to the WAL) costs more than the
// few statements of a request, so the InTx calls that queue for the writer
// share one transaction. A goroutine of the store's, the writer, runs their
// fns one after another, each under its caller's context and in a savepoint
// that undoes that call alone if it fails; one commit ends them all. The
// writer runs the fns itself, rather than handing the transaction to each
// caller's goroutine in turn, so that the write lock is never held while
// the scheduler finds a caller a core. It runs while calls wait and ends
// when none do; [Store.Close] waits for it.
type group struct {
	mu      sync.Mutex
	waiting []*member
	running bool           // a writer goroutine is draining waiting
	wg      sync.WaitGroup // the writer, for Close
}

type member struct {
	ctx   context.Context
	fn    func(store.Tx) error
	state atomic.Int32 // queued, taken by the writer or given up by its caller
	done  chan outcome // buffered: the writer never waits for the caller
}

const (
	queued int32 = iota
	taken
	givenUp
)

// outcome is a call's result: its error or the commit's, or how its fn
// ended the writer's stack (a panic, runtime.Goexit), which the caller's
// goroutine then repeats.
type outcome struct {
	err      error
	panicked bool
	panicVal any
	exited   bool
}

// maxGroup bounds the calls of a transaction, so that a commit comes while
// calls keep arriving.
const maxGroup = 64

// errGroupAborted fails the calls of a transaction that ended for another
// call's failure; InTx runs them again.
var errGroupAborted = fmt.Errorf("gormstore: commit: a call sharing the transaction failed: %w", store.ErrUnavailable)

// join runs fn in the group's next transaction; ctx bounds the wait until
// the writer takes the call.
func (s *Store) join(ctx context.Context, fn func(store.Tx) error) error {
	m := &member{ctx: ctx, fn: fn, done: make(chan outcome, 1)}
	g := s.group
	g.mu.Lock()
	g.waiting = append(g.waiting, m)
	if !g.running {
		g.running = true
		g.wg.Add(1)
		go s.write()
	}
	g.mu.Unlock()
	var o outcome
	select {
	case o = <-m.done:
	case <-ctx.Done():
		if m.state.CompareAndSwap(queued, givenUp) { // the writer skips it
			return wrapErr("begin", ctx.Err())
		}
		o = <-m.done // taken: its writes may commit, so wait for the outcome
	}
	switch {
	case o.exited:
		runtime.Goexit()
	case o.panicked:
		panic(o.panicVal)
	}
	return o.err
}

// write commits groups while calls wait. A fn that calls runtime.Goexit
// ends this goroutine: another takes over.
func (s *Store) write() {
	g := s.group
	clean := false
	defer func() {
		if !clean { // still running: hand over, or stop
			g.mu.Lock()
			if g.running = len(g.waiting) > 0; g.running {
				g.wg.Add(1)
				go s.write()
			}
			g.mu.Unlock()
		}
		g.wg.Done()
	}()
	for s.commit() {
	}
	clean = true
}

// next takes the next waiting call the writer may run, or nil; with none
// and last set, the writer stops.
func (g *group) next(last bool) *member {
	g.mu.Lock()
	defer g.mu.Unlock()
	for len(g.waiting) > 0 {
		m := g.waiting[0]
		g.waiting = g.waiting[1:]
		if m.state.CompareAndSwap(queued, taken) {
			return m
		}
	}
	if last {
		g.running = false
	}
	return nil
}

// commit runs waiting calls in one transaction and reports whether any
// call waited.
func (s *Store) commit() bool {
	first := s.group.next(true)
	if first == nil {
		return false
	}
	// Statements run on a connection of their own rather than in a *sql.Tx,
	// under contexts that cannot end: database/sql starts a goroutine for
	// each query of a transaction, or under a context that can.
	bg := context.Background()
	ctx, cancel := context.WithTimeout(bg, s.cfg.queryTimeout) // to get the connection
	defer cancel()
	var ran []*member // waiting for the commit
	cur := first      // running; set after its fn ended the goroutine
	cerr := errGroupAborted
	defer func() {
		if cur != nil { // runtime.Goexit in cur's fn: its writes go with the transaction
			cur.done <- outcome{exited: true}
		}
		for _, m := range ran {
			m.done <- outcome{err: cerr}
		}
	}()
	conn, err := s.sqlDB.Conn(ctx)
	if err == nil {
		_, err = conn.ExecContext(bg, "BEGIN IMMEDIATE")
		if err != nil {
			_ = conn.Close()
		}
	}
	if err != nil {
		cur.done <- outcome{err: wrapErr("begin", err)}
		cur = nil
		return true
	}
	gtx := &groupTx{conn}
	committed := false
	defer func() {
		if !committed {
			if err := gtx.Rollback(); err != nil {
				_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // still in a transaction: not back to the pool
			}
		}
		_ = conn.Close()
	}()
	tx := s.db.WithContext(bg)
	tx.Statement.ConnPool = gtx
	ok := true
	for n := 0; ok && cur != nil; n++ {
		var o outcome
		o, ok = s.step(bg, tx, cur)
		if o.err == nil && !o.panicked {
			ran = append(ran, cur)
		} else {
			cur.done <- o
		}
		if cur = nil; ok && n+1 < maxGroup {
			cur = s.group.next(false)
		}
	}
	if ok {
		err := gtx.Commit()
		committed, cerr = err == nil, wrapErr("commit", err)
	}
	return true
}

// step runs m's fn in a savepoint, which a failure rolls back; !ok: the
// transaction is lost and commit ends it.
func (s *Store) step(bg context.Context, tx *gorm.DB, m *member) (o outcome, ok bool) {
	conn := tx.Statement.ConnPool
	if err := m.ctx.Err(); err != nil {
		return outcome{err: wrapErr("begin", err)}, true
	}
	if _, err := conn.ExecContext(bg, "SAVEPOINT embedkit_call"); err != nil {
		return outcome{err: wrapErr("begin", err)}, false
	}
	o = s.call(tx, m.fn)
	end := "RELEASE embedkit_call"
	if o.err != nil || o.panicked {
		end = "ROLLBACK TO embedkit_call"
	}
	_, xerr := conn.ExecContext(bg, end)
	if xerr != nil && o.err == nil && !o.panicked {
		o.err = errGroupAborted
	}
	return o, xerr == nil
}

// call runs fn on tx, turning a panic into an outcome.
func (s *Store) call(tx *gorm.DB, fn func(store.Tx) error) (o outcome) {
	defer func() {
		if p := recover(); p != nil {
			o = outcome{panicked: true, panicVal: p}
		}
	}()
	return outcome{err: s.run(tx, fn)}
}

// run runs fn on the transaction tx; a failed statement fails it.
func (s *Store) run(tx *gorm.DB, fn func(store.Tx) error) error {
	t := &txn{s: s, db: tx, inTx: true}
	err := fn(t)
	if t.abort != nil && (err == nil || isRetryable(t.abort)) {
		err = t.abort
	}
	return err
}

// groupTx is the group's connection, in its transaction, as GORM's
// connection pool. A statement, once started, is not interrupted by its
// context (the driver gets the context without its cancellation):
// interrupting a SQLite statement rolls back the whole transaction, which
// other calls share. A call whose context ended fails before its next
// statement.
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

// Commit and Rollback make it a transaction to GORM's plugins (dbresolver
// leaves its statements where they are).
func (t *groupTx) Commit() error   { return t.end("COMMIT") }
func (t *groupTx) Rollback() error { return t.end("ROLLBACK") }

func (t *groupTx) end(q string) error {
	_, err := t.Conn.ExecContext(context.Background(), q)
	return err
}

func (t *groupTx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return t.Conn.QueryRowContext(context.WithoutCancel(ctx), q, args...)
}
