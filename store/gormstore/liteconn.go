package gormstore

import (
	"context"
	"database/sql"
	"errors"

	"gorm.io/gorm"
)

// pinnedConn is the SQLite writer connection, held for the store's
// lifetime, as a GORM connection pool: statements run through GORM (the
// host's logger, callbacks and plugins see them) and reach this connection,
// which keeps each statement prepared. Preparing is most of the cost of a
// small SQLite statement: without the cache generate-session ran at a
// third of the throughput.
//
// It reports itself as a transaction (gorm.TxCommitter) so that the
// connection-switching plugins (gorm.io/plugin/dbresolver) leave its
// statements where they are, as they must: the connection holds the
// per-connection settings and, in memory, the database itself. Its Commit
// and Rollback are never called; GORM's Begin on it returns a liteTx.
type pinnedConn struct {
	conn  *sql.Conn
	stmts map[string]*sql.Stmt
}

var (
	_ gorm.ConnPool         = (*pinnedConn)(nil)
	_ gorm.ConnPoolBeginner = (*pinnedConn)(nil)
	_ gorm.TxCommitter      = (*liteTx)(nil)
)

var errPinned = errors.New("gormstore: the SQLite writer connection is not a transaction")

// maxCachedStmts bounds the prepared statements kept on the connection;
// statements beyond it (unusual batch sizes) are prepared for one use.
const maxCachedStmts = 256

func (c *pinnedConn) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if st, ok := c.stmts[query]; ok {
		return st, nil
	}
	if len(c.stmts) >= maxCachedStmts {
		return nil, nil
	}
	st, err := c.conn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.stmts[query] = st
	return st, nil
}

// PrepareContext implements gorm.ConnPool.
func (c *pinnedConn) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return c.stmt(ctx, query)
}

// ExecContext implements gorm.ConnPool. ctx must not be cancelable:
// go-sqlite3 runs every statement of a cancelable context on a new
// goroutine, which costs more than the statement; the store checks
// deadlines between statements instead.
func (c *pinnedConn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return c.conn.ExecContext(ctx, query, args...)
	}
	return st.ExecContext(ctx, args...)
}

// QueryContext implements gorm.ConnPool.
func (c *pinnedConn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return c.conn.QueryContext(ctx, query, args...)
	}
	return st.QueryContext(ctx, args...)
}

// QueryRowContext implements gorm.ConnPool.
func (c *pinnedConn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	st, err := c.stmt(ctx, query)
	if err != nil || st == nil {
		return c.conn.QueryRowContext(ctx, query, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

// BeginTx implements gorm.ConnPoolBeginner: BEGIN IMMEDIATE takes the
// write lock at once, whatever the DSN says, so that a transaction never
// fails to upgrade a read lock when another process writes.
func (c *pinnedConn) BeginTx(ctx context.Context, _ *sql.TxOptions) (gorm.ConnPool, error) {
	if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return nil, err
	}
	return &liteTx{pinnedConn: c}, nil
}

// Commit implements gorm.TxCommitter; it is never called (see pinnedConn).
func (c *pinnedConn) Commit() error { return errPinned }

// Rollback implements gorm.TxCommitter; it is never called.
func (c *pinnedConn) Rollback() error { return errPinned }

func (c *pinnedConn) close() error {
	for _, st := range c.stmts {
		_ = st.Close()
	}
	c.stmts = nil
	return c.conn.Close()
}

// liteTx is a transaction on the writer connection.
type liteTx struct {
	*pinnedConn
	done bool
}

// Commit implements gorm.TxCommitter.
func (t *liteTx) Commit() error { return t.end("COMMIT") }

// Rollback implements gorm.TxCommitter.
func (t *liteTx) Rollback() error { return t.end("ROLLBACK") }

func (t *liteTx) end(stmt string) error {
	if t.done {
		return sql.ErrTxDone
	}
	_, err := t.pinnedConn.ExecContext(context.Background(), stmt)
	if err == nil || stmt == "ROLLBACK" {
		t.done = true
	}
	return err
}
