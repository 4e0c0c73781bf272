package gormstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Statements run through database/sql on the connections GORM opened,
// not through GORM's builder: GORM's prepared-statement mode re-prepares
// every statement inside a transaction (it caches a transaction-bound
// *sql.Stmt), its builder expands []byte parameters after "(", and its
// reflection-based scanning showed up as a third of the CPU time of a
// provisioning transaction. Here each statement is written once with "?"
// placeholders, rebound for PostgreSQL, prepared once per SQLite connection,
// and scanned into the row structs of models.go.

// execer is what a statement runs on: a SQLite connection with its statement
// cache, or a PostgreSQL connection or transaction used through pgx's own
// API (database/sql would add a goroutine per query with a cancelable
// context, and conversions; ~60 us instead of ~80-95 us per round trip).
type execer interface {
	// run executes a statement and returns the rows it affected.
	run(ctx context.Context, query string, args []any) (int64, error)
	// rows executes a statement that returns rows.
	rows(ctx context.Context, query string, args []any) (rowIter, error)
}

// rowIter is the part of *sql.Rows and pgx.Rows that find uses.
type rowIter interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

func (c *liteConn) run(ctx context.Context, query string, args []any) (int64, error) {
	res, err := c.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (c *liteConn) rows(ctx context.Context, query string, args []any) (rowIter, error) {
	return c.QueryContext(ctx, query, args...)
}

// pgxQuerier is satisfied by *pgx.Conn and pgx.Tx.
type pgxQuerier interface {
	Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// pgxExec runs statements on a PostgreSQL connection or transaction; pgx
// prepares and caches each statement per connection.
type pgxExec struct{ q pgxQuerier }

func (p pgxExec) run(ctx context.Context, query string, args []any) (int64, error) {
	tag, err := p.q.Exec(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (p pgxExec) rows(ctx context.Context, query string, args []any) (rowIter, error) {
	r, err := p.q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgxRows{r}, nil
}

// pgxTx runs the statements of one PostgreSQL transaction on a connection,
// saving round trips:
//
//   - BEGIN is not sent on its own: it travels with the first statement;
//   - writes whose result fn does not need (queued with txn.execLater) wait
//     and travel with the next statement, or with COMMIT.
//
// Statements of one trip are sent as a pgx batch (a pipeline). An error of
// a queued write is returned by the call that sends it.
type pgxTx struct {
	conn    *pgx.Conn
	hook    func(context.Context, string)
	begun   bool
	pending []pendingStmt
}

type pendingStmt struct {
	op, query string
	args      []any
}

// send starts a batch with BEGIN (if not sent yet), the queued writes and
// queries. It reads the results up to the queued writes and returns the
// batch positioned at the first query's result.
func (p *pgxTx) send(ctx context.Context, queries ...pendingStmt) (pgx.BatchResults, error) {
	var b pgx.Batch
	if !p.begun {
		b.Queue("BEGIN")
	}
	for _, q := range p.pending {
		b.Queue(q.query, q.args...)
	}
	for _, q := range queries {
		b.Queue(q.query, q.args...)
	}
	br := p.conn.SendBatch(ctx, &b)
	if !p.begun {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			p.pending = nil
			return nil, wrapErr("begin", err)
		}
		p.begun = true
	}
	pending := p.pending
	p.pending = nil
	for _, q := range pending {
		_, err := br.Exec()
		if p.hook != nil {
			p.hook(ctx, q.query)
		}
		if err != nil {
			_ = br.Close()
			return nil, wrapErr(q.op, err)
		}
	}
	return br, nil
}

func (p *pgxTx) run(ctx context.Context, query string, args []any) (int64, error) {
	if p.begun && len(p.pending) == 0 {
		return pgxExec{p.conn}.run(ctx, query, args)
	}
	br, err := p.send(ctx, pendingStmt{query: query, args: args})
	if err != nil {
		return 0, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (p *pgxTx) rows(ctx context.Context, query string, args []any) (rowIter, error) {
	if p.begun && len(p.pending) == 0 {
		return pgxExec{p.conn}.rows(ctx, query, args)
	}
	br, err := p.send(ctx, pendingStmt{query: query, args: args})
	if err != nil {
		return nil, err
	}
	r, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return pgxBatchRows{pgxRows{r}, br}, nil
}

// commit sends the queued writes and COMMIT. A transaction that failed on
// the server answers COMMIT with ROLLBACK, which is an error here.
func (p *pgxTx) commit(ctx context.Context) error {
	if !p.begun && len(p.pending) == 0 {
		return nil
	}
	var tag pgconn.CommandTag
	var err error
	if len(p.pending) == 0 {
		tag, err = p.conn.Exec(ctx, "COMMIT")
	} else {
		var br pgx.BatchResults
		if br, err = p.send(ctx, pendingStmt{query: "COMMIT"}); err != nil {
			return err
		}
		tag, err = br.Exec()
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return err
	}
	p.begun = false
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

func (p *pgxTx) rollback(ctx context.Context) {
	p.pending = nil
	if p.begun {
		p.begun = false
		_, _ = p.conn.Exec(ctx, "ROLLBACK")
	}
}

// pgxBatchRows closes the batch with its rows.
type pgxBatchRows struct {
	pgxRows
	br pgx.BatchResults
}

func (r pgxBatchRows) Close() error {
	err := r.pgxRows.Close()
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

// errBatch is a pgx.BatchResults that failed before its second statement.
type errBatch struct{ err error }

func (e errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, e.err }
func (e errBatch) Query() (pgx.Rows, error)         { return nil, e.err }
func (e errBatch) QueryRow() pgx.Row                { return errRow{e.err} }
func (e errBatch) Close() error                     { return nil }

type errRow struct{ err error }

func (e errRow) Scan(...any) error { return e.err }

type pgxRows struct{ pgx.Rows }

func (r pgxRows) Close() error {
	r.Rows.Close()
	return r.Rows.Err()
}

// maxCachedStmts bounds the prepared statements kept per SQLite connection;
// statements beyond it (unusual batch sizes) are prepared for one use.
const maxCachedStmts = 256

// liteConn is one SQLite connection held by the store for its lifetime, with
// the statements prepared on it. It is used by one goroutine at a time (the
// holder of the writer slot, or of a reader taken from the reader channel).
type liteConn struct {
	conn  *sql.Conn
	stmts map[string]*sql.Stmt
}

func newLiteConn(ctx context.Context, db *sql.DB) (*liteConn, error) {
	c, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return &liteConn{conn: c, stmts: make(map[string]*sql.Stmt)}, nil
}

func (c *liteConn) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
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

// ExecContext runs query on the connection. ctx must not be cancelable:
// go-sqlite3 runs every statement and every row of a cancelable context on
// a new goroutine, which costs more than the statement; deadlines are
// checked by the caller between statements instead.
func (c *liteConn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return c.conn.ExecContext(ctx, query, args...)
	}
	return st.ExecContext(ctx, args...)
}

// QueryContext is ExecContext for statements that return rows.
func (c *liteConn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return c.conn.QueryContext(ctx, query, args...)
	}
	return st.QueryContext(ctx, args...)
}

func (c *liteConn) close() error {
	for _, st := range c.stmts {
		_ = st.Close()
	}
	c.stmts = nil
	return c.conn.Close()
}

// bind rewrites list parameters ([]int64, []string, written "IN ?" or
// "NOT IN ?") into one parameter each, so that a statement's text does not
// depend on the length of its lists (one prepared statement, no limit on the
// number of values): SQLite reads a JSON array with json_each, PostgreSQL
// an array with unnest. For PostgreSQL it also numbers the placeholders.
func bind(query string, numbered bool, args []any) (string, []any) {
	lists := false
	for _, a := range args {
		switch a.(type) {
		case []int64, []string:
			lists = true
		}
	}
	if !numbered && !lists {
		return query, args
	}
	var b strings.Builder
	b.Grow(len(query) + 32)
	out := args
	if lists {
		out = make([]any, len(args))
		copy(out, args)
	}
	n := 0
	for j := 0; j < len(query); j++ {
		ch := query[j]
		if ch != '?' {
			b.WriteByte(ch)
			continue
		}
		mark := "?"
		if numbered {
			mark = "$" + strconv.Itoa(n+1)
		}
		var a any
		if n < len(args) {
			a = args[n]
		}
		switch v := a.(type) {
		case []int64:
			if numbered {
				b.WriteString("(SELECT unnest(" + mark + "::bigint[]))")
			} else {
				b.WriteString("(SELECT value FROM json_each(" + mark + "))")
				out[n] = jsonInts(v)
			}
		case []string:
			if numbered {
				b.WriteString("(SELECT unnest(" + mark + "::text[]))")
			} else {
				b.WriteString("(SELECT value FROM json_each(" + mark + "))")
				j, _ := json.Marshal(v) // strings always marshal
				out[n] = string(j)
			}
		default:
			b.WriteString(mark)
		}
		n++
	}
	return b.String(), out
}

func jsonInts(v []int64) string {
	b := make([]byte, 0, 2+8*len(v))
	b = append(b, '[')
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, x, 10)
	}
	return string(append(b, ']'))
}

// scanner is a row struct that lists its fields for Rows.Scan.
type scanner interface{ dest() []any }

// collector is a slice of row structs that grows by one row per call.
type collector interface{ add() []any }

func (t *txn) exec(ctx context.Context, op, query string, args ...any) (int64, error) {
	query, args = bind(query, t.s.dialect == postgresDialect, args)
	ctx, done, err := t.begin(ctx)
	if err != nil {
		return 0, wrapErr(op, err)
	}
	defer done()
	n, err := t.ex.run(ctx, query, args)
	if t.s.cfg.hook != nil {
		t.s.cfg.hook(ctx, query)
	}
	if err != nil {
		return 0, wrapErr(op, err)
	}
	return n, nil
}

// execLater runs a write whose result the caller does not need. On
// PostgreSQL inside a transaction it is queued and sent with the next
// statement or the commit (one round trip less); its error is then returned
// by that later call. Elsewhere it runs at once.
func (t *txn) execLater(ctx context.Context, op, query string, args ...any) error {
	p, ok := t.ex.(*pgxTx)
	if !ok {
		_, err := t.exec(ctx, op, query, args...)
		return err
	}
	query, args = bind(query, true, args)
	if err := t.check(ctx); err != nil {
		return wrapErr(op, err)
	}
	p.pending = append(p.pending, pendingStmt{op: op, query: query, args: args})
	return nil
}

// find runs a query and scans its rows into dest, a scanner (first row) or
// a collector (every row), returning the number of rows.
func (t *txn) find(ctx context.Context, op string, dest any, query string, args ...any) (int64, error) {
	query, args = bind(query, t.s.dialect == postgresDialect, args)
	ctx, done, err := t.begin(ctx)
	if err != nil {
		return 0, wrapErr(op, err)
	}
	defer done()
	rows, err := t.ex.rows(ctx, query, args)
	if t.s.cfg.hook != nil {
		t.s.cfg.hook(ctx, query)
	}
	if err != nil {
		return 0, wrapErr(op, err)
	}
	return scanRows(op, rows, dest)
}

// scanRows scans rows into dest (see find) and closes them.
func scanRows(op string, rows rowIter, dest any) (int64, error) {
	defer rows.Close()
	var n int64
	for rows.Next() {
		var d []any
		switch v := dest.(type) {
		case collector:
			d = v.add()
		case scanner:
			if n > 0 {
				n++
				continue
			}
			d = v.dest()
		}
		if err := rows.Scan(d...); err != nil {
			return 0, wrapErr(op, err)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return 0, wrapErr(op, err)
	}
	if err := rows.Close(); err != nil {
		return 0, wrapErr(op, err)
	}
	return n, nil
}

// query is one statement of findAll: its text, arguments and destination.
type query struct {
	dest any
	sql  string
	args []any
}

// findAll runs independent queries, each as find would, and returns the
// number of rows of each. On PostgreSQL they travel in one round trip (with
// BEGIN and the queued writes, inside a transaction); on SQLite, where a
// statement costs no round trip, they run one after the other.
func (t *txn) findAll(ctx context.Context, op string, queries ...query) ([]int64, error) {
	counts := make([]int64, len(queries))
	if !t.pg() || len(queries) == 1 {
		for i, q := range queries {
			n, err := t.find(ctx, op, q.dest, q.sql, q.args...)
			if err != nil {
				return nil, err
			}
			counts[i] = n
		}
		return counts, nil
	}
	stmts := make([]pendingStmt, len(queries))
	for i, q := range queries {
		stmts[i].query, stmts[i].args = bind(q.sql, true, q.args)
	}
	ctx, done, err := t.begin(ctx)
	if err != nil {
		return nil, wrapErr(op, err)
	}
	defer done()
	var br pgx.BatchResults
	switch ex := t.ex.(type) {
	case *pgxTx:
		if br, err = ex.send(ctx, stmts...); err != nil {
			return nil, wrapErr(op, err)
		}
	case pgxExec:
		var b pgx.Batch
		for _, st := range stmts {
			b.Queue(st.query, st.args...)
		}
		br = ex.q.SendBatch(ctx, &b)
	default:
		return nil, fmt.Errorf("gormstore: %s: no batches on %T", op, t.ex)
	}
	for i, st := range stmts {
		rows, err := br.Query()
		if t.s.cfg.hook != nil {
			t.s.cfg.hook(ctx, st.query)
		}
		if err == nil {
			counts[i], err = scanRows(op, pgxRows{rows}, queries[i].dest)
		}
		if err != nil {
			_ = br.Close()
			return nil, wrapErr(op, err)
		}
	}
	if err := br.Close(); err != nil {
		return nil, wrapErr(op, err)
	}
	return counts, nil
}

// check reports why no statement may run now: the store is closed, the
// transaction is over or must be retried, or a context has ended.
func (t *txn) check(ctx context.Context) error {
	if t.s.closed.Load() {
		return errClosed
	}
	if t.finished {
		return errors.New("transaction already ended (Tx used after InTx returned)")
	}
	if t.abort != nil {
		return t.abort
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if t.deadline != nil {
		return t.deadline.Err()
	}
	return nil
}

// begin prepares the context of one statement. On SQLite it checks the
// caller's context and the transaction deadline, then runs the statement
// with a context that cannot be canceled (see liteConn.ExecContext). On
// PostgreSQL it bounds the statement by the query timeout.
func (t *txn) begin(ctx context.Context) (context.Context, func(), error) {
	if err := t.check(ctx); err != nil {
		return nil, nil, err
	}
	if t.s.dialect == sqliteDialect {
		return context.WithoutCancel(ctx), func() {}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, t.s.cfg.queryTimeout)
	return ctx, cancel, nil
}
