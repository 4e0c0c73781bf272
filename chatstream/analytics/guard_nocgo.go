//go:build !cgo

package analytics

import (
	"errors"

	"github.com/mattn/go-sqlite3"
)

// errNoCgo is why a build without cgo cannot run svcSqlApi: its safety
// relies on SQLite's authorizer and progress handler, reached through cgo.
var errNoCgo = errors.New("analytics: svcSqlApi needs cgo (SQLite through github.com/mattn/go-sqlite3)")

// guard is the per-connection state of the SQLite hooks; without cgo there
// are none, and installing them fails.
type guard struct {
	views  map[string]bool
	access Access
	denied string
}

func (t *SQLTool) prepare(*sqlite3.SQLiteConn) (*guard, error) { return nil, errNoCgo }
func (g *guard) release()                                      {}
func (g *guard) begin(a Access, _ int64)                       { g.access = a }
func (g *guard) end()                                          { g.access = Access{} }
func (g *guard) exhausted() bool                               { return false }

func (g *guard) check(string) (string, bool, bool, bool, bool, error) {
	return "", false, false, false, false, errNoCgo
}

func sqliteMessage(error) (string, bool) { return "", false }
