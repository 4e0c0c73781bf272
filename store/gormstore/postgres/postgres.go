// Package postgres opens a [gormstore.Store] on PostgreSQL from a DSN,
// through gorm.io/driver/postgres (pgx). It needs no cgo.
//
//	st, err := postgres.Open("postgres://user@host:5432/db?sslmode=disable")
//
// A host with its own GORM configuration or pool opens the database itself
// and hands the handle to [gormstore.OpenDB].
package postgres

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	gormpostgres "gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore"
)

// PoolSize returns the size of the pool Open creates: four connections per
// core the Go runtime may use (runtime.GOMAXPROCS), at least 16, since a
// transaction holds its connection over a round trip per statement, mostly
// waiting (fewer queued chat openings on small machines).
func PoolSize() int { return max(16, 4*runtime.GOMAXPROCS(0)) }

// Open connects to the PostgreSQL database named by dsn (a URL or
// keyword/value DSN of pgx) and returns a migrated store that owns the
// connection pool: [gormstore.Store.Close] closes it. GORM logs nothing.
func Open(dsn string, opts ...gormstore.Option) (*gormstore.Store, error) {
	db, err := gorm.Open(gormpostgres.Open(dsn), &gorm.Config{SkipDefaultTransaction: true, Logger: logger.Discard})
	if pe, ok := errors.AsType[*pgconn.ParseConfigError](err); ok {
		// pgx's message quotes the DSN, hiding only the spellings of a
		// password it knows ("password = x" is not one): the reason
		// alone, and not the error, which holds the DSN.
		bare := *pe
		bare.ConnString = ""
		return nil, fmt.Errorf("gormstore/postgres: open: the DSN does not parse: %s", strings.TrimPrefix(bare.Error(), "cannot parse ``: "))
	}
	if err != nil {
		// gorm.Open pings the server: it is unreachable or refuses us.
		return nil, fmt.Errorf("gormstore/postgres: open: %w: %w", store.ErrUnavailable, err)
	}
	sqlDB, _ := db.DB() // the dialector's *sql.DB
	sqlDB.SetMaxOpenConns(PoolSize())
	sqlDB.SetMaxIdleConns(PoolSize())
	sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	// With WithCloseDB, OpenDB closes the pool when the migration fails.
	return gormstore.OpenDB(db, append([]gormstore.Option{gormstore.WithCloseDB()}, opts...)...)
}
