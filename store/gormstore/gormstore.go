// Package gormstore implements [store.Store] on SQLite and PostgreSQL,
// opening its databases through GORM's dialectors.
//
// Open a store with a DSN:
//
//	st, err := gormstore.Open("embed.db") // or ":memory:", or "postgres://..."
//	if err != nil { ... }
//	defer st.Close()
//
// or wrap a GORM handle the host already has with [OpenDB]. The schema is
// created on open (idempotent DDL; a reopen keeps all data). Times are stored
// as Unix nanoseconds in BIGINT columns so that they round-trip exactly on
// both databases. Deleting a user cascades to everything it owns.
//
// On a SQLite file the store holds one writer connection (WAL,
// synchronous=NORMAL, foreign keys on, BEGIN IMMEDIATE) and hands it to one
// transaction at a time in FIFO order, so latency stays even under many
// concurrent writers (database/sql would give a freed connection to a random
// waiter). Reads outside a transaction use a few read-only connections and
// never wait for writers. Each connection keeps its prepared statements.
// An in-memory SQLite database uses its single connection for everything.
//
// On PostgreSQL the store uses a pgx connection pool (pgx caches prepared
// statements per connection), ON CONFLICT upserts, RETURNING, and row locks
// where the contract needs them (FOR UPDATE, SKIP LOCKED).
//
// Statements run through database/sql on the connections GORM opened rather
// than through GORM's builder; see exec.go for the measured reasons. No GORM
// type appears in the API apart from [OpenDB]'s parameter.
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
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/embedkit/embedkit/store"
)

// Store is a [store.Store] backed by SQLite or PostgreSQL. It is safe for
// concurrent use. Methods called on the Store itself (outside [Store.InTx])
// run in their own transaction when they write, so each is atomic.
type Store struct {
	cfg     config
	dialect dialect

	// owned are the handles Open created and Close closes.
	owned []*sql.DB
	// pool runs PostgreSQL statements and transactions. gate admits at
	// most as many callers as the pool has connections, in arrival order
	// (database/sql hands a freed connection to a random waiter, which
	// stretches the latency tail under load).
	pool *sql.DB
	gate chan struct{}

	// SQLite: the writer connection, its FIFO slot (blocked channel senders
	// are woken in arrival order) and the idle read-only connections (nil
	// when reads share the writer).
	writer  *liteConn
	slot    chan struct{}
	readers chan *liteConn
	nreader int
	batch   batcher

	migrated  bool
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

var memCounter atomic.Int64

// Open opens the database named by dsn and migrates its schema.
//
// A dsn that starts with postgres:// or postgresql://, or that contains
// "host=", opens PostgreSQL through pgx. Anything else is a SQLite file path,
// or ":memory:" for a private in-memory database (two in-memory stores never
// share data). A SQLite path may carry query parameters of
// github.com/mattn/go-sqlite3; the store adds its own pragmas after them.
func Open(dsn string, opts ...Option) (*Store, error) {
	cfg := newConfig(opts)
	if isPostgres(dsn) {
		return openPostgres(dsn, cfg)
	}
	return openSQLite(dsn, cfg)
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

func isPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") || strings.Contains(dsn, "host=")
}

func gormConfig() *gorm.Config {
	return &gorm.Config{SkipDefaultTransaction: true, Logger: logger.Discard}
}

func openGorm(d gorm.Dialector) (*sql.DB, error) {
	db, err := gorm.Open(d, gormConfig())
	if err != nil {
		return nil, wrapErr("open", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, wrapErr("open", err)
	}
	return sqlDB, nil
}

func openPostgres(dsn string, cfg config) (*Store, error) {
	sqlDB, err := openGorm(postgres.New(postgres.Config{DSN: dsn}))
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(cfg.maxOpen)
	sqlDB.SetMaxIdleConns(cfg.maxOpen)
	sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	s := &Store{cfg: cfg, dialect: postgresDialect, pool: sqlDB, owned: []*sql.DB{sqlDB}, gate: make(chan struct{}, cfg.maxOpen)}
	return s.init()
}

// sqliteDSN turns a path (with optional query) into a go-sqlite3 URI DSN
// with the given extra parameters.
func sqliteDSN(dsn string, params ...string) string {
	path, query, _ := strings.Cut(dsn, "?")
	if !strings.HasPrefix(path, "file:") {
		r := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")
		path = "file:" + r.Replace(path)
	}
	q := query
	for _, p := range params {
		if q != "" {
			q += "&"
		}
		q += p
	}
	return path + "?" + q
}

func openSQLite(dsn string, cfg config) (*Store, error) {
	busy := "_busy_timeout=" + strconv.FormatInt(busyTimeout(cfg).Milliseconds(), 10)
	memory := dsn == ":memory:" || dsn == "file::memory:" || strings.Contains(dsn, "mode=memory")
	if dsn == ":memory:" || dsn == "file::memory:" {
		// A unique name keeps the stores of one process apart; the held
		// connection keeps the database alive until Close.
		dsn = fmt.Sprintf("file:embedkit-mem-%d-%d?mode=memory&cache=shared", memCounter.Add(1), rand.Int64())
	}
	params := []string{"_foreign_keys=on", busy}
	if !memory {
		params = append(params, "_journal_mode=WAL", "_synchronous=NORMAL", "_cache_size=-16000")
	}
	wdb, err := openGorm(sqlite.Open(sqliteDSN(dsn, params...)))
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, dialect: sqliteDialect, owned: []*sql.DB{wdb}}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	if err := s.holdWriter(wdb); err != nil {
		_ = s.Close()
		return nil, err
	}
	if !memory {
		// Migrate first so that the readers open an existing WAL database.
		if err := s.migrate(); err != nil {
			_ = s.Close()
			return nil, err
		}
		rdb, err := openGorm(sqlite.Open(sqliteDSN(dsn, "_query_only=1", busy, "_cache_size=-16000")))
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		s.owned = append(s.owned, rdb)
		rdb.SetMaxOpenConns(cfg.readConns)
		rdb.SetMaxIdleConns(cfg.readConns)
		s.readers = make(chan *liteConn, cfg.readConns)
		for range cfg.readConns {
			c, err := s.openConn(rdb)
			if err != nil {
				_ = s.Close()
				return nil, err
			}
			s.nreader++
			s.readers <- c
		}
	}
	return s.init()
}

func (s *Store) openConn(db *sql.DB) (*liteConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.queryTimeout)
	defer cancel()
	c, err := newLiteConn(ctx, db)
	if err != nil {
		return nil, wrapErr("open", err)
	}
	return c, nil
}

// busyTimeout is how long SQLite waits for another process's write lock
// before reporting busy: half the query timeout, so that InTx can retry once
// within it, and at most 2.5 s.
func busyTimeout(cfg config) time.Duration { return min(cfg.queryTimeout/2, 2500*time.Millisecond) }

// holdWriter takes the SQLite writer connection for the store's lifetime and
// makes sure cascades work on it (foreign keys are a per-connection setting).
func (s *Store) holdWriter(db *sql.DB) error {
	c, err := s.openConn(db)
	if err != nil {
		return err
	}
	s.writer = c
	s.slot = make(chan struct{}, 1)
	ms := strconv.FormatInt(busyTimeout(s.cfg).Milliseconds(), 10)
	for _, p := range []string{"PRAGMA foreign_keys = ON", "PRAGMA busy_timeout = " + ms} {
		if _, err := c.conn.ExecContext(context.Background(), p); err != nil {
			return wrapErr("open", err)
		}
	}
	return nil
}

// OpenDB wraps a GORM handle the host already has (SQLite or PostgreSQL),
// migrates the schema and returns the store. [Store.Close] does not close the
// host's handle. On SQLite the store takes one connection of the handle's
// pool for its lifetime and runs every statement on it, one transaction at a
// time in FIFO order; on PostgreSQL it shares the handle's pool.
func OpenDB(db *gorm.DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, errors.New("gormstore: OpenDB: nil *gorm.DB")
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, wrapErr("open", err)
	}
	s := &Store{cfg: newConfig(opts)}
	switch db.Dialector.Name() {
	case "postgres":
		s.dialect, s.pool, s.gate = postgresDialect, sqlDB, make(chan struct{}, s.cfg.maxOpen)
	case "sqlite", "sqlite3":
		s.dialect = sqliteDialect
		if err := s.holdWriter(sqlDB); err != nil {
			_ = s.Close()
			return nil, err
		}
	default:
		return nil, fmt.Errorf("gormstore: OpenDB: unsupported dialect %q", db.Dialector.Name())
	}
	return s.init()
}

func (s *Store) init() (*Store, error) {
	if err := s.migrate(); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// Close waits (up to the query timeout) for running transactions and reads,
// then closes the store's connections and the handles [Open] created; a
// store from [OpenDB] leaves the host's handle open. Calls after Close fail
// with an error wrapping [store.ErrUnavailable]. Close is idempotent.
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
		held := 0
		if s.gate != nil {
			// Wait for running PostgreSQL transactions and reads.
		drain:
			for range cap(s.gate) {
				select {
				case s.gate <- struct{}{}:
					held++
				case <-ctx.Done():
					break drain
				}
			}
		}
		for range s.nreader {
			select {
			case c := <-s.readers:
				errs = append(errs, c.close())
			case <-ctx.Done():
			}
		}
		for _, db := range s.owned {
			errs = append(errs, db.Close())
		}
		for range held {
			<-s.gate // later callers see closed and fail at once
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

var errClosed = fmt.Errorf("gormstore: store closed: %w", store.ErrUnavailable)

// InTx runs fn in one transaction; see [store.Store.InTx]. On SQLite the
// transaction waits its turn for the writer connection (FIFO) and may share
// one database transaction, and one commit, with the transactions waiting
// behind it, each in its own savepoint (see writer.go). Transient failures
// (busy, locked, serialization failure, deadlock) are retried up to
// [WithMaxRetries] times, calling fn again, and not after the query timeout
// has passed since the first attempt. Each attempt is bounded by
// [WithQueryTimeout]: an attempt that runs out of time is rolled back and
// reported with an error wrapping [store.ErrUnavailable].
//
// The Tx given to fn is not safe for concurrent use: fn must call it from
// one goroutine at a time. On SQLite fn may run on the goroutine of another
// caller of InTx (the leader of its commit group), so it must not depend on
// which goroutine runs it: a panic in fn is raised again in its own caller,
// but t.Fatal (runtime.Goexit) inside fn ends the leader's goroutine; the
// store survives that, the leader's caller does not.
//
// On PostgreSQL a statement that fails aborts the transaction: if fn
// ignores such an error and returns nil, InTx returns an error and commits
// nothing. On SQLite the failed statement alone is undone and the rest of fn
// is committed.
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

// rollbackTimeout bounds a PostgreSQL ROLLBACK (see attemptPostgres).
const rollbackTimeout = time.Second

func (s *Store) attemptPostgres(actx context.Context, fn func(tx store.Tx) error, exact bool) error {
	return s.withPgx(actx, func(pc *pgx.Conn) error {
		tx := &pgxTx{conn: pc, hook: s.cfg.hook}
		t := &txn{s: s, ex: tx, deadline: actx, exact: exact, shard: -1}
		defer func() {
			t.finished = true
			// Bounded, as every statement, and shorter: on a connection
			// that went silent an unbounded ROLLBACK would hang the caller,
			// and one as long as a statement would double the wait for its
			// 503. When it times out pgx closes the connection (the pool
			// drops it), which rolls the transaction back on the server.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(actx), min(s.cfg.queryTimeout, rollbackTimeout))
			defer cancel()
			tx.rollback(rctx) // no-op after commit
		}()
		if err := fn(t); err != nil {
			if t.abort != nil {
				return t.abort
			}
			return err
		}
		if t.abort != nil {
			return t.abort
		}
		if err := tx.commit(actx); err != nil {
			return wrapErr("commit", err)
		}
		return nil
	})
}

// withPgx runs fn with a pgx connection of the pool, taken in arrival order
// (see Store.gate). The error of fn is returned unchanged.
func (s *Store) withPgx(ctx context.Context, fn func(*pgx.Conn) error) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	conn, err := s.pool.Conn(ctx)
	if err != nil {
		return wrapErr("connect", err)
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		c, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			return fmt.Errorf("gormstore: PostgreSQL driver %T is not pgx's stdlib", dc)
		}
		return fn(c.Conn())
	})
}

func (s *Store) acquireWriter(ctx context.Context) (*liteConn, error) {
	select {
	case s.slot <- struct{}{}:
	case <-ctx.Done():
		return nil, wrapErr("wait for writer", ctx.Err())
	}
	if s.closed.Load() {
		<-s.slot
		return nil, errClosed
	}
	return s.writer, nil
}

func (s *Store) releaseWriter() { <-s.slot }

// enter waits for a PostgreSQL connection slot (see Store.gate).
func (s *Store) enter(ctx context.Context) error {
	select {
	case s.gate <- struct{}{}:
	case <-ctx.Done():
		return wrapErr("wait for connection", ctx.Err())
	}
	if s.closed.Load() {
		<-s.gate
		return errClosed
	}
	return nil
}

func (s *Store) leave() { <-s.gate }

// txn runs the store's statements on one connection or transaction.
type txn struct {
	s  *Store
	ex execer
	// deadline ends with the transaction attempt (nil outside InTx).
	deadline context.Context
	// finished is set when InTx returns; the txn must not be used after.
	finished bool
	// abort, when set, fails every later statement and the commit: the
	// transaction must be rolled back and run again (see countPersistent).
	abort error
	// exact is set when the transaction runs in exact-limit mode.
	exact bool
	// shard is the count shard of the transaction, -1 until chosen.
	shard int
	// notReturning is the external user a Lookup of this transaction found
	// no returning user for; UpsertExternalUser then skips the same update.
	notReturning userKey
}

type userKey struct {
	accountID  int64
	externalID string
}

var _ store.Tx = (*txn)(nil)

// read runs fn outside a transaction: on a read-only SQLite connection, on
// the SQLite writer connection when there are no readers, or on the
// PostgreSQL pool.
func read[T any](ctx context.Context, s *Store, fn func(t *txn) (T, error)) (T, error) {
	var zero T
	if s.closed.Load() {
		return zero, errClosed
	}
	switch {
	case s.dialect == postgresDialect:
		actx, cancel := context.WithTimeout(ctx, s.cfg.queryTimeout)
		defer cancel()
		var out T
		err := s.withPgx(actx, func(pc *pgx.Conn) error {
			var err error
			out, err = fn(&txn{s: s, ex: pgxExec{pc}, shard: -1})
			return err
		})
		return out, err
	case s.readers != nil:
		actx, cancel := context.WithTimeout(ctx, s.cfg.queryTimeout)
		defer cancel()
		var c *liteConn
		select {
		case c = <-s.readers:
		case <-actx.Done():
			return zero, wrapErr("wait for reader", actx.Err())
		}
		defer func() { s.readers <- c }()
		if s.closed.Load() {
			return zero, errClosed
		}
		return fn(&txn{s: s, ex: c, deadline: actx, shard: -1})
	default:
		actx, cancel := context.WithTimeout(ctx, s.cfg.queryTimeout)
		defer cancel()
		w, err := s.acquireWriter(actx)
		if err != nil {
			return zero, err
		}
		defer s.releaseWriter()
		return fn(&txn{s: s, ex: w, deadline: actx, shard: -1})
	}
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
