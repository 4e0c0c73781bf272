// Package gormstore implements [store.Store] on SQLite and PostgreSQL
// through GORM.
//
// Open a store with a DSN and run the conformance suite against it:
//
//	st, err := gormstore.Open("embed.db") // or ":memory:", or "postgres://..."
//	if err != nil { ... }
//	defer st.Close()
//
// The schema is created on open (idempotent DDL; a reopen keeps all data).
// Times are stored as Unix nanoseconds in BIGINT columns so that they
// round-trip exactly on both databases.
//
// On a SQLite file the store writes through a single connection (WAL,
// synchronous=NORMAL, BEGIN IMMEDIATE) and serializes write transactions in
// FIFO order, so that latency stays even under many concurrent writers; reads
// outside a transaction use a separate pool of read-only connections. On
// PostgreSQL it uses a pgx connection pool, ON CONFLICT upserts, RETURNING and
// row locks where the contract needs them.
//
// No GORM type appears in the API apart from [OpenDB]'s parameter.
package gormstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	wdb     *gorm.DB // writes and transactions
	rdb     *gorm.DB // reads outside transactions (== wdb unless SQLite file)
	// queue serializes SQLite write transactions in FIFO order (blocked
	// channel senders are woken in arrival order); nil on PostgreSQL.
	queue chan struct{}
	owned bool // Close closes the connection pools
	// migrated is set once the schema is in place.
	migrated bool
	closed   atomic.Bool
	close    sync.Once
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
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if isPostgres(dsn) {
		return openPostgres(dsn, cfg)
	}
	return openSQLite(dsn, cfg)
}

func isPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") || strings.Contains(dsn, "host=")
}

func gormConfig(prepare bool) *gorm.Config {
	return &gorm.Config{
		SkipDefaultTransaction: true,
		Logger:                 logger.Discard,
		PrepareStmt:            prepare,
		PrepareStmtMaxSize:     512,
		DisableAutomaticPing:   false,
	}
}

func openPostgres(dsn string, cfg config) (*Store, error) {
	prepare := cfg.prepare != nil && *cfg.prepare
	db, err := gorm.Open(postgres.New(postgres.Config{DSN: dsn}), gormConfig(prepare))
	if err != nil {
		return nil, wrapErr("open", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, wrapErr("open", err)
	}
	sqlDB.SetMaxOpenConns(cfg.maxOpen)
	sqlDB.SetMaxIdleConns(cfg.maxOpen)
	sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	s := &Store{cfg: cfg, dialect: postgresDialect, wdb: db, rdb: db, owned: true}
	return s.init()
}

// sqliteDSN turns a path (with optional query) into a mattn URI DSN with the
// given extra parameters.
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
	prepare := cfg.prepare == nil || *cfg.prepare
	busy := "_busy_timeout=" + strconv.FormatInt(min(cfg.queryTimeout, 5*time.Second).Milliseconds(), 10)
	memory := dsn == ":memory:" || dsn == "file::memory:" || strings.Contains(dsn, "mode=memory")
	if dsn == ":memory:" || dsn == "file::memory:" {
		// A unique name keeps stores of one process apart; the single
		// connection below keeps the database alive until Close.
		dsn = fmt.Sprintf("file:embedkit-mem-%d-%d?mode=memory&cache=shared", memCounter.Add(1), rand.Int64())
	}
	wdsn := sqliteDSN(dsn, "_txlock=immediate", "_foreign_keys=on", busy)
	if !memory {
		wdsn = sqliteDSN(dsn, "_txlock=immediate", "_foreign_keys=on", busy, "_journal_mode=WAL", "_synchronous=NORMAL", "_cache_size=-16000")
	}
	wdb, err := gorm.Open(sqlite.Open(wdsn), gormConfig(prepare))
	if err != nil {
		return nil, wrapErr("open", err)
	}
	wsql, err := wdb.DB()
	if err != nil {
		return nil, wrapErr("open", err)
	}
	wsql.SetMaxOpenConns(1)
	wsql.SetMaxIdleConns(1)
	wsql.SetConnMaxLifetime(0)
	wsql.SetConnMaxIdleTime(0)
	s := &Store{cfg: cfg, dialect: sqliteDialect, wdb: wdb, rdb: wdb, owned: true, queue: make(chan struct{}, 1)}
	if !memory {
		// Migrate before the readers open so the file exists in WAL mode.
		if err := s.migrate(); err != nil {
			_ = wsql.Close()
			return nil, err
		}
		rdb, err := gorm.Open(sqlite.Open(sqliteDSN(dsn, "_query_only=1", busy, "_cache_size=-16000")), gormConfig(prepare))
		if err != nil {
			_ = wsql.Close()
			return nil, wrapErr("open", err)
		}
		rsql, err := rdb.DB()
		if err != nil {
			_ = wsql.Close()
			return nil, wrapErr("open", err)
		}
		rsql.SetMaxOpenConns(cfg.readConns)
		rsql.SetMaxIdleConns(cfg.readConns)
		s.rdb = rdb
	}
	return s.init()
}

// OpenDB wraps a GORM handle the host already has (SQLite or PostgreSQL),
// migrates the schema and returns the store. [Store.Close] does not close the
// host's handle. On SQLite, write transactions are still serialized in FIFO
// order, but reads share the host's pool.
func OpenDB(db *gorm.DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, errors.New("gormstore: OpenDB: nil *gorm.DB")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	s := &Store{cfg: cfg, wdb: db, rdb: db}
	switch db.Dialector.Name() {
	case "postgres":
		s.dialect = postgresDialect
	case "sqlite", "sqlite3":
		s.dialect = sqliteDialect
		s.queue = make(chan struct{}, 1)
	default:
		return nil, fmt.Errorf("gormstore: OpenDB: unsupported dialect %q", db.Dialector.Name())
	}
	return s.init()
}

func (s *Store) init() (*Store, error) {
	if s.cfg.hook != nil {
		s.registerHook(s.wdb)
		if s.rdb != s.wdb {
			s.registerHook(s.rdb)
		}
	}
	if !s.migrated {
		if err := s.migrate(); err != nil {
			_ = s.Close()
			return nil, err
		}
	}
	return s, nil
}

func (s *Store) registerHook(db *gorm.DB) {
	hook := s.cfg.hook
	fn := func(db *gorm.DB) {
		if db.Statement == nil || db.Statement.SQL.Len() == 0 || db.DryRun {
			return
		}
		hook(db.Statement.Context, db.Statement.SQL.String())
	}
	cb := db.Callback()
	// Errors only arise for duplicate names; a second registration on a
	// shared handle replaces the first.
	_ = cb.Create().After("gorm:create").Register("embedkit:hook", fn)
	_ = cb.Query().After("gorm:query").Register("embedkit:hook", fn)
	_ = cb.Update().After("gorm:update").Register("embedkit:hook", fn)
	_ = cb.Delete().After("gorm:delete").Register("embedkit:hook", fn)
	_ = cb.Row().After("gorm:row").Register("embedkit:hook", fn)
	_ = cb.Raw().After("gorm:raw").Register("embedkit:hook", fn)
}

// Close closes the connection pools opened by [Open]; a store from [OpenDB]
// leaves the host's handle open. Calls after Close fail with an error wrapping
// [store.ErrUnavailable]. Close is idempotent.
func (s *Store) Close() error {
	var err error
	s.close.Do(func() {
		s.closed.Store(true)
		if !s.owned {
			return
		}
		dbs := []*gorm.DB{s.wdb}
		if s.rdb != s.wdb {
			dbs = append(dbs, s.rdb)
		}
		for _, db := range dbs {
			if sqlDB, e := db.DB(); e == nil {
				err = errors.Join(err, sqlDB.Close())
			}
		}
	})
	return err
}

var errClosed = fmt.Errorf("gormstore: store closed: %w", store.ErrUnavailable)

// InTx runs fn in one transaction; see [store.Store.InTx]. On SQLite the
// transaction starts with BEGIN IMMEDIATE after waiting its turn in the
// store's FIFO writer queue. Transient failures (busy, locked, serialization
// failure, deadlock) are retried up to [WithMaxRetries] times, calling fn
// again. Each attempt is bounded by [WithQueryTimeout].
func (s *Store) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	if s.closed.Load() {
		return errClosed
	}
	backoff := time.Millisecond
	for attempt := 0; ; attempt++ {
		err := s.attempt(ctx, fn)
		if err == nil || !isRetryable(err) || attempt >= s.cfg.maxRetries {
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

func (s *Store) attempt(ctx context.Context, fn func(tx store.Tx) error) (err error) {
	actx, cancel := context.WithTimeout(ctx, s.cfg.queryTimeout)
	defer cancel()
	if s.queue != nil {
		select {
		case s.queue <- struct{}{}:
		case <-actx.Done():
			return wrapErr("begin", actx.Err())
		}
		defer func() { <-s.queue }()
	}
	db := s.wdb.WithContext(actx).Begin()
	if db.Error != nil {
		return wrapErr("begin", db.Error)
	}
	done := false
	defer func() {
		if !done {
			db.Rollback()
		}
	}()
	if err := fn(&txn{s: s, db: db, inTx: true}); err != nil {
		return err
	}
	done = true
	if err := db.Commit().Error; err != nil {
		return wrapErr("commit", err)
	}
	return nil
}

// txn runs the store's statements on one handle: a transaction, or the read
// pool for reads outside a transaction.
type txn struct {
	s    *Store
	db   *gorm.DB
	inTx bool
}

var _ store.Tx = (*txn)(nil)

// exec runs a statement and returns the number of rows it affected.
func (t *txn) exec(ctx context.Context, op, query string, args ...any) (int64, error) {
	if t.s.closed.Load() {
		return 0, errClosed
	}
	ctx, cancel := context.WithTimeout(ctx, t.s.cfg.queryTimeout)
	defer cancel()
	r := t.db.WithContext(ctx).Exec(query, args...)
	if r.Error != nil {
		return 0, wrapErr(op, r.Error)
	}
	return r.RowsAffected, nil
}

// find runs a query and scans its rows into dest (a pointer to a struct or a
// slice of structs), returning the number of rows.
func (t *txn) find(ctx context.Context, op string, dest any, query string, args ...any) (int64, error) {
	if t.s.closed.Load() {
		return 0, errClosed
	}
	ctx, cancel := context.WithTimeout(ctx, t.s.cfg.queryTimeout)
	defer cancel()
	r := t.db.WithContext(ctx).Raw(query, args...).Find(dest)
	if r.Error != nil {
		return 0, wrapErr(op, r.Error)
	}
	return r.RowsAffected, nil
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

// reader returns the handle for a read outside a transaction.
func (s *Store) reader() *txn { return &txn{s: s, db: s.rdb} }

// write runs fn in its own transaction, so a Store method that writes is
// atomic and goes through the SQLite writer queue.
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
