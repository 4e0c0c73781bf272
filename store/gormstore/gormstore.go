// Package gormstore implements [store.Store] on SQLite and PostgreSQL
// through GORM: every statement runs through the *gorm.DB the host hands to
// [OpenDB], under the context of the call, so the host's logger, callbacks
// and plugins (tracing, metrics, gorm.io/plugin/dbresolver) see it.
//
//	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: myLogger})
//	st, err := gormstore.OpenDB(db) // migrates embedkit's tables
//	defer st.Close()                // leaves db open
//
// The sub-packages sqlite (cgo) and postgres (pgx) open a store from a DSN;
// this package registers no driver and needs no cgo.
//
// Statements use GORM's query API, and hand-written SQL where GORM cannot
// say them; docs/storage.md describes the design.
package gormstore

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"

	"github.com/embedkit/embedkit/store"
)

// Store is a [store.Store] on a *gorm.DB, safe for concurrent use. Its
// methods of several statements run in a transaction of their own.
type Store struct {
	txn    // on the host's handle, in a session of the store's own
	cfg    config
	pg     bool
	sqlDB  *sql.DB // the handle's pool
	group  *group  // SQLite's group commit; nil on PostgreSQL
	closed atomic.Bool
	close  func() error // once
}

// OpenDB returns a store that runs every statement through db, the host's
// GORM handle on SQLite or PostgreSQL, after migrating embedkit's tables
// ([Migrate]). On SQLite, db needs the settings of the sqlite
// sub-package's Dialector (foreign keys, busy timeout, BEGIN IMMEDIATE);
// without foreign keys OpenDB fails.
func OpenDB(db *gorm.DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, errors.New("gormstore: OpenDB: nil *gorm.DB")
	}
	s := &Store{cfg: config{queryTimeout: 5 * time.Second}, pg: db.Dialector.Name() == "postgres"}
	for _, o := range opts {
		if o != nil {
			o(&s.cfg)
		}
	}
	if name := db.Dialector.Name(); !s.pg && name != "sqlite" && name != "sqlite3" {
		return nil, fmt.Errorf("gormstore: OpenDB: unsupported dialect %q", name)
	}
	var err error
	if s.sqlDB, err = db.DB(); err != nil {
		return nil, wrapErr("open", err)
	}
	if !s.pg { // the writer keeps a connection when the pool has two more
		n := s.sqlDB.Stats().MaxOpenConnections
		s.group = &group{keep: n == 0 || n > 2}
	}
	// A session of its own: no Where or Scopes leak between host and store.
	// Its queries name their columns (QueryFields), not SELECT *: SQLite's
	// driver of the sqlite package keeps only statements whose columns
	// cannot change under them.
	s.txn = txn{s: s, db: db.Session(&gorm.Session{NewDB: true, SkipDefaultTransaction: true, QueryFields: true})}
	var fk int // deletions rely on them: a revoked key's sessions and tokens, a user's threads
	if !s.pg && (s.db.Raw("PRAGMA foreign_keys").Scan(&fk).Error != nil || fk != 1) {
		return nil, errors.New("gormstore: OpenDB: SQLite's foreign keys are off: open db with _foreign_keys=on in its DSN, as the sqlite sub-package does")
	}
	s.close = sync.OnceValue(func() error {
		s.closed.Store(true)
		if s.group != nil {
			s.group.mu.Lock() // after it, join (which checks closed under it) starts no writer
			s.group.mu.Unlock()
			s.group.wg.Wait() // the writer fails what waits and ends
			s.group.w.release()
		}
		var err error
		if s.cfg.onClose != nil {
			err = s.cfg.onClose()
		}
		if s.cfg.closeDB {
			err = cmp.Or(err, s.sqlDB.Close())
		}
		return err
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.cfg.queryTimeout)
	defer cancel()
	if err := Migrate(ctx, s.db); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// Close waits for the transactions under way on SQLite's writer and
// closes db's pool with [WithCloseDB]; later calls are unavailable.
func (s *Store) Close() error { return s.close() }

var errClosed = fmt.Errorf("gormstore: store closed: %w", store.ErrUnavailable)

// InTx runs fn in one database transaction; see [store.Store.InTx]. A
// transient failure runs fn again (up to 10 times) within the query
// timeout, which bounds each attempt. A failed statement aborts the
// transaction on both databases, as on PostgreSQL.
func (s *Store) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	return s.retry(ctx, func() error {
		ctx, cancel := context.WithTimeout(ctx, s.cfg.queryTimeout)
		defer cancel()
		if s.group != nil {
			return s.join(ctx, fn)
		}
		var ferr error // fn's, returned unchanged
		err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			ferr, _ = s.run(tx, fn)
			return ferr
		}, &sql.TxOptions{Isolation: sql.LevelReadCommitted}) // whatever the host's default
		return cmp.Or(ferr, wrapErr("transaction", err))
	})
}

func (s *Store) retry(ctx context.Context, f func() error) error {
	if s.closed.Load() {
		return errClosed
	}
	backoff, stop := time.Millisecond, time.Now().Add(s.cfg.queryTimeout)
	for attempt := 0; ; attempt++ {
		err := f()
		if err == nil || !isRetryable(err) || attempt >= maxRetries || time.Now().After(stop) {
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

// txn runs the store's statements on the store's handle or in a
// transaction (inTx), where abort, once a statement failed, fails every
// later statement and the commit.
type txn struct {
	s     *Store
	db    *gorm.DB
	inTx  bool
	abort error
}

// do runs the statement f builds and returns how many rows it affected or returned.
func (t *txn) do(ctx context.Context, op string, f func(db *gorm.DB) *gorm.DB) (int64, error) {
	if t.abort != nil || t.s.closed.Load() {
		return 0, cmp.Or(t.abort, errClosed)
	}
	var (
		cancel context.CancelFunc = func() {}
		conn   *sql.Conn
	)
	switch d, ok := t.db.Statement.Context.Deadline(); {
	case t.inTx && ok:
		ctx, cancel = context.WithDeadline(ctx, d) // the transaction's: a statement that hangs ends with it
	case t.inTx:
	case !t.s.pg && t.db.Plugins[(&dbresolver.DBResolver{}).Name()] == nil:
		// A read on SQLite (its writes run in the writer's transaction).
		// go-sqlite3 steps a statement whose context can end on a new
		// goroutine for every row, and its caller waits for that one: two
		// trips through the scheduler per row, which under load made most
		// of a turn's opening. So the wait for a connection is bounded,
		// and the statement runs on that connection without an end.
		// (dbresolver would route it to another pool: not with one.)
		cctx, ccancel := context.WithTimeout(ctx, t.s.cfg.queryTimeout)
		c, err := t.s.sqlDB.Conn(cctx)
		ccancel()
		if err != nil {
			return 0, wrapErr(op, err)
		}
		defer c.Close()
		ctx, conn = context.WithoutCancel(ctx), c
	default:
		ctx, cancel = context.WithTimeout(ctx, t.s.cfg.queryTimeout)
	}
	defer cancel()
	db := t.db.WithContext(ctx) // a statement of its own
	if conn != nil {
		db.Statement.ConnPool = conn
	}
	r := f(db)
	if err := r.Error; err != nil {
		if tr, ok := t.db.Dialector.(gorm.ErrorTranslator); ok {
			err = tr.Translate(err) // a duplicate key, a missing referenced row
		}
		return 0, t.fail(wrapErr(op, err))
	}
	return r.RowsAffected, nil
}

// write runs a write of one statement in the caller's transaction or, on
// its own, retried: alone on PostgreSQL (atomic, one round trip instead of
// three), in the group's transaction on SQLite.
func (t *txn) write(ctx context.Context, op string, f func(db *gorm.DB) *gorm.DB) (n int64, err error) {
	if !t.inTx && t.s.pg {
		err = t.s.retry(ctx, func() (err error) { n, err = t.do(ctx, op, f); return err })
		return n, err
	}
	return atomically(t, ctx, func(t *txn) (int64, error) { return t.do(ctx, op, f) })
}

func (t *txn) fail(err error) error {
	if t.inTx {
		t.abort = err
	}
	return err
}

func (t *txn) atomic(ctx context.Context, fn func(t *txn) error) error {
	if t.inTx {
		return fn(t)
	}
	return t.s.InTx(ctx, func(tx store.Tx) error { return fn(tx.(*txn)) })
}

func atomically[T any](t *txn, ctx context.Context, fn func(t *txn) (T, error)) (out T, err error) {
	err = t.atomic(ctx, func(t *txn) (err error) {
		out, err = fn(t)
		return err
	})
	return out, err
}

// primary sends a read that must see the latest write to a source of
// gorm.io/plugin/dbresolver, not to a replica that may lag.
func primary(db *gorm.DB) *gorm.DB { return db.Clauses(dbresolver.Write) }

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func nowOr(t time.Time) time.Time { return cmp.Or(t, time.Now()) } // t unset: now

// Option configures a [Store] at [OpenDB] (and the DSN conveniences of the
// sqlite and postgres sub-packages). Options apply in order; an invalid
// value panics in its With function ("gormstore: WithX: <what is wrong>,
// got <value>").
type Option func(*config)

type config struct {
	queryTimeout time.Duration
	closeDB      bool
	onClose      func() error
}

const maxRetries = 10 // of a transaction that failed on SQLite busy, PostgreSQL serialization failure or deadlock

// WithCloseDB makes [Store.Close] close the pool of the *gorm.DB given to
// [OpenDB], as the DSN conveniences do. Default: it stays open.
func WithCloseDB() Option { return func(c *config) { c.closeDB = true } }

// WithOnClose runs f once when the store closes, before the pool is closed
// ([WithCloseDB]): for what the opener holds beside the store.
func WithOnClose(f func() error) Option { return func(c *config) { c.onClose = f } }

// WithQueryTimeout bounds every statement and transaction attempt: a call
// without a connection, the SQLite write lock or an answer within d is
// [store.ErrUnavailable]. On SQLite a read outside a transaction waits
// at most d for a connection, then runs to its end (not cut short by its
// context either). Default: 5 seconds; d must be positive.
func WithQueryTimeout(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("gormstore: WithQueryTimeout: duration must be positive, got %v", d))
	}
	return func(c *config) { c.queryTimeout = d }
}

// wrapErr makes err an error of the store, "gormstore: <op>: ", with the
// sentinel classify finds (after txn.do's translation by the dialect).
func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if kind, _ := classify(err); kind != nil {
		return fmt.Errorf("gormstore: %s: %w: %w", op, kind, err)
	}
	return fmt.Errorf("gormstore: %s: %w", op, err)
}

func classify(err error) (kind error, retry bool) {
	switch {
	case errors.Is(err, errGroupAborted):
		return store.ErrUnavailable, true
	case errors.Is(err, gorm.ErrDuplicatedKey):
		return store.ErrConflict, false
	case errors.Is(err, gorm.ErrForeignKeyViolated), errors.Is(err, gorm.ErrRecordNotFound):
		return store.ErrNotFound, false
	}
	// PostgreSQL (pgx's *pgconn.PgError, lib/pq) reports its SQLSTATE.
	var pe interface{ SQLState() string }
	if errors.As(err, &pe) {
		switch code := pe.SQLState(); {
		case code == "40001", code == "40P01":
			return store.ErrUnavailable, true
		case code[:2] == "08" || code[:2] == "53" || code[:2] == "57", // connection, resources, operator intervention
			code == "55P03", // lock_not_available: a host's lock_timeout
			code == "25006": // read_only_sql_transaction: a standby, after a failover
			return store.ErrUnavailable, false
		}
		return nil, false
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "database is locked"), strings.Contains(msg, "database table is locked"):
		return store.ErrUnavailable, true // SQLite busy or locked
	case errors.Is(err, context.Canceled):
		return nil, false
	case errors.Is(err, sql.ErrConnDone), errors.Is(err, sql.ErrTxDone), errors.Is(err, gorm.ErrInvalidTransaction),
		errors.Is(err, driver.ErrBadConn), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.As(err, new(net.Error)), // also a deadline, a closed socket and a syscall.Errno such as ECONNRESET
		// Errors without a code: a closed pool or connection, SQLite's file.
		slices.ContainsFunc([]string{"sql: database is closed", "conn closed", "timeout", "failed to connect", "connection refused",
			"disk I/O error", "database or disk is full", "unable to open database file", "file is not a database",
			"attempt to write a readonly database"},
			func(s string) bool { return strings.Contains(msg, s) }):
		return store.ErrUnavailable, false
	}
	return nil, false
}

func isRetryable(err error) bool {
	_, retry := classify(err)
	return retry
}
