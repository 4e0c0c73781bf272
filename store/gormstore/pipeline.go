package gormstore

// PostgreSQL pipelining: the one place where statements do not pass GORM's
// callback chain. Inside a PostgreSQL transaction the store talks to the
// pgx connection itself, to save round trips:
//
//   - BEGIN is not sent on its own: it travels with the first statement;
//   - writes whose result the caller does not need (txn.run) wait and
//     travel with the next statement, or with COMMIT;
//   - independent queries (txn.findAll, Lookup's three) travel together.
//
// A generate-session of a returning user then costs 2 round trips instead
// of 8. Measured over HTTP with examples/loadgen (32 clients, 10 s, server
// and PostgreSQL on one 2-core machine, interleaved A/B), the GORM path
// served generate-session about 18% slower than pipelining (723 against 891
// requests/s). The host's GORM logger still sees every statement
// (Logger.Trace, with the SQL and its row count); its callbacks and plugins
// do not, so tracing plugins that hook callbacks miss these statements.
// [WithoutPipelining] turns it off; it is off anyway when the handle's
// driver is not pgx. Transactions always run on the handle's own pool (the
// primary, with dbresolver), as GORM transactions do.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/embedkit/embedkit/store"
)

// attemptPipelined runs one attempt on a pgx connection of the pool.
func (s *Store) attemptPipelined(actx context.Context, fn func(tx store.Tx) error, exact bool) error {
	conn, err := s.sqlDB.Conn(actx)
	if err != nil {
		return wrapErr("connect", err)
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		c, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			return fmt.Errorf("gormstore: PostgreSQL driver %T is not pgx's stdlib", dc)
		}
		p := &pgxTx{s: s, conn: c.Conn()}
		t := &txn{s: s, pipe: p, inTx: true, deadline: actx, exact: exact, shard: -1}
		defer func() {
			t.finished = true
			// Bounded, and shorter than a statement: on a connection that
			// went silent an unbounded ROLLBACK would hang the caller.
			// When it times out pgx closes the connection (the pool drops
			// it), which rolls the transaction back on the server.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(actx), min(s.cfg.queryTimeout, time.Second))
			defer cancel()
			p.rollback(rctx) // no-op after commit
		}()
		if err := fn(t); err != nil {
			if t.abort != nil && isRetryable(t.abort) {
				return t.abort
			}
			return err
		}
		if t.abort != nil {
			return t.abort
		}
		if err := p.commit(actx); err != nil {
			return wrapErr("commit", err)
		}
		return nil
	})
}

// pgxArgs undoes the wrapping that bind does for GORM: pgx encodes []byte
// and lists natively (binary arrays), faster than through driver.Valuer.
func pgxArgs(args []any) []any {
	for i, a := range args {
		switch v := a.(type) {
		case blobArg:
			args[i] = []byte(v)
		case listArg:
			args[i] = v.v
		}
	}
	return args
}

// numbered rewrites the ? placeholders of a statement (after bind) into
// PostgreSQL's $1, $2, ... (our statements have no other question marks).
func numbered(query string) string {
	if !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 16)
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(query[i])
	}
	return b.String()
}

// pgxTx runs the statements of one PostgreSQL transaction on a connection.
// Statements of one trip are sent as a pgx batch (a pipeline). An error of
// a queued write is returned by the call that sends it.
type pgxTx struct {
	s       *Store
	conn    *pgx.Conn
	begun   bool
	pending []pendingStmt
}

type pendingStmt struct {
	op, query string
	args      []any
}

// trace reports one statement to the host's GORM logger.
func (p *pgxTx) trace(ctx context.Context, begin time.Time, query string, rows int64, err error) {
	p.s.db.Logger.Trace(ctx, begin, func() (string, int64) { return query, rows }, err)
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
	begin := time.Now()
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
		tag, err := br.Exec()
		p.trace(ctx, begin, q.query, tag.RowsAffected(), err)
		if err != nil {
			_ = br.Close()
			return nil, wrapErr(q.op, err)
		}
	}
	return br, nil
}

// queue adds a write to send with the next statement or the commit.
func (p *pgxTx) queue(op, query string, args []any) {
	p.pending = append(p.pending, pendingStmt{op: op, query: query, args: pgxArgs(args)})
}

func (p *pgxTx) run(ctx context.Context, query string, args []any) (int64, error) {
	args = pgxArgs(args)
	begin := time.Now()
	if p.begun && len(p.pending) == 0 {
		tag, err := p.conn.Exec(ctx, query, args...)
		p.trace(ctx, begin, query, tag.RowsAffected(), err)
		return tag.RowsAffected(), err
	}
	br, err := p.send(ctx, pendingStmt{query: query, args: args})
	if err != nil {
		return 0, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	p.trace(ctx, begin, query, tag.RowsAffected(), err)
	return tag.RowsAffected(), err
}

// rows runs a query and scans its rows into dest (see txn.find).
func (p *pgxTx) rows(ctx context.Context, query string, args []any, dest any) (int64, error) {
	args = pgxArgs(args)
	begin := time.Now()
	if p.begun && len(p.pending) == 0 {
		r, err := p.conn.Query(ctx, query, args...)
		if err != nil {
			p.trace(ctx, begin, query, 0, err)
			return 0, err
		}
		n, err := scanPgx(r, dest)
		p.trace(ctx, begin, query, n, err)
		return n, err
	}
	br, err := p.send(ctx, pendingStmt{query: query, args: args})
	if err != nil {
		return 0, err
	}
	r, err := br.Query()
	var n int64
	if err == nil {
		n, err = scanPgx(r, dest)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	p.trace(ctx, begin, query, n, err)
	return n, err
}

// all runs independent queries in one trip (with BEGIN and the queued
// writes) and scans each into its destination.
func (p *pgxTx) all(ctx context.Context, op string, queries []query) ([]int64, error) {
	stmts := make([]pendingStmt, len(queries))
	for i, q := range queries {
		sql, args := bind(q.sql, true, q.args)
		stmts[i] = pendingStmt{query: numbered(sql), args: pgxArgs(args)}
	}
	begin := time.Now()
	br, err := p.send(ctx, stmts...)
	if err != nil {
		return nil, err
	}
	counts := make([]int64, len(queries))
	for i, st := range stmts {
		r, err := br.Query()
		if err == nil {
			counts[i], err = scanPgx(r, queries[i].dest)
		}
		p.trace(ctx, begin, st.query, counts[i], err)
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

// scanPgx scans rows into dest (see txn.find) and closes them.
func scanPgx(rows pgx.Rows, dest any) (int64, error) {
	defer rows.Close()
	n, err := scanEach(rows, dest)
	if err != nil {
		return 0, err
	}
	rows.Close() // pgx reports some errors only once the rows are closed
	return n, rows.Err()
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
