package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"

	"github.com/mattn/go-sqlite3"
)

// driverName is github.com/mattn/go-sqlite3 with each connection keeping
// the statements it runs prepared. SQLite spends more preparing most of the
// store's statements than running them, and database/sql prepares afresh
// for every query that is not an explicit [sql.Stmt]; a statement kept per
// connection serves the store's reads and its writer alike, whichever
// connection database/sql hands out.
const driverName = "embedkit_sqlite3"

func init() { sql.Register(driverName, stmtCachingDriver{}) }

type stmtCachingDriver struct{}

func (stmtCachingDriver) Open(dsn string) (driver.Conn, error) {
	c, err := (&sqlite3.SQLiteDriver{}).Open(dsn)
	if err != nil {
		return nil, err
	}
	return &conn{SQLiteConn: c.(*sqlite3.SQLiteConn), stmts: map[string]*stmt{}}, nil
}

const (
	// maxStmts bounds the statements a connection keeps: texts vary with
	// the number of values of an IN list or a batch insert.
	maxStmts = 64
	// maxKeptArgs bounds the text and blob bytes a kept statement is run
	// with: SQLite keeps a statement's last bindings, copies, until it is
	// run again.
	maxKeptArgs = 64 << 10
)

// conn is a go-sqlite3 connection whose QueryContext and ExecContext run
// a single statement on one kept prepared for its text. database/sql uses
// a connection from one goroutine at a time (and closes rows under the
// same lock), so the map needs no lock of its own.
type conn struct {
	*sqlite3.SQLiteConn
	stmts map[string]*stmt
}

// stmt is a kept statement; busy while rows read from it are open, when a
// query of the same text prepares one of its own (binding would reset the
// statement under the open rows).
type stmt struct {
	*sqlite3.SQLiteStmt
	rows bool // it returns rows: an exec would leave it running
	busy bool
}

// Unwrap returns the go-sqlite3 connection, for code that registers
// functions or hooks on it (the analytics tool's guard).
func (c *conn) Unwrap() *sqlite3.SQLiteConn { return c.SQLiteConn }

// kept returns q's kept statement, or nil when q runs as go-sqlite3 runs
// it, prepared anew:
//   - a text that may hold several statements or none (a ';' or a
//     comment, even in a literal);
//   - a text whose result columns a schema change could change (a '*'
//     that is not count(*)): SQLite prepares an expired statement again
//     when it steps it, but go-sqlite3 reads its columns before, so a kept
//     SELECT * would name the old ones for a run;
//   - a statement whose rows are being read, arguments that are named or
//     more or fewer than its parameters (go-sqlite3 then fails or ignores
//     the extra ones; a kept statement would keep an earlier binding), or
//     large ones (SQLite keeps a copy of a statement's last bindings).
func (c *conn) kept(ctx context.Context, q string, args []driver.NamedValue) (*stmt, error) {
	size := 0
	for _, a := range args {
		switch v := a.Value.(type) {
		case string:
			size += len(v)
		case []byte:
			size += len(v)
		}
		if a.Name != "" || size > maxKeptArgs {
			return nil, nil
		}
	}
	s, ok := c.stmts[q]
	switch {
	case ok && (s.busy || s.NumInput() != len(args)):
		return nil, nil
	case ok:
		return s, nil
	case !keepable(q): // checked once per text kept: a kept text passed
		return nil, nil
	}
	if len(c.stmts) >= maxStmts {
		c.drop(false)
	}
	ds, err := c.SQLiteConn.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	s = &stmt{SQLiteStmt: ds.(*sqlite3.SQLiteStmt)}
	// Whether it returns rows: its columns, read without a step.
	r, err := s.Query(nil)
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	s.rows = len(r.Columns()) > 0
	_ = r.Close()
	c.stmts[q] = s
	if s.NumInput() != len(args) {
		return nil, nil
	}
	return s, nil
}

// keepable reports whether q's statement may be kept: one statement (no
// ';' or comment) whose result columns no schema change can change.
func keepable(q string) bool {
	return !strings.Contains(q, ";") && !strings.Contains(q, "--") && !strings.Contains(q, "/*") && strings.TrimSpace(q) != "" && !star(q)
}

// star reports whether q has a '*' other than count(*)'s.
func star(q string) bool {
	for i := strings.IndexByte(q, '*'); i >= 0; i = strings.IndexByte(q, '*') {
		if !strings.HasSuffix(strings.TrimRight(q[:i], " "), "(") {
			return true
		}
		q = q[i+1:]
	}
	return false
}

// drop closes the kept statements, all of them or those not busy (a busy
// one is read from still; it is closed with the connection).
func (c *conn) drop(all bool) {
	for k, s := range c.stmts {
		if all || !s.busy {
			_ = s.Close()
			delete(c.stmts, k)
		}
	}
}

func (c *conn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	s, err := c.kept(ctx, q, args)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return c.SQLiteConn.QueryContext(ctx, q, args)
	}
	r, err := s.QueryContext(ctx, args)
	if err != nil {
		return nil, err
	}
	s.busy = true
	return &rows{SQLiteRows: r.(*sqlite3.SQLiteRows), s: s}, nil
}

func (c *conn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	s, err := c.kept(ctx, q, args)
	if err != nil {
		return nil, err
	}
	if s == nil || s.rows { // go-sqlite3 finalizes such a statement after its one step
		return c.SQLiteConn.ExecContext(ctx, q, args)
	}
	return s.ExecContext(ctx, args)
}

func (c *conn) Close() error {
	c.drop(true)
	return c.SQLiteConn.Close()
}

// rows gives its statement back when closed (go-sqlite3 resets it).
type rows struct {
	*sqlite3.SQLiteRows
	s *stmt
}

func (r *rows) Close() error {
	err := r.SQLiteRows.Close()
	r.s.busy = false
	return err
}
