package gormstore

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"sync"

	"gorm.io/gorm"

	"github.com/embedkit/embedkit/store"
)

// group is SQLite's group commit. SQLite writes one transaction at a time
// and a commit (the changed pages written to the WAL) costs more than the
// few statements of a request, so the InTx calls that queue for the writer
// share one transaction: the first leads and hands it to the waiting calls
// one by one, each running its fn on its own goroutine under its own
// context, in a savepoint that undoes that call alone if it fails; one
// commit ends them all. The transaction runs under a context of its own.
type group struct {
	mu      sync.Mutex
	waiting []*member
	leading bool
}

type member struct {
	ctx  context.Context
	turn chan *gorm.DB // the shared transaction; nil: lead the next one
	ran  chan error    // fn's result, back to the leader
	done chan error    // the commit's result
}

// maxGroup bounds the calls of a transaction, so that a leader returns
// while calls keep arriving.
const maxGroup = 64

// errGroupAborted fails the calls of a transaction that ended for another
// call's failure; InTx runs them again.
var errGroupAborted = fmt.Errorf("gormstore: commit: a call sharing the transaction failed: %w", store.ErrUnavailable)

// join runs fn in the group's next transaction; ctx bounds the wait.
func (s *Store) join(ctx context.Context, fn func(store.Tx) error) error {
	m := &member{ctx: ctx, turn: make(chan *gorm.DB), ran: make(chan error), done: make(chan error, 1)}
	g := s.group
	g.mu.Lock()
	if !g.leading {
		g.leading = true
		g.mu.Unlock()
		return s.lead(fn)
	}
	g.waiting = append(g.waiting, m)
	g.mu.Unlock()
	select {
	case tx := <-m.turn:
		if tx == nil {
			return s.lead(fn)
		}
		told := false
		defer func() {
			if !told { // fn panicked or ended the goroutine: undo its writes
				m.ran <- errGroupAborted
			}
		}()
		err := s.run(tx, fn)
		if told = true; err != nil {
			m.ran <- err
			return err
		}
		m.ran <- nil
		return <-m.done
	case <-ctx.Done(): // the leader sees it too and skips this call
		return wrapErr("begin", ctx.Err())
	}
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

// lead runs fn, then the waiting calls, in one transaction, and hands the
// lead on.
func (s *Store) lead(fn func(store.Tx) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.queryTimeout)
	defer cancel()
	var ran []*member // waiting for the commit
	cerr := errGroupAborted
	defer func() { // also after a panic of fn
		for _, m := range ran {
			m.done <- cerr
		}
		s.handOff()
	}()
	tx := s.db.WithContext(ctx).Begin()
	if tx.Error != nil {
		return wrapErr("begin", tx.Error)
	}
	defer func() { _ = tx.Rollback().Error }() // after the commit, a no-op
	conn := &groupTx{tx.Statement.ConnPool}
	tx.Statement.ConnPool = conn
	// step runs one call in a savepoint; !ok: the transaction is lost.
	bg := context.Background() // for statements that cannot block: no goroutine in go-sqlite3
	step := func(call func() error) (err error, ok bool) {
		if _, err := conn.ExecContext(bg, "SAVEPOINT embedkit_call"); err != nil {
			return err, false
		}
		end := "RELEASE embedkit_call"
		if err = call(); err != nil {
			end = "ROLLBACK TO embedkit_call"
		}
		_, xerr := conn.ExecContext(bg, end)
		return err, xerr == nil
	}
	selfErr, ok := step(func() error { return s.run(tx, fn) })
	for n := 1; ok && n < maxGroup; {
		s.group.mu.Lock()
		take := s.group.waiting[:min(len(s.group.waiting), maxGroup-n)]
		s.group.waiting = s.group.waiting[len(take):]
		s.group.mu.Unlock()
		if len(take) == 0 {
			break
		}
		for i, m := range take {
			var err error
			if err, ok = step(func() error {
				select {
				case m.turn <- tx:
					return <-m.ran
				case <-m.ctx.Done():
					return m.ctx.Err()
				}
			}); err == nil {
				ran = append(ran, m)
			}
			if !ok { // the calls not run yet go to the next leader
				s.group.mu.Lock()
				s.group.waiting = append(take[i+1:len(take):len(take)], s.group.waiting...)
				s.group.mu.Unlock()
				break
			}
			n++
		}
	}
	if ok {
		cerr = wrapErr("commit", tx.Commit().Error)
	}
	return cmp.Or(selfErr, cerr)
}

// handOff passes the lead to the first call still waiting.
func (s *Store) handOff() {
	g := s.group
	for {
		g.mu.Lock()
		if len(g.waiting) == 0 {
			g.leading = false
			g.mu.Unlock()
			return
		}
		m := g.waiting[0]
		g.waiting = g.waiting[1:]
		g.mu.Unlock()
		select {
		case m.turn <- nil:
			return
		case <-m.ctx.Done():
		}
	}
}

// groupTx is the group's transaction as GORM's connection pool. A
// statement, once started, is not interrupted by its context (the driver
// gets the context without its cancellation): interrupting a SQLite
// statement rolls back the whole transaction, which other calls share. A
// call whose context ended fails before its next statement.
type groupTx struct{ gorm.ConnPool }

func (t *groupTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return t.ConnPool.ExecContext(context.WithoutCancel(ctx), q, args...)
}

func (t *groupTx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return t.ConnPool.QueryContext(context.WithoutCancel(ctx), q, args...)
}

func (t *groupTx) Commit() error   { return t.ConnPool.(gorm.TxCommitter).Commit() }
func (t *groupTx) Rollback() error { return t.ConnPool.(gorm.TxCommitter).Rollback() }
