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

// maxStmts bounds the statements a connection keeps: texts vary with the
// number of values of an IN list or a batch insert.
const maxStmts = 64

// conn is a go-sqlite3 connection whose QueryContext and ExecContext run
// a single statement on one kept prepared for its text. database/sql uses
// a connection from one goroutine at a time, so the map needs no lock.
type conn struct {
	*sqlite3.SQLiteConn
	stmts map[string]*stmt
}

// stmt is a kept statement; busy while rows read from it are open, when a
// query of the same text prepares one of its own (binding would reset the
// statement under the open rows).
type stmt struct {
	*sqlite3.SQLiteStmt
	busy bool
}

// kept returns q's kept statement, or nil when q runs as go-sqlite3 runs
// it: a text that may hold several statements or none (a ';' or a comment,
// even in a literal), one whose statement is busy, or arguments that are
// named or more or fewer than its parameters (go-sqlite3 then fails or
// ignores the extra ones; a kept statement would keep an earlier binding).
func (c *conn) kept(ctx context.Context, q string, args []driver.NamedValue) (*stmt, error) {
	if strings.Contains(q, ";") || strings.Contains(q, "--") || strings.Contains(q, "/*") || strings.TrimSpace(q) == "" {
		return nil, nil
	}
	for _, a := range args {
		if a.Name != "" {
			return nil, nil
		}
	}
	s, ok := c.stmts[q]
	switch {
	case ok && (s.busy || s.NumInput() != len(args)):
		return nil, nil
	case ok:
		return s, nil
	}
	if len(c.stmts) >= maxStmts {
		for k, s := range c.stmts {
			if !s.busy { // a busy one is read from still; it is closed with the connection
				_ = s.Close()
				delete(c.stmts, k)
			}
		}
	}
	ds, err := c.SQLiteConn.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	s = &stmt{SQLiteStmt: ds.(*sqlite3.SQLiteStmt)}
	c.stmts[q] = s
	if s.NumInput() != len(args) {
		return nil, nil
	}
	return s, nil
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
	if s == nil {
		return c.SQLiteConn.ExecContext(ctx, q, args)
	}
	return s.ExecContext(ctx, args)
}

func (c *conn) Close() error {
	for k, s := range c.stmts {
		_ = s.Close()
		delete(c.stmts, k)
	}
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
