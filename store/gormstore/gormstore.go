package gormstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/embedkit/embedkit/store"
)

// Store is a [store.Store] backed by SQLite or PostgreSQL through a
// *gorm.DB. It is safe for concurrent use. Its methods run outside any
// caller transaction: a method of one statement runs alone, a method of
// several runs in a transaction of its own.
type Store struct {
	txn
	cfg config
	pg  bool
	// db is the host's handle in a session of its own (see OpenDB).
	db *gorm.DB
	// sqlDB is the handle's connection pool, closed by Close only when
	// the store owns it (WithCloseDB).
	sqlDB *sql.DB

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ store.Store = (*Store)(nil)

// OpenDB returns a store that runs every statement through db, the host's
// GORM handle on SQLite or PostgreSQL, after migrating embedkit's tables
// (see [Migrate]). The store uses db's connection pool as it is; the host
// keeps its handle: [Store.Close] closes it only with [WithCloseDB]. db's
// logger, callbacks and plugins (tracing, metrics, gorm.io/plugin/dbresolver)
// see each statement.
//
// On SQLite, the connections need the settings of the sqlite sub-package's
// Dialector (foreign keys, busy timeout, BEGIN IMMEDIATE), and the store
// keeps its statements prepared on each connection (GORM's PrepareStmt):
// preparing is most of the cost of a small SQLite statement. pgx caches
// PostgreSQL's prepared statements itself.
func OpenDB(db *gorm.DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, errors.New("gormstore: OpenDB: nil *gorm.DB")
	}
	cfg := newConfig(opts)
	s := &Store{cfg: cfg}
	switch name := db.Dialector.Name(); name {
	case "postgres":
		s.pg = true
	case "sqlite", "sqlite3":
	default:
		return nil, fmt.Errorf("gormstore: OpenDB: unsupported dialect %q", name)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, wrapErr("open", err)
	}
	s.sqlDB = sqlDB
	// A session of its own: the host's later Where/Scopes on db do not
	// leak into embedkit's statements, and neither do ours into the host's.
	s.db = db.Session(&gorm.Session{NewDB: true, SkipDefaultTransaction: true, PrepareStmt: !s.pg})
	s.txn = txn{s: s, db: s.db}
	ctx, cancel := context.WithTimeout(context.Background(), 4*cfg.queryTimeout)
	defer cancel()
	// Migrations run without prepared statements: they change the schema.
	if err := Migrate(ctx, db.Session(&gorm.Session{NewDB: true})); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

func newConfig(opts []Option) config {
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	return cfg
}

// Close closes db's connection pool when the store owns it ([WithCloseDB]).
// Calls after Close fail with an error wrapping [store.ErrUnavailable].
// Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		if p, ok := s.db.ConnPool.(*gorm.PreparedStmtDB); ok {
			p.Close()
		}
		if s.cfg.closeDB {
			s.closeErr = s.sqlDB.Close()
		}
	})
	return s.closeErr
}

var errClosed = fmt.Errorf("gormstore: store closed: %w", store.ErrUnavailable)

// InTx runs fn in one database transaction; see [store.Store.InTx].
// Transient failures (SQLite busy, PostgreSQL serialization failure or
// deadlock) are retried up to [WithMaxRetries] times, calling fn again,
// and not after the query timeout has passed since the first attempt. Each
// attempt is bounded by [WithQueryTimeout]: an attempt that runs out of
// time is rolled back and reported with an error wrapping
// [store.ErrUnavailable]. Each statement of fn runs under the context given
// to the Tx method, so a host's tracing sees it under its request.
//
// On SQLite the transaction takes the database's write lock when it
// begins (BEGIN IMMEDIATE): transactions queue for it, and one that read
// first can never fail to upgrade its lock. A statement that fails aborts
// the transaction on both databases, as the contract requires: the later
// calls of the Tx fail, and InTx returns the statement's error.
func (s *Store) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	if s.closed.Load() {
		return errClosed
	}
	backoff := time.Millisecond
	stop := time.Now().Add(s.cfg.queryTimeout)
	for attempt := 0; ; attempt++ {
		err := s.attempt(ctx, fn)
		if err == nil || !isRetryable(err) || attempt >= s.cfg.maxRetries || time.Now().After(stop) {
			return err
		}
		t := time.NewTimer(backoff + rand.N(backoff))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff = min(backoff*2, 50*time.Millisecond)
	}
}

func (s *Store) attempt(ctx context.Context, fn func(tx store.Tx) error) error {
	actx, cancel := context.WithTimeout(ctx, s.cfg.queryTimeout)
	defer cancel()
	tx := s.db.WithContext(actx).Begin()
	if tx.Error != nil {
		return wrapErr("begin", tx.Error)
	}
	t := &txn{s: s, db: tx, inTx: true}
	committed := false
	defer func() {
		if !committed {
			// Also on a panic or runtime.Goexit in fn.
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
		return t.abort
	}
	committed = true
	return wrapErr("commit", tx.Commit().Error)
}

// txn runs the store's statements on the store's handle (outside a
// transaction) or in a transaction.
type txn struct {
	s  *Store
	db *gorm.DB
	// inTx is set inside InTx's transaction.
	inTx bool
	// abort, once a statement failed, fails every later statement and the
	// commit (see Store.InTx).
	abort error
}

var _ store.Tx = (*txn)(nil)

// do runs one statement, built by f on a handle bound to ctx, and returns
// how many rows it affected or returned. Outside a transaction the
// statement is bounded by the query timeout; inside one, InTx's attempt
// bounds it.
func (t *txn) do(ctx context.Context, op string, f func(db *gorm.DB) *gorm.DB) (int64, error) {
	if t.abort != nil {
		return 0, t.abort
	}
	if t.s.closed.Load() {
		return 0, errClosed
	}
	if !t.inTx {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.s.cfg.queryTimeout)
		defer cancel()
	}
	r := f(t.db.WithContext(ctx))
	if r.Error != nil {
		err := wrapErr(op, r.Error)
		if t.inTx {
			t.abort = err
		}
		return 0, err
	}
	return r.RowsAffected, nil
}

// atomic runs fn in the caller's transaction, or outside one in a
// transaction of its own, so that a method of several statements is all
// or nothing.
func (t *txn) atomic(ctx context.Context, fn func(t *txn) error) error {
	if t.inTx {
		return fn(t)
	}
	return t.s.InTx(ctx, func(tx store.Tx) error { return fn(tx.(*txn)) })
}

// lockForUpdate is the row lock a read takes on PostgreSQL before a write
// that depends on it; SQLite's write transactions are serialized already.
func (t *txn) lockForUpdate(db *gorm.DB) *gorm.DB {
	if t.s.pg {
		return db.Clauses(forUpdate)
	}
	return db
}

func nanos(t time.Time) int64 { return t.UnixNano() }

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func nowOr(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}
