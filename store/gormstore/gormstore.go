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
	"gorm.io/gorm/clause"
	"gorm.io/plugin/dbresolver"

	"github.com/embedkit/embedkit/store"
)

// Store is a [store.Store] backed by SQLite or PostgreSQL through a
// *gorm.DB. It is safe for concurrent use. Its methods of one statement
// run alone, those of several in a transaction of their own.
type Store struct {
	txn
	cfg       config
	pg        bool
	db        *gorm.DB // the host's handle, in a session of the store's own
	sqlDB     *sql.DB
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// OpenDB returns a store that runs every statement through db, the host's
// GORM handle on SQLite or PostgreSQL, on db's pool as it is, after
// migrating embedkit's tables ([Migrate]). [Store.Close] closes db only
// with [WithCloseDB]. On SQLite, db's connections need the settings of the
// sqlite sub-package's Dialector (foreign keys, busy timeout, BEGIN
// IMMEDIATE).
func OpenDB(db *gorm.DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, errors.New("gormstore: OpenDB: nil *gorm.DB")
	}
	s := &Store{cfg: defaultConfig()}
	for _, o := range opts {
		if o != nil {
			o(&s.cfg)
		}
	}
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
	// A session of its own: the host's later Where or Scopes on db do not
	// leak into embedkit's statements, nor ours into the host's.
	s.sqlDB, s.db = sqlDB, db.Session(&gorm.Session{NewDB: true, SkipDefaultTransaction: true})
	s.txn = txn{s: s, db: s.db}
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.cfg.queryTimeout)
	defer cancel()
	if err := Migrate(ctx, s.db); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// Close closes db's connection pool when the store owns it ([WithCloseDB]).
// Later calls fail with an error wrapping [store.ErrUnavailable].
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		if s.cfg.closeDB {
			s.closeErr = s.sqlDB.Close()
		}
	})
	return s.closeErr
}

var errClosed = fmt.Errorf("gormstore: store closed: %w", store.ErrUnavailable)

// InTx runs fn in one database transaction; see [store.Store.InTx]. A
// transient failure (SQLite busy, PostgreSQL serialization failure or
// deadlock) runs fn again, up to [WithMaxRetries] times and within the
// query timeout; each attempt is bounded by [WithQueryTimeout]. On SQLite
// the transaction takes the write lock when it begins (BEGIN IMMEDIATE),
// so that one which read first never fails to upgrade its lock. A
// statement that fails aborts the transaction on both databases, as on
// PostgreSQL: later calls of the Tx fail, and InTx returns its error.
func (s *Store) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	if s.closed.Load() {
		return errClosed
	}
	backoff, stop := time.Millisecond, time.Now().Add(s.cfg.queryTimeout)
	for attempt := 0; ; attempt++ {
		err := s.attempt(ctx, fn)
		if err == nil || !isRetryable(err) || attempt >= s.cfg.maxRetries || time.Now().After(stop) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff + rand.N(backoff)):
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
		if !committed { // also after a panic or runtime.Goexit in fn
			_ = tx.Rollback().Error
		}
	}()
	err := fn(t)
	if t.abort != nil && (err == nil || isRetryable(t.abort)) {
		err = t.abort
	}
	if err != nil {
		return err
	}
	committed = true
	return wrapErr("commit", tx.Commit().Error)
}

// txn runs the store's statements on the store's handle or in a
// transaction (inTx), where abort, once a statement failed, fails every
// later statement and the commit.
type txn struct {
	s     *Store
	db    *gorm.DB
	inTx  bool
	abort error
}

// do runs one statement, built by f on a handle bound to ctx, and returns
// how many rows it affected or returned. Outside a transaction the query
// timeout bounds it; inside one, the attempt's.
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
		return 0, t.fail(wrapErr(op, r.Error))
	}
	return r.RowsAffected, nil
}

// fail makes err abort the transaction.
func (t *txn) fail(err error) error {
	if t.inTx {
		t.abort = err
	}
	return err
}

// atomic runs fn in the caller's transaction or in one of its own, so that
// a method of several statements is all or nothing.
func (t *txn) atomic(ctx context.Context, fn func(t *txn) error) error {
	if t.inTx {
		return fn(t)
	}
	return t.s.InTx(ctx, func(tx store.Tx) error { return fn(tx.(*txn)) })
}

// primary sends a read that must see the latest committed write (API
// keys, tokens, users, thread state) to a source of
// gorm.io/plugin/dbresolver, never to a replica that may lag.
func primary(db *gorm.DB) *gorm.DB { return db.Clauses(dbresolver.Write) }

// lockForUpdate locks the rows a read returns on PostgreSQL; SQLite's
// write transactions are serialized already.
func (t *txn) lockForUpdate(db *gorm.DB) *gorm.DB {
	if t.s.pg {
		return db.Clauses(clause.Locking{Strength: "UPDATE"})
	}
	return db
}

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func nowOr(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}
