package gormstore

import (
	"context"
	"slices"
	"sync"

	"gorm.io/gorm"

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
//
// Each fn's statements carry its own caller's context (its values, not its
// cancellation), so that a host's logger and tracing see every statement
// under the request that caused it; only the group's BEGIN, COMMIT and
// savepoints, which GORM does not report, belong to no request.
//
// Why it is kept: without it (each transaction committing alone, in turn)
// generate-session on a SQLite file was markedly slower and chat turns
// queued past the query timeout under load; docs/storage.md has the
// figures.
//
// The fns of a group run on the leader's goroutine (handing each its own
// goroutine back and forth halved the throughput on a loaded two-core
// machine). A panic in a fn is recovered and raised again in its caller. A
// fn that calls runtime.Goexit (t.Fatal in a test) ends the leader's
// goroutine: the group is then finished by a new goroutine, so that the
// store does not stall, and that fn's writes are rolled back.

// maxBatch bounds the transactions committed together.
const maxBatch = 32

// savepoint is the name of the savepoint of each member of a group.
const savepoint = "embedkit_tx"

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
	exited   bool          // fn called runtime.Goexit
	done     chan struct{} // closed when the outcome is set or lead is true
	lead     bool
}

func (r *writeReq) result() error {
	if r.panicked {
		panic(r.panicVal)
	}
	return r.err
}

func (r *writeReq) failed() bool { return r.err != nil || r.panicked || r.exited }

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

// group is one database transaction running the fns of several requests.
// Only one goroutine works on a group at a time.
type group struct {
	s      *Store
	reqs   []*writeReq // reqs[0] is the leader
	tx     *gorm.DB    // the GORM transaction on the writer connection
	cancel context.CancelFunc
	held   bool // the writer slot is taken
	open   bool // BEGIN succeeded and no COMMIT or ROLLBACK yet
	next   int  // the member to run next
	ok     int  // members whose fn succeeded
}

// lead runs first and the requests waiting behind it as one group, then
// passes the lead on and wakes the group. Nothing here is deferred: when a
// fn calls runtime.Goexit, the goroutine that takes over finishes the group.
func (s *Store) lead(first *writeReq) error {
	b := &s.batch
	b.mu.Lock()
	n := min(len(b.queue), maxBatch-1)
	reqs := make([]*writeReq, 0, n+1)
	reqs = append(reqs, first)
	reqs = append(reqs, b.queue[:n]...)
	b.queue = slices.Delete(b.queue, 0, n)
	b.mu.Unlock()

	g := &group{s: s, reqs: reqs}
	g.start()
	g.run()
	g.finish()
	return first.result()
}

func (g *group) fail(err error) {
	for _, r := range g.reqs {
		if !r.failed() {
			r.err = err
		}
	}
	g.next = len(g.reqs)
}

// ctl runs a savepoint statement. Savepoints are transaction control, like
// the BEGIN and COMMIT of the group (which GORM's Begin and Commit do not
// report either): they run on the writer connection directly, which saves
// two passes through GORM's callback chain per member of a group.
func (g *group) ctl(stmt string) error {
	_, err := g.s.writer.ExecContext(context.WithoutCancel(g.reqs[0].ctx), stmt)
	return err
}

// abort rolls the whole transaction back after a failed savepoint.
func (g *group) abort(err error) {
	_ = g.tx.Rollback().Error
	g.open = false
	g.fail(err)
	g.ok = 0
}

func (g *group) start() {
	// The slot is contended only by migrations, Close and in-memory reads;
	// each member's own deadline is checked before its fn runs.
	actx, cancel := context.WithTimeout(context.Background(), g.s.cfg.queryTimeout)
	g.cancel = cancel
	if err := g.s.acquireWriter(actx); err != nil {
		g.fail(err)
		return
	}
	g.held = true
	g.tx = g.s.wdb.Begin()
	if err := g.tx.Error; err != nil {
		g.fail(wrapErr("begin", err))
		return
	}
	g.open = true
}

// run runs the members' fns from g.next on.
func (g *group) run() {
	single := len(g.reqs) == 1
	for g.next < len(g.reqs) {
		r := g.reqs[g.next]
		g.next++
		if err := r.actx.Err(); err != nil {
			r.err = wrapErr("wait for writer", err)
			continue
		}
		if !single {
			if err := g.ctl("SAVEPOINT " + savepoint); err != nil {
				g.abort(wrapErr("savepoint", err))
				return
			}
		}
		g.runFn(r)
		g.after(r)
	}
}

// after closes the savepoint of r once its fn has ended.
func (g *group) after(r *writeReq) {
	if !r.failed() {
		if err := r.actx.Err(); err != nil {
			r.err = wrapErr("commit", err) // ran out of time: not committed
		}
	}
	if len(g.reqs) > 1 {
		if r.failed() {
			if err := g.ctl("ROLLBACK TO " + savepoint); err != nil {
				g.abort(wrapErr("rollback to savepoint", err))
				return
			}
		}
		if err := g.ctl("RELEASE " + savepoint); err != nil {
			g.abort(wrapErr("release savepoint", err))
			return
		}
	}
	if !r.failed() {
		g.ok++
	}
}

// runFn runs the fn of r. A panic is recovered into r. On runtime.Goexit the
// current goroutine cannot go on, so a new one finishes the group.
func (g *group) runFn(r *writeReq) {
	// The member's statements carry its context without its cancellation:
	// go-sqlite3 runs every statement of a cancelable context on a new
	// goroutine, which costs more than the statement; deadlines are checked
	// between statements instead (txn.check).
	t := &txn{s: g.s, db: g.tx, ctx: context.WithoutCancel(r.ctx), inTx: true, deadline: r.actx, shard: -1}
	normal := false
	defer func() {
		t.finished = true
		if normal {
			return
		}
		if v := recover(); v != nil {
			r.panicked, r.panicVal = true, v
			return
		}
		r.exited = true
		go func() {
			g.after(r)
			g.run()
			g.finish()
		}()
	}()
	r.err = r.fn(t)
	if r.err == nil && t.abort != nil {
		r.err = t.abort // a statement failed: nothing of fn is kept
	}
	normal = true
}

// finish commits or rolls back, releases the writer, passes the lead on and
// wakes the members other than the leader.
func (g *group) finish() {
	if g.open {
		if g.ok == 0 {
			_ = g.tx.Rollback().Error
		} else if err := g.tx.Commit().Error; err != nil {
			_ = g.tx.Rollback().Error
			for _, r := range g.reqs {
				if !r.failed() {
					r.err = wrapErr("commit", err)
				}
			}
		}
		g.open = false
	}
	if g.held {
		g.s.releaseWriter()
	}
	g.cancel()

	b := &g.s.batch
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
	// The next leader is woken last: the goroutine woken last is the one
	// the scheduler runs next on this P (runnext), so the writer is not
	// left idle while the members of this group, woken before it, queue in
	// front of it.
	for _, r := range g.reqs[1:] {
		close(r.done)
	}
	if next != nil {
		close(next.done)
	}
}
