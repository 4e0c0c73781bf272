// Package sqlite opens a [gormstore.Store] on a SQLite file or an in-memory
// SQLite database from a path. It uses gorm.io/driver/sqlite, which needs
// cgo (github.com/mattn/go-sqlite3); a host on PostgreSQL or memstore does
// not import it and builds with CGO_ENABLED=0.
//
//	st, err := sqlite.Open("embed.db") // or ":memory:"
//	if err != nil { ... }
//	defer st.Close()
//
// A host that wants its own GORM configuration (logger, callbacks, plugins)
// opens the database itself, with [Dialector] for the settings below, and
// hands the handle to [gormstore.OpenDB].
package sqlite

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"

	gormsqlite "gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/embedkit/embedkit/store/gormstore"
)

// readConns is the number of connections a file store keeps for reads
// outside transactions, beside its single writer connection. Reads never
// wait for the writer (WAL mode).
const readConns = 4

var memCounter atomic.Int64

// Open opens the SQLite database at path (":memory:" for a private
// in-memory database: two in-memory stores never share data) and returns a
// migrated store that owns it: [gormstore.Store.Close] closes the database.
// path may carry query parameters of github.com/mattn/go-sqlite3; the
// settings of [Dialector] follow them. GORM logs nothing.
//
// A file database gets a pool of five connections: the store's writer and
// four for reads. An in-memory database has one connection for everything.
func Open(path string, opts ...gormstore.Option) (*gormstore.Store, error) {
	memory := path == ":memory:" || path == "file::memory:" || strings.Contains(path, "mode=memory")
	if path == ":memory:" || path == "file::memory:" {
		// A unique name keeps the stores of one process apart; the held
		// writer connection keeps the database alive until Close.
		path = fmt.Sprintf("file:embedkit-mem-%d-%d?mode=memory&cache=shared", memCounter.Add(1), rand.Int64())
	}
	db, err := gorm.Open(Dialector(path), &gorm.Config{SkipDefaultTransaction: true, Logger: logger.Discard})
	if err != nil {
		return nil, fmt.Errorf("gormstore/sqlite: open: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("gormstore/sqlite: open: %w", err)
	}
	n := 1 + readConns
	if memory {
		n = 1
	}
	sqlDB.SetMaxOpenConns(n)
	sqlDB.SetMaxIdleConns(n)
	st, err := gormstore.OpenDB(db, append([]gormstore.Option{gormstore.WithCloseDB()}, opts...)...)
	if err != nil {
		_ = sqlDB.Close()
		return nil, err
	}
	return st, nil
}

// Dialector returns the gorm.io/driver/sqlite dialector for path with the
// settings the store expects on every connection: foreign keys on (deleting
// a user cascades), a busy timeout of 2.5 s, transactions that take the
// write lock when they begin (BEGIN IMMEDIATE), and for a file WAL
// journaling with synchronous=NORMAL (readers never wait for the writer;
// a commit is durable at the next checkpoint) and a 16 MB page cache.
func Dialector(path string) gorm.Dialector {
	memory := strings.Contains(path, ":memory:") || strings.Contains(path, "mode=memory")
	params := []string{"_foreign_keys=on", "_busy_timeout=2500", "_txlock=immediate"}
	if !memory {
		params = append(params, "_journal_mode=WAL", "_synchronous=NORMAL", "_cache_size=-16000")
	}
	return gormsqlite.Open(dsn(path, params...))
}

// dsn turns a path (with optional query) into a go-sqlite3 URI DSN with the
// given extra parameters.
func dsn(path string, params ...string) string {
	p, query, _ := strings.Cut(path, "?")
	if !strings.HasPrefix(p, "file:") {
		r := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")
		p = "file:" + r.Replace(p)
	}
	q := query
	for _, x := range params {
		if q != "" {
			q += "&"
		}
		q += x
	}
	return p + "?" + q
}
