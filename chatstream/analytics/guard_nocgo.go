//go:build !cgo

package analytics

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// errNoCgo is why a build without cgo cannot run svcSqlApi on SQLite: its
// safety relies on SQLite's authorizer and progress handler, reached
// through cgo.
var errNoCgo = errors.New("analytics: svcSqlApi on SQLite needs cgo (github.com/mattn/go-sqlite3)")

// guard is the per-connection state of the SQLite hooks; without cgo there
// are none.
type guard struct{ denied string }

func (g *guard) exhausted() bool { return false }

func (g *guard) overMemory() bool { return false }

type sqliteViews struct{}

func newSQLiteViews(*Model) *sqliteViews { return &sqliteViews{} }

func (t *SQLTool) sqliteConn(context.Context) (*sql.Conn, *guard, error) { return nil, nil, errNoCgo }

func (t *SQLTool) openSQLite(context.Context, context.CancelFunc, time.Duration, int64, string, Access) (cursor, error) {
	return nil, errNoCgo
}

type checker struct{}
