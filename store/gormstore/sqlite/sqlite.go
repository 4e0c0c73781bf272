// Package sqlite opens a [gormstore.Store] on a SQLite file or a private
// in-memory database, through gorm.io/driver/sqlite (cgo,
// github.com/mattn/go-sqlite3); a host on PostgreSQL does not import it.
//
//	st, err := sqlite.Open("embed.db") // or ":memory:"
//
// A host with its own GORM configuration opens the database itself with
// [Dialector] and hands the handle to [gormstore.OpenDB].
package sqlite

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	gormsqlite "gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/embedkit/embedkit/store/gormstore"
)

var memCounter atomic.Int64

// Open opens the SQLite database at path (":memory:" for a private
// in-memory database) and returns a migrated store that owns it:
// [gormstore.Store.Close] closes it. path may carry query parameters of
// github.com/mattn/go-sqlite3. GORM logs nothing.
//
// An in-memory database lives as long as one of its connections: the store
// holds one for its life, and its pool has one other for reads and the
// writer in turn (in a shared cache, a read beside the writer's
// transaction finds the tables it wrote locked).
func Open(path string, opts ...gormstore.Option) (*gormstore.Store, error) {
	if path == ":memory:" || path == "file::memory:" {
		// A unique name keeps the stores of one process apart.
		path = fmt.Sprintf("file:embedkit-mem-%d?mode=memory&cache=shared", memCounter.Add(1))
	}
	cfg := &gorm.Config{SkipDefaultTransaction: true, Logger: logger.Discard}
	db, err := gorm.Open(Dialector(path), cfg)
	for wait := time.Millisecond; err != nil && strings.Contains(err.Error(), "database is locked") && wait < time.Second; wait *= 2 {
		time.Sleep(wait) // a new file's switch to WAL fails at once while another connection opens it
		db, err = gorm.Open(Dialector(path), cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("gormstore/sqlite: open: %w", err)
	}
	sqlDB, _ := db.DB()                  // the dialector's *sql.DB
	n := max(5, runtime.GOMAXPROCS(0)+2) // reads on every core beside the writer and the connection it keeps
	own := []gormstore.Option{gormstore.WithCloseDB()}
	if strings.Contains(path, "mode=memory") {
		n = 2
		keep, err := sqlDB.Conn(context.Background())
		if err != nil {
			_ = sqlDB.Close()
			return nil, fmt.Errorf("gormstore/sqlite: open: %w", err)
		}
		own = append(own, gormstore.WithOnClose(keep.Close))
	}
	sqlDB.SetMaxOpenConns(n)
	sqlDB.SetMaxIdleConns(n)
	// With WithCloseDB, OpenDB closes the pool when the migration fails.
	return gormstore.OpenDB(db, append(own, opts...)...)
}

// Dialector returns the dialector for path with the settings the store
// needs on every connection: foreign keys on (deleting a user cascades), a
// busy timeout of 2.5 s, transactions that take the write lock when they
// begin (BEGIN IMMEDIATE: no deadlock between two that read first), and
// for a file WAL journaling (readers never wait for the writer) with
// synchronous=FULL (a commit is on disk before it returns, so what a
// request acknowledged survives a power cut, not only a crash of the
// process; the group commit shares one sync among the transactions of a
// group) and a 16 MB page cache. Its connections keep the statements they
// run prepared (the driver "embedkit_sqlite3": go-sqlite3 with a cache of
// statements per connection), since SQLite spends more preparing most of
// the store's statements than running them.
func Dialector(path string) gorm.Dialector {
	params := []string{"_foreign_keys=on", "_busy_timeout=2500", "_txlock=immediate"}
	if !strings.Contains(path, ":memory:") && !strings.Contains(path, "mode=memory") {
		params = append(params, "_journal_mode=WAL", "_synchronous=FULL", "_cache_size=-16000")
	}
	p, query, _ := strings.Cut(path, "?")
	if !strings.HasPrefix(p, "file:") {
		p = "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(p)
	}
	if query != "" {
		params = append([]string{query}, params...)
	}
	return gormsqlite.New(gormsqlite.Config{DriverName: driverName, DSN: p + "?" + strings.Join(params, "&")})
}
