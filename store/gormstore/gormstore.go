package gormstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/embedkit/embedkit/store"
)

// Store is a [store.Store] backed by SQLite or PostgreSQL through a
// *gorm.DB. It is safe for concurrent use. Methods called on the Store itself
// (outside [Store.InTx]) run in their own transaction when they write, so
// each is atomic.
type Store struct {
	cfg     config
	dialect dialect
	// db is the host's handle in a session of its own: every statement
	// starts from it, so the host's logger, callbacks and plugins see it.
	db *gorm.DB
	// rdb is db for reads on a SQLite pool, with GORM's prepared
	// statement cache (database/sql keeps each statement prepared per
	// connection). PostgreSQL needs none: pgx caches statements itself.
	rdb *gorm.DB
	// wdb is db on the SQLite writer connection, for reads that wait for
	// the writer.
	wdb *gorm.DB
	// sqlDB is the handle's connection pool, closed by Close only when
	// the store owns it (WithCloseDB).
	sqlDB *sql.DB
	// gate admits, on PostgreSQL, at most as many transactions and reads
	// as the pool has connections, in arrival order: database/sql hands a
	// freed connection to a random waiter, which more than doubled the p99
	// latency of generate-session under load (32 clients, 8 connections).
	// nil when the pool is unbounded.
	gate chan struct{}
	// pipelining is set on PostgreSQL through pgx unless WithoutPipelining
	// (see pipeline.go).
	pipelining bool

	// SQLite: the writer connection, held for the store's lifetime, its
	// FIFO slot (blocked channel senders are woken in arrival order) and the
	// group commit queue. poolReads is set when reads outside transactions
	// may use other connections of the pool (a file database whose pool
	// allows more than one connection); otherwise they wait for the writer.
	writer    *pinnedConn
	slot      chan struct{}
	batch     batcher
	poolReads bool

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ store.Store = (*Store)(nil)

type dialect int

const (
	sqliteDialect dialect = iota
	postgresDialect
)

// OpenDB returns a store that runs every statement through db, the host's
// GORM handle on SQLite or PostgreSQL, after migrating embedkit's tables
// (see [Migrate]). The host keeps its handle: [Store.Close] closes it only
// with [WithCloseDB]. db's logger, callbacks and plugins (tracing, metrics,
// gorm.io/plugin/dbresolver) see each statement.
//
// On SQLite the store takes one connection of db's pool for its lifetime and
// runs every transaction on it, in arrival order (see [Store.InTx]); reads
// outside transactions use the other connections of the pool when it has
// more than one and the database is a file, and the writer connection
// otherwise. On PostgreSQL the store shares db's pool.
func OpenDB(db *gorm.DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, errors.New("gormstore: OpenDB: nil *gorm.DB")
	}
	cfg := newConfig(opts)
	s := &Store{cfg: cfg}
	switch name := db.Dialector.Name(); name {
	case "postgres":
		s.dialect = postgresDialect
	case "sqlite", "sqlite3":
		s.dialect = sqliteDialect
	default:
		return nil, fmt.Errorf("gormstore: OpenDB: unsupported dialect %q", name)
	}
	// A session of its own: the host's later Where/Scopes on db do not
	// leak into embedkit's statements, and neither do ours into the host's.
	s.db = db.Session(&gorm.Session{NewDB: true, SkipDefaultTransaction: true})
	sqlDB, err := db.DB()
	if err != nil {
		return nil, wrapErr("open", err)
	}
	s.sqlDB = sqlDB
	if n := sqlDB.Stats().MaxOpenConnections; s.dialect == postgresDialect && n > 0 {
		s.gate = make(chan struct{}, n)
	}
	if s.dialect == postgresDialect && !cfg.noPipelining {
		s.pipelining = isPgx(sqlDB)
	}
	if s.dialect == sqliteDialect {
		if err := s.holdWriter(); err != nil {
			_ = s.Close()
			return nil, err
		}
	}
	if err := s.migrate(); err != nil {
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

// isPgx reports whether the pool's driver is pgx's database/sql driver.
func isPgx(db *sql.DB) bool {
	ok := false
	conn, err := db.Conn(context.Background())
	if err != nil {
		return false // decided again at the next open; GORM's path works anyway
	}
	defer conn.Close()
	_ = conn.Raw(func(dc any) error {
		_, ok = dc.(interface{ Conn() *pgx.Conn })
		return nil
	})
	return ok
}

// busyTimeout is how long SQLite waits for another process's write lock
// before reporting busy: half the query timeout, so that InTx can retry once
// within it, and at most 2.5 s.
func busyTimeout(cfg config) time.Duration { return min(cfg.queryTimeout/2, 2500*time.Millisecond) }

// holdWriter takes the SQLite writer connection for the store's lifetime and
// sets what is per connection: foreign keys (for the cascades) and the busy
// timeout. It also decides where reads outside transactions go.
func (s *Store) holdWriter() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.queryTimeout)
	defer cancel()
	c, err := s.sqlDB.Conn(ctx)
	if err != nil {
		return wrapErr("open", err)
	}
	s.writer = &pinnedConn{conn: c, stmts: make(map[string]*sql.Stmt)}
	s.slot = make(chan struct{}, 1)
	s.wdb = s.on(context.Background(), s.writer)
	w := s.wdb
	ms := strconv.FormatInt(busyTimeout(s.cfg).Milliseconds(), 10)
	for _, p := range []string{"PRAGMA foreign_keys = ON", "PRAGMA busy_timeout = " + ms} {
		if err := w.Exec(p).Error; err != nil {
			return wrapErr("open", err)
		}
	}
	var file string
	if err := w.Raw("SELECT file FROM pragma_database_list WHERE name = 'main'").Row().Scan(&file); err != nil {
		return wrapErr("open", err)
	}
	s.poolReads = file != "" && s.sqlDB.Stats().MaxOpenConnections != 1
	if s.poolReads {
		s.rdb = s.db.Session(&gorm.Session{NewDB: true, PrepareStmt: true})
	}
	return nil
}

// on returns the store's handle bound to ctx and, when pool is not nil, to
// one connection or transaction. It is a "new DB" session: each statement
// started from it, and each statement of a transaction begun on it, is a
// new gorm.Statement, where WithContext would make each one a clone of the
// handle's statement (a copy of its maps and settings per statement).
func (s *Store) on(ctx context.Context, pool gorm.ConnPool) *gorm.DB {
	db := s.db.Session(&gorm.Session{NewDB: true, Context: ctx})
	if pool != nil {
		db.Statement.ConnPool = pool
	}
	return db
}

// Close waits (up to the query timeout) for the running SQLite transaction,
// then releases the writer connection, and closes db's connection pool when
// the store owns it ([WithCloseDB]). Calls after Close fail with an error
// wrapping [store.ErrUnavailable]. Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.queryTimeout)
		defer cancel()
		var errs []error
		if s.writer != nil {
			held := false
			select {
			case s.slot <- struct{}{}:
				held = true
			case <-ctx.Done():
			}
			errs = append(errs, s.writer.close())
			if held {
				<-s.slot // later acquirers see closed and fail at once
			}
		}
		if s.cfg.closeDB && s.sqlDB != nil {
			errs = append(errs, s.sqlDB.Close())
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

var errClosed = fmt.Errorf("gormstore: store closed: %w", store.ErrUnavailable)

// InTx runs fn in one transaction; see [store.Store.InTx]. On SQLite the
// transaction waits its turn for the writer connection (FIFO) and may share
// one database transaction, and one commit, with the transactions waiting
// behind it, each in its own savepoint (see writer.go). Every statement of
// fn runs with ctx's values, so that a host's logger and tracing see it
// under the caller's request. Transient failures
// (busy, locked, serialization failure, deadlock) are retried up to
// [WithMaxRetries] times, calling fn again, and not after the query timeout
// has passed since the first attempt. Each attempt is bounded by
// [WithQueryTimeout]: an attempt that runs out of time is rolled back and
// reported with an error wrapping [store.ErrUnavailable].
//
// A statement that fails aborts the transaction on both databases: the
// following calls of the Tx fail, and InTx returns the statement's error and
// commits nothing, even when fn ignores the error and returns nil.
//
// The Tx given to fn is not safe for concurrent use: fn must call it from
// one goroutine at a time. On SQLite fn may run on the goroutine of another
// caller of InTx (the leader of its commit group), so it must not depend on
// which goroutine runs it: a panic in fn is raised again in its own caller,
// but t.Fatal (runtime.Goexit) inside fn ends the leader's goroutine; the
// store survives that, the leader's caller does not.
func (s *Store) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	if s.closed.Load() {
		return errClosed
	}
	backoff := time.Millisecond
	exact := false
	stop := time.Now().Add(s.cfg.queryTimeout)
	for attempt := 0; ; attempt++ {
		err := s.attempt(ctx, fn, exact)
		if err == nil || !isRetryable(err) || attempt >= s.cfg.maxRetries || time.Now().After(stop) {
			return err
		}
		if errors.Is(err, errNearLimit) {
			exact = true
			continue
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

func (s *Store) attempt(ctx context.Context, fn func(tx store.Tx) error, exact bool) error {
	actx, cancel := context.WithTimeout(ctx, s.cfg.queryTimeout)
	defer cancel()
	if s.dialect == postgresDialect {
		return s.attemptPostgres(actx, fn, exact)
	}
	return s.attemptSQLite(ctx, actx, fn)
}

// attemptPostgres runs one attempt in a GORM transaction on the pool.
func (s *Store) attemptPostgres(actx context.Context, fn func(tx store.Tx) error, exact bool) error {
	if err := s.enter(actx); err != nil {
		return err
	}
	defer s.leave()
	if s.pipelining {
		return s.attemptPipelined(actx, fn, exact)
	}
	tx := s.on(actx, nil).Begin()
	if tx.Error != nil {
		return wrapErr("begin", tx.Error)
	}
	t := &txn{s: s, db: tx, inTx: true, deadline: actx, exact: exact, shard: -1}
	committed := false
	defer func() {
		t.finished = true
		if !committed {
			// database/sql rolls back by itself when actx ends, and
			// closes a connection that does not answer.
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
	if err := tx.Commit().Error; err != nil {
		return wrapErr("commit", err)
	}
	return nil
}

// enter waits for a PostgreSQL connection slot (see Store.gate).
func (s *Store) enter(ctx context.Context) error {
	if s.gate == nil {
		return nil
	}
	select {
	case s.gate <- struct{}{}:
		return nil
	case <-ctx.Done():
		return wrapErr("wait for connection", ctx.Err())
	}
}

func (s *Store) leave() {
	if s.gate != nil {
		<-s.gate
	}
}

func (s *Store) acquireWriter(ctx context.Context) error {
	select {
	case s.slot <- struct{}{}:
	case <-ctx.Done():
		return wrapErr("wait for writer", ctx.Err())
	}
	if s.closed.Load() {
		<-s.slot
		return errClosed
	}
	return nil
}

func (s *Store) releaseWriter() { <-s.slot }

// txn runs the store's statements on a *gorm.DB: the store's handle (reads
// outside transactions), the SQLite writer connection, or a transaction.
type txn struct {
	s *Store
	// db starts each statement (see Store.on); ctx, when set, is the
	// statement's context, where db's is not the read's.
	db  *gorm.DB
	ctx context.Context
	// pipe, when set, runs the statements instead of db (see pipeline.go).
	pipe *pgxTx
	// inTx is set inside a database transaction.
	inTx bool
	// deadline ends with the transaction attempt or read.
	deadline context.Context
	// finished is set when InTx returns; the txn must not be used after.
	finished bool
	// abort, when set, fails every later statement and the commit: a
	// statement failed (see Store.InTx), or the transaction must be rolled
	// back and run again (see countPersistent).
	abort error
	// exact is set when the transaction runs in exact-limit mode.
	exact bool
	// shard is the count shard of the transaction, -1 until chosen.
	shard int
	// primary marks reads outside a transaction that must see the latest
	// committed write: with dbresolver they go to a source, not a replica.
	primary bool
}

var _ store.Tx = (*txn)(nil)

// read runs fn outside a transaction. On PostgreSQL, and on a SQLite file
// whose pool has more than one connection, it runs on the pool through the
// store's handle (where gorm.io/plugin/dbresolver may send it to a replica,
// unless the txn marks a statement as needing the primary); otherwise on the
// SQLite writer connection, in its turn.
func read[T any](ctx context.Context, s *Store, fn func(t *txn) (T, error)) (T, error) {
	var zero T
	if s.closed.Load() {
		return zero, errClosed
	}
	actx, cancel := context.WithTimeout(ctx, s.cfg.queryTimeout)
	defer cancel()
	if s.dialect == postgresDialect {
		if err := s.enter(actx); err != nil {
			return zero, err
		}
		defer s.leave()
	}
	if s.dialect == postgresDialect || s.poolReads {
		t := &txn{s: s, db: s.db, ctx: actx, deadline: actx, shard: -1}
		if s.dialect == sqliteDialect {
			t.db, t.ctx = s.rdb, context.WithoutCancel(ctx)
		}
		return fn(t)
	}
	if err := s.acquireWriter(actx); err != nil {
		return zero, err
	}
	defer s.releaseWriter()
	return fn(&txn{s: s, db: s.wdb, ctx: context.WithoutCancel(ctx), deadline: actx, shard: -1})
}

// readPrimary is read for reads that must see the latest committed write
// (API key lookup, tokens, turn state): with gorm.io/plugin/dbresolver they
// run on a source, never on a replica that may lag.
func readPrimary[T any](ctx context.Context, s *Store, fn func(t *txn) (T, error)) (T, error) {
	return read(ctx, s, func(t *txn) (T, error) {
		t.primary = true
		return fn(t)
	})
}

// write runs fn in its own transaction, so a Store method that writes is
// atomic (and, on SQLite, waits its turn for the writer).
func write[T any](ctx context.Context, s *Store, fn func(t *txn) (T, error)) (T, error) {
	var out T
	err := s.InTx(ctx, func(tx store.Tx) error {
		var err error
		out, err = fn(tx.(*txn))
		return err
	})
	return out, err
}

func write0(ctx context.Context, s *Store, fn func(t *txn) error) error {
	return s.InTx(ctx, func(tx store.Tx) error { return fn(tx.(*txn)) })
}

func (t *txn) pg() bool { return t.s.dialect == postgresDialect }

// forUpdate returns the row-locking suffix on PostgreSQL (SQLite write
// transactions are serialized already).
func (t *txn) forUpdate() string {
	if t.pg() {
		return " FOR UPDATE"
	}
	return ""
}

// placeholders returns "(?, ?, ?), (?, ?, ?)" for rows rows of cols columns.
func placeholders(rows, cols int) string {
	var b strings.Builder
	row := "(" + strings.Repeat("?, ", cols-1) + "?)"
	b.Grow(rows * (len(row) + 2))
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	return b.String()
}

// batchRows bounds the rows of one batched statement so that its parameters
// stay below every driver's limit.
const batchRows = 500

func nanos(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func fromNanosPtr(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return fromNanos(*n)
}

func nowOr(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}

func optString(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}
