package gormstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/embedkit/embedkit/internal/wire"
	"github.com/embedkit/embedkit/store"
)

// waiting returns how many calls wait for st's writer.
func waiting(st *Store) int {
	st.group.mu.Lock()
	defer st.group.mu.Unlock()
	return len(st.group.waiting)
}

// TestGroupCommit holds one SQLite transaction open until ten more calls
// wait for the writer, then checks that they shared one transaction, each
// under its own context, and that a failing call, a panicking one and one
// whose context ended while it waited left no trace and cost the others
// nothing.
func TestGroupCommit(t *testing.T) {
	st := openGroupStore(t)
	ctx := t.Context()
	type key struct{}
	const n = 10
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		pools = map[any]bool{}
		errs  = make([]error, n)
	)
	started, release := make(chan struct{}), make(chan struct{})
	wg.Go(func() {
		_ = st.InTx(ctx, func(tx store.Tx) error {
			close(started)
			<-release
			return nil
		})
	})
	<-started
	gone, cancel := context.WithCancel(ctx)
	for i := range n {
		wg.Go(func() {
			defer func() { _ = recover() }()
			c := context.WithValue(ctx, key{}, i)
			if i == 9 {
				c = context.WithValue(gone, key{}, i)
			}
			errs[i] = st.InTx(c, func(tx store.Tx) error {
				if _, err := tx.SaveAccount(c, store.Account{Name: fmt.Sprint("a", i)}); err != nil {
					return err
				}
				mu.Lock()
				pools[tx.(*txn).db.Statement.ConnPool] = true
				mu.Unlock()
				if got := tx.(*txn).db.WithContext(c).Statement.Context.Value(key{}); got != i {
					t.Errorf("call %d runs under the context of %v", i, got)
				}
				switch i {
				case 3:
					return errors.New("refused")
				case 5:
					panic("boom")
				}
				return nil
			})
		})
	}
	for waiting(st) < n {
		time.Sleep(time.Millisecond)
	}
	cancel()
	close(release)
	wg.Wait()
	for i := range n {
		_, err := st.AccountByName(ctx, fmt.Sprint("a", i))
		switch i {
		case 3, 5, 9:
			if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("call %d left its account: %v", i, err)
			}
		default:
			if err != nil || errs[i] != nil {
				t.Errorf("call %d: %v, account: %v", i, errs[i], err)
			}
		}
	}
	if !errors.Is(errs[9], context.Canceled) {
		t.Errorf("call with an ended context: %v", errs[9])
	}
	if len(pools) != 1 {
		t.Errorf("the calls ran in %d transactions, want 1", len(pools))
	}
}

// TestGroupWriterEnds checks that the writer goroutine ends when no call
// waits, starts again for the next call, and that Close waits for it: no
// goroutine of the store outlives Close.
func TestGroupWriterEnds(t *testing.T) {
	st := openGroupStore(t)
	ctx := t.Context()
	running := func() bool { return writerRunning(st) }
	for round := range 2 {
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				if _, err := st.SaveAccount(ctx, store.Account{Name: fmt.Sprint("a", round, "-", i)}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		for deadline := time.Now().Add(5 * time.Second); running(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the writer still runs with no call waiting", round)
			}
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = st.InTx(ctx, func(store.Tx) error { time.Sleep(50 * time.Millisecond); return nil })
	}()
	for !running() {
		time.Sleep(time.Millisecond)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if running() {
		t.Error("Close returned while the writer ran")
	}
	<-done
	if n := st.sqlDB.Stats().InUse; n != 0 {
		t.Errorf("%d connections in use after Close, want the writer's given back", n)
	}
}

// TestGroupWriterKeepsConnection checks that between its runs the writer
// keeps its connection when the pool has room for two
// more, and gives it back to a pool of two.
func TestGroupWriterKeepsConnection(t *testing.T) {
	for _, pool := range []int{0, 5, 2} {
		st := openGroupStore(t, pool)
		var first *sql.Conn
		for i := range 2 {
			if _, err := st.SaveAccount(t.Context(), store.Account{Name: fmt.Sprint("a", i)}); err != nil {
				t.Fatal(err)
			}
			for st.sqlDB.Stats().InUse > 1 || writerRunning(st) {
				time.Sleep(time.Millisecond)
			}
			st.group.mu.Lock()
			conn := st.group.w.Conn
			st.group.mu.Unlock()
			switch keep := pool != 2; {
			case keep && (conn == nil || i == 1 && conn != first):
				t.Errorf("pool %d, run %d: connection %v (the first's: %v), want it kept", pool, i, conn != nil, conn == first)
			case !keep && (conn != nil || st.sqlDB.Stats().InUse != 0):
				t.Errorf("pool %d, run %d: the idle writer holds its connection", pool, i)
			}
			first = conn
		}
	}
}

// TestGroupKeepsConnection checks that the writer keeps its connection
// from one transaction to the next, and gives it back when it ends.
func TestGroupKeepsConnection(t *testing.T) {
	st := openGroupStore(t)
	w := &st.group.w
	var conn *sql.Conn
	for i := range 3 {
		m := &member{ctx: t.Context(), done: make(chan outcome, 1), fn: func(tx store.Tx) error {
			_, err := tx.SaveAccount(t.Context(), store.Account{Name: fmt.Sprint("a", i)})
			return err
		}}
		st.group.waiting = append(st.group.waiting, m)
		if !st.commit() {
			t.Fatal("commit found no call")
		}
		if o := <-m.done; o.err != nil {
			t.Fatal(o.err)
		}
		if i > 0 && w.Conn != conn {
			t.Fatalf("transaction %d: connection not kept", i)
		}
		conn = w.Conn
	}
	w.release()
	if n := st.sqlDB.Stats().InUse; n != 0 {
		t.Errorf("after release: %d connections in use, want none", n)
	}
}

func writerRunning(st *Store) bool {
	st.group.mu.Lock()
	defer st.group.mu.Unlock()
	return st.group.running
}

// openGroupStore opens a store on a SQLite file of its own, closed at the
// test's end, with a pool of at most pool[0] connections if given.
func openGroupStore(t *testing.T, pool ...int) *Store {
	t.Helper()
	db, err := gorm.Open(sqlite.Open("file:"+t.TempDir()+"/g.db?_foreign_keys=on&_txlock=immediate&_journal_mode=WAL"),
		&gorm.Config{SkipDefaultTransaction: true, Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if len(pool) > 0 {
		sqlDB, _ := db.DB()
		sqlDB.SetMaxOpenConns(pool[0])
	}
	st, err := OpenDB(db, WithCloseDB())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestCloseDuringWrites closes a store on a host's pool (left open) while
// calls keep coming: no writer starts after Close, which leaves no
// connection of the host's pool in use, and later calls are unavailable.
func TestCloseDuringWrites(t *testing.T) {
	for round := range 20 {
		db, err := gorm.Open(sqlite.Open("file:"+t.TempDir()+"/c.db?_foreign_keys=on&_txlock=immediate&_journal_mode=WAL"),
			&gorm.Config{SkipDefaultTransaction: true, Logger: logger.Discard})
		if err != nil {
			t.Fatal(err)
		}
		sqlDB, _ := db.DB()
		st, err := OpenDB(db)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				for n := 0; ; n++ {
					if _, err := st.SaveAccount(t.Context(), store.Account{Name: fmt.Sprint("a", i, "-", n)}); err != nil {
						if !errors.Is(err, store.ErrUnavailable) {
							t.Errorf("after Close: %v, want ErrUnavailable", err)
						}
						return
					}
				}
			})
		}
		time.Sleep(time.Duration(round) * time.Millisecond)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if n := sqlDB.Stats().InUse; n != 0 || writerRunning(st) {
			t.Fatalf("round %d: %d connections of the host's pool in use after Close (writer running: %v)", round, n, writerRunning(st))
		}
		_ = sqlDB.Close()
	}
}

// TestCallErrorDoesNotEndGroup: what a call returns (here a 400 that
// quotes a client's text, "timeout") never ends its group: the calls that
// ran before it in the group run once, and the writer keeps its
// connection. Only a statement that failed for the database's sake ends
// it (TestSQLiteRecoversFromWriteErrors, in internal/faulttest).
func TestCallErrorDoesNotEndGroup(t *testing.T) {
	st := openGroupStore(t)
	ctx := t.Context()
	started, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	var runsA atomic.Int32
	wg.Go(func() {
		_ = st.InTx(ctx, func(tx store.Tx) error {
			select {
			case <-started:
			default:
				close(started)
			}
			<-release
			return nil
		})
	})
	<-started
	wg.Go(func() {
		_ = st.InTx(ctx, func(tx store.Tx) error {
			runsA.Add(1)
			_, err := tx.SaveAccount(ctx, store.Account{Name: "a"})
			return err
		})
	})
	for waiting(st) < 1 {
		time.Sleep(time.Millisecond)
	}
	wg.Go(func() {
		_ = st.InTx(ctx, func(tx store.Tx) error {
			return wire.BadRequest(`sessionSettings.internalId: internal user "timeout" not found`)
		})
	})
	for waiting(st) < 2 {
		time.Sleep(time.Millisecond)
	}
	conn := st.group.w.Conn
	close(release)
	wg.Wait()
	if n := runsA.Load(); n != 1 {
		t.Errorf("the call before the failing one ran %d times, want 1", n)
	}
	if st.group.w.Conn != conn {
		t.Error("the writer's connection was dropped")
	}
}
