package gormstore

import (
	"context"
	"database/sql"
	"sync"

	"gorm.io/gorm"
)

// stmts keeps SQLite statements prepared, one per statement text: compiling
// is a large part of a short statement's cost on SQLite, and database/sql
// keeps a statement prepared on the pool once per connection, whereas GORM's
// PrepareStmt compiles again in every transaction. (PostgreSQL's driver
// keeps its own per connection.) The statements still run through GORM, so
// a host's callbacks and logger see every one.
type stmts struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

// maxStmts bounds the texts kept (lists of names make texts vary).
const maxStmts = 256

func (c *stmts) get(query string) *sql.Stmt {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[query]
}

// prepare prepares the texts a transaction ran unprepared. It runs after the
// transaction gave its connection back (preparing on the pool from inside
// one could wait for a connection that every transaction holds) and before
// it releases the write lock, so no transaction waits on c.mu meanwhile.
func (c *stmts) prepare(ctx context.Context, queries []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, q := range queries {
		if _, ok := c.m[q]; ok || len(c.m) >= maxStmts {
			continue
		}
		if st, err := c.db.PrepareContext(ctx, q); err == nil {
			c.m[q] = st // on an error it runs unprepared next time too
		}
	}
}

func (c *stmts) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for q, st := range c.m {
		_ = st.Close()
		delete(c.m, q)
	}
}

// stmtTx is the group's transaction as GORM's connection pool: it runs the
// kept statements on the transaction's connection (a plain *sql.Tx) and
// notes the texts it ran unprepared. A statement, once started, is not
// interrupted by its context (the driver gets the context without its
// cancellation): interrupting a SQLite statement rolls back the whole
// transaction, which other calls share. A call whose context ended fails
// before its next statement.
type stmtTx struct {
	gorm.ConnPool
	c      *stmts
	missed []string
}

func newStmtTx(pool gorm.ConnPool, c *stmts) *stmtTx {
	if _, ok := pool.(*sql.Tx); !ok {
		c = nil
	}
	return &stmtTx{ConnPool: pool, c: c}
}

func (t *stmtTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ctx = context.WithoutCancel(ctx)
	if st := t.c.get(q); st != nil {
		return t.ConnPool.(*sql.Tx).StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	t.missed = append(t.missed, q)
	return t.ConnPool.ExecContext(ctx, q, args...)
}

func (t *stmtTx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ctx = context.WithoutCancel(ctx)
	if st := t.c.get(q); st != nil {
		return t.ConnPool.(*sql.Tx).StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	t.missed = append(t.missed, q)
	return t.ConnPool.QueryContext(ctx, q, args...)
}

func (t *stmtTx) Commit() error   { return t.ConnPool.(gorm.TxCommitter).Commit() }
func (t *stmtTx) Rollback() error { return t.ConnPool.(gorm.TxCommitter).Rollback() }
