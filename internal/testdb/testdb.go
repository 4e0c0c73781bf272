// Package testdb gives tests a fresh, migrated store per test on each
// backend:
//
//	for _, backend := range testdb.Backends() {
//		t.Run(backend, func(t *testing.T) {
//			st := testdb.Open(t, backend) // closed (and dropped) in t.Cleanup
//			...
//		})
//	}
//
// "sqlite" is a new file in t.TempDir(). "postgres" is a fresh schema with a
// random name in the database named by the environment variable
// EMBEDKIT_TEST_POSTGRES_DSN, dropped in t.Cleanup; when the variable is unset
// the test is skipped. "memory" (not in [Backends]) is a private in-memory
// SQLite database.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	gormpostgres "gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/embedkit/embedkit/store/gormstore"
	"github.com/embedkit/embedkit/store/gormstore/postgres"
	"github.com/embedkit/embedkit/store/gormstore/sqlite"
)

// EnvPostgresDSN names the environment variable holding the DSN of a
// PostgreSQL database the tests may create schemas in, for example
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable.
const EnvPostgresDSN = "EMBEDKIT_TEST_POSTGRES_DSN"

// The backends [Open] accepts.
const (
	SQLite   = "sqlite"   // a SQLite file in t.TempDir()
	Postgres = "postgres" // a fresh schema of EMBEDKIT_TEST_POSTGRES_DSN
	Memory   = "memory"   // an in-memory SQLite database
)

// Backends returns the backends every store-backed test should run on:
// "sqlite" and "postgres" (which skips itself without EMBEDKIT_TEST_POSTGRES_DSN).
func Backends() []string { return []string{SQLite, Postgres} }

// Open returns a new, empty, migrated store on backend, closed in t.Cleanup
// (and, on PostgreSQL, its schema dropped afterwards). It fails the test on
// error and skips it for "postgres" when EMBEDKIT_TEST_POSTGRES_DSN is unset.
func Open(t testing.TB, backend string, opts ...gormstore.Option) *gormstore.Store {
	t.Helper()
	dsn := OpenDSN(t, backend)
	st, err := OpenStore(dsn, opts...)
	if err != nil {
		t.Fatalf("testdb: open %s store: %v", backend, err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// OpenGorm opens a *gorm.DB on a new, empty database of backend as a host
// would, with cfg (nil: GORM's defaults with a silent logger); it is closed
// in t.Cleanup. SQLite gets the settings and pool of
// github.com/embedkit/embedkit/store/gormstore/sqlite.Open.
func OpenGorm(t testing.TB, backend string, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	dsn := OpenDSN(t, backend)
	if backend == Memory {
		dsn = fmt.Sprintf("file:testdb-%s?mode=memory&cache=shared", randomName())
	}
	return OpenGormDSN(t, dsn, cfg)
}

// OpenGormDSN is [OpenGorm] on the database dsn names (see [OpenStore]).
func OpenGormDSN(t testing.TB, dsn string, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	if cfg == nil {
		cfg = &gorm.Config{Logger: logger.Discard}
	}
	var d gorm.Dialector
	conns := 8
	switch {
	case IsPostgres(dsn):
		d = gormpostgres.Open(dsn)
	case strings.Contains(dsn, "mode=memory"):
		d, conns = sqlite.Dialector(dsn), 1
	default:
		d, conns = sqlite.Dialector(dsn), 5
	}
	db, err := gorm.Open(d, cfg)
	if err != nil {
		t.Fatalf("testdb: open %s: %v", dsn, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	sqlDB.SetMaxOpenConns(conns)
	sqlDB.SetMaxIdleConns(conns)
	t.Cleanup(func() { _ = sqlDB.Close() })
	return db
}

// OnStatement registers GORM callbacks on db that call fn after every
// statement with its SQL text (placeholders, not values), as a host's
// tracing or metrics plugin would see it.
func OnStatement(db *gorm.DB, fn func(ctx context.Context, sql string)) error {
	return OnStatementDB(db, func(db *gorm.DB) { fn(db.Statement.Context, db.Statement.SQL.String()) })
}

// OnStatementDB is [OnStatement] with the statement's *gorm.DB (its
// Statement tells the connection pool that served it).
func OnStatementDB(db *gorm.DB, cb func(db *gorm.DB)) error {
	c := db.Callback()
	for _, err := range []error{
		c.Create().After("*").Register("testdb:statement", cb),
		c.Query().After("*").Register("testdb:statement", cb),
		c.Update().After("*").Register("testdb:statement", cb),
		c.Delete().After("*").Register("testdb:statement", cb),
		c.Row().After("*").Register("testdb:statement", cb),
		c.Raw().After("*").Register("testdb:statement", cb),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// OpenWithHook is [Open] on a host's *gorm.DB ([OpenGorm]) whose GORM
// logger calls hook after every statement of the store, with its SQL (values
// filled in).
func OpenWithHook(t testing.TB, backend string, hook func(ctx context.Context, sql string), opts ...gormstore.Option) *gormstore.Store {
	t.Helper()
	db := OpenGorm(t, backend, &gorm.Config{Logger: hookLogger{logger.Discard, hook}})
	st, err := gormstore.OpenDB(db, opts...)
	if err != nil {
		t.Fatalf("testdb: open %s store: %v", backend, err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// hookLogger is a GORM logger that reports every statement it traces.
type hookLogger struct {
	logger.Interface
	hook func(ctx context.Context, sql string)
}

func (l hookLogger) Trace(ctx context.Context, _ time.Time, fc func() (string, int64), _ error) {
	sql, _ := fc()
	l.hook(ctx, sql)
}

func randomName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// OpenStore opens a store on dsn (as returned by [OpenDSN]) with the DSN
// convenience of its database: github.com/embedkit/embedkit/store/gormstore/postgres
// for a postgres:// URL or a DSN with host=, .../sqlite otherwise. The
// caller closes it.
func OpenStore(dsn string, opts ...gormstore.Option) (*gormstore.Store, error) {
	if IsPostgres(dsn) {
		return postgres.Open(dsn, opts...)
	}
	return sqlite.Open(dsn, opts...)
}

// IsPostgres reports whether dsn names a PostgreSQL database.
func IsPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") || strings.Contains(dsn, "host=")
}

// OpenDSN returns a DSN for a new, empty database on backend without opening
// a store, for tests that open (and reopen) stores themselves or hand the
// DSN to a subprocess. For "sqlite" it is a file path in t.TempDir(); for
// "postgres" a DSN whose search_path is a fresh schema, dropped in
// t.Cleanup; for "memory" it is ":memory:" (every open is a new database).
func OpenDSN(t testing.TB, backend string) string {
	t.Helper()
	switch backend {
	case SQLite:
		return filepath.Join(t.TempDir(), "embed.db")
	case Memory:
		return ":memory:"
	case Postgres:
		base := os.Getenv(EnvPostgresDSN)
		if base == "" {
			t.Skip(EnvPostgresDSN + " not set; skipping PostgreSQL tests")
		}
		return postgresSchema(t, base)
	}
	t.Fatalf("testdb: unknown backend %q (want one of sqlite, postgres, memory)", backend)
	return ""
}

func postgresSchema(t testing.TB, base string) string {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	schema := "embedkit_test_" + hex.EncodeToString(b[:])

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("testdb: connect to %s: %v", EnvPostgresDSN, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("testdb: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("testdb: drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		// A connection of the test that is still closing may hold locks
		// that the drop's cascade takes in another order: PostgreSQL then
		// cancels one of them (deadlock detected), and the drop runs again.
		for try := 1; ; try++ {
			_, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
			var pe *pgconn.PgError
			if err == nil || try == 5 || !errors.As(err, &pe) || pe.Code != "40P01" {
				if err != nil {
					t.Errorf("testdb: drop schema %s: %v", schema, err)
				}
				break
			}
			time.Sleep(time.Duration(try) * 100 * time.Millisecond)
		}
	})
	return withSearchPath(base, schema)
}

// withSearchPath adds search_path to a URL or keyword/value DSN; pgx sends
// unknown parameters to the server as runtime parameters.
func withSearchPath(dsn, schema string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err == nil {
			q := u.Query()
			q.Set("search_path", schema)
			u.RawQuery = q.Encode()
			return u.String()
		}
	}
	return dsn + " search_path=" + schema
}
