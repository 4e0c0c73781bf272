package gormstore

// The statement layer. Every statement is hand-written SQL run through the
// store's *gorm.DB (Exec, or Raw(...).Rows() for statements that return
// rows), so it passes GORM's callback chain: the host's logger, callbacks
// and plugins see it, and dbresolver picks its connection. GORM numbers the
// placeholders for PostgreSQL. Rows are scanned field by field into the row
// structs of models.go, without reflection.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/plugin/dbresolver"
)

// listArg is a list parameter ([]int64 or []string) passed as one value, so
// that a statement's text does not depend on the length of its lists (and
// has no limit on the number of values): a JSON array that SQLite reads
// with json_each, or a PostgreSQL array literal read with unnest.
type listArg struct {
	v  any // []int64 or []string
	pg bool
}

// Value implements driver.Valuer.
func (l listArg) Value() (driver.Value, error) {
	switch v := l.v.(type) {
	case []int64:
		b := make([]byte, 0, 2+8*len(v))
		open, close := byte('['), byte(']')
		if l.pg {
			open, close = '{', '}'
		}
		b = append(b, open)
		for i, x := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, x, 10)
		}
		return string(append(b, close)), nil
	case []string:
		if !l.pg {
			j, err := json.Marshal(v)
			return string(j), err
		}
		var b strings.Builder
		b.WriteByte('{')
		for i, x := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('"')
			for _, r := range x {
				if r == '"' || r == '\\' {
					b.WriteByte('\\')
				}
				b.WriteRune(r)
			}
			b.WriteByte('"')
		}
		b.WriteByte('}')
		return b.String(), nil
	}
	return nil, errors.New("gormstore: unsupported list parameter")
}

// liteList is a list parameter for SQLite as one JSON array, for a
// statement that joins it (FROM json_each(?) AS j CROSS JOIN t WHERE
// t.x = j.value) instead of reading it with IN. SQLite copies the list of
// "x IN (SELECT value FROM json_each(?))" into a temporary b-tree on every
// execution, whose page cache (about 90 KB) is allocated and freed through
// malloc each time; under generate-session load glibc then kept giving that
// memory back to the system and faulting it in again (some 20 page faults
// per request, the server 15-50% slower than with the list joined). The
// cross join also keeps the list the outer loop, each name or id an index
// lookup.
func liteList[T int64 | string](v []T) listArg { return listArg{v: any(v), pg: false} }

// blobArg is a []byte parameter. GORM expands a slice written right after
// a parenthesis ("VALUES (?") into one parameter per element; a
// driver.Valuer it leaves alone.
type blobArg []byte

// Value implements driver.Valuer.
func (b blobArg) Value() (driver.Value, error) { return []byte(b), nil }

// bind rewrites the list parameters ([]int64, []string, written "IN ?" or
// "NOT IN ?") into one parameter each (see listArg), and wraps []byte
// parameters in blobArg.
func bind(query string, pg bool, args []any) (string, []any) {
	query = compact(query)
	lists := false
	for i, a := range args {
		switch v := a.(type) {
		case []int64, []string:
			lists = true
		case []byte:
			args[i] = blobArg(v)
		}
	}
	if !lists {
		return query, args
	}
	out := make([]any, len(args))
	copy(out, args)
	key := listKey{query: query, pg: pg}
	for i, a := range args {
		switch v := a.(type) {
		case []int64:
			key.ints |= 1 << i
			out[i] = listArg{v, pg}
		case []string:
			key.strs |= 1 << i
			out[i] = listArg{v, pg}
		}
	}
	if len(args) > 64 {
		return rewriteLists(query, pg, args), out
	}
	if c, ok := listStmts.Load(key); ok {
		return c.(string), out
	}
	c := rewriteLists(query, pg, args)
	listStmts.Store(key, c)
	return c, out
}

// listKey identifies the text bind makes of a statement with list
// parameters: the statement, the dialect and which arguments are lists of
// which kind (bit i set for argument i).
type listKey struct {
	query      string
	pg         bool
	ints, strs uint64
}

// listStmts caches bind's rewriting of statements with list parameters.
var listStmts sync.Map // listKey -> string

// rewriteLists replaces the placeholder of each list argument of query
// (see bind).
func rewriteLists(query string, pg bool, args []any) string {
	var b strings.Builder
	b.Grow(len(query) + 32)
	n := 0
	for j := 0; j < len(query); j++ {
		ch := query[j]
		if ch != '?' {
			b.WriteByte(ch)
			continue
		}
		var a any
		if n < len(args) {
			a = args[n]
		}
		switch a.(type) {
		case []int64:
			if pg {
				b.WriteString("(SELECT unnest(?::bigint[]))")
			} else {
				b.WriteString("(SELECT value FROM json_each(?))")
			}
		case []string:
			if pg {
				b.WriteString("(SELECT unnest(?::text[]))")
			} else {
				b.WriteString("(SELECT value FROM json_each(?))")
			}
		default:
			b.WriteByte('?')
		}
		n++
	}
	return b.String()
}

// compacted maps each statement's text to its text with every run of
// whitespace made one space: GORM copies a statement byte by byte into its
// builder (clause.Expr.Build, a tenth of the server's CPU under load), and
// the indentation of the SQL in the source is a good part of it.
var compacted sync.Map // string -> string

func compact(query string) string {
	if c, ok := compacted.Load(query); ok {
		return c.(string)
	}
	c := strings.Join(strings.Fields(query), " ")
	compacted.Store(query, c)
	return c
}

// scanner is a row struct that lists its fields for Rows.Scan.
type scanner interface{ dest() []any }

// collector is a slice of row structs that grows by one row per call.
type collector interface{ add() []any }

// stmt returns a new GORM statement holding query (bound by bind) and its
// arguments, ready for the Raw or Row callback chain: reads outside a
// transaction that must see the latest write are marked for the primary
// (dbresolver's Write clause; a no-op without dbresolver).
//
// It fills the statement as db.Exec and db.Raw do, without their builder:
// clause.Expr.Build copies the text byte by byte through an interface call
// and turns each "?" into the dialect's placeholder, about a tenth of the
// server's CPU under generate-session load. Here the text is copied at once
// and numbered for PostgreSQL ($1, $2, ...) in a cached pass. The result is
// the same SQL and Vars, so callbacks, plugins and the logger see what
// Exec would show them. Arguments the builder would rewrite (a slice other
// than bytes, GORM's own Valuer or clause expressions; bind already turned
// lists and []byte into driver.Valuers) take the builder's path.
func (t *txn) stmt(query string, args []any) *gorm.DB {
	plain := plainArgs(args)
	var tx *gorm.DB
	if plain {
		tx = t.db.Raw("") // a new statement with empty SQL and no Vars
	} else {
		tx = t.db.Raw(query, args...)
	}
	if t.ctx != nil {
		tx.Statement.Context = t.ctx
	}
	if t.primary && !t.inTx {
		// What db.Clauses(dbresolver.Write) does, without a second
		// statement.
		dbresolver.Write.ModifyStatement(tx.Statement)
	}
	if !plain {
		return tx
	}
	if t.pg() {
		query = numberedCached(query)
	}
	tx.Statement.SQL.Grow(len(query))
	tx.Statement.SQL.WriteString(query)
	tx.Statement.Vars = append(tx.Statement.Vars, args...)
	return tx
}

// plainArgs reports whether GORM's builder would pass every argument
// through unchanged (as one placeholder and one Var).
func plainArgs(args []any) bool {
	for _, a := range args {
		switch a.(type) {
		case nil, bool, int, int64, float64, string, *string, *int64, time.Time,
			blobArg, listArg, json.RawMessage:
			continue
		case gorm.Valuer, clause.Expression, clause.Interface, clause.Column, clause.Table:
			return false
		case driver.Valuer:
			continue
		}
		switch reflect.ValueOf(a).Kind() {
		case reflect.Slice, reflect.Array:
			return false
		}
	}
	return true
}

// numberedStmts caches numbered for the statements without list
// parameters (whose text is the same every time).
var numberedStmts sync.Map // string -> string

func numberedCached(query string) string {
	if c, ok := numberedStmts.Load(query); ok {
		return c.(string)
	}
	c := numbered(query)
	numberedStmts.Store(query, c)
	return c
}

func (t *txn) exec(ctx context.Context, op, query string, args ...any) (int64, error) {
	if err := t.check(ctx); err != nil {
		return 0, t.fail(wrapErr(op, err))
	}
	query, args = bind(query, t.pg(), args)
	if t.pipe != nil {
		n, err := t.pipe.run(ctx, numbered(query), args)
		if err != nil {
			return 0, t.fail(wrapErr(op, err))
		}
		return n, nil
	}
	tx := t.stmt(query, args)
	res := tx.Callback().Raw().Execute(tx)
	if res.Error != nil {
		return 0, t.fail(wrapErr(op, t.translate(res.Error)))
	}
	return res.RowsAffected, nil
}

// run is exec for a write whose row count the caller does not need. When
// pipelining, it is queued and sent with the next statement or the commit
// (one round trip less); its error is then returned by that later call.
func (t *txn) run(ctx context.Context, op, query string, args ...any) error {
	if t.pipe == nil {
		_, err := t.exec(ctx, op, query, args...)
		return err
	}
	if err := t.check(ctx); err != nil {
		return t.fail(wrapErr(op, err))
	}
	query, args = bind(query, true, args)
	t.pipe.queue(op, numbered(query), args)
	return nil
}

// find runs a query and scans its rows into dest, a scanner (first row) or
// a collector (every row), returning the number of rows.
func (t *txn) find(ctx context.Context, op string, dest any, query string, args ...any) (int64, error) {
	if err := t.check(ctx); err != nil {
		return 0, t.fail(wrapErr(op, err))
	}
	query, args = bind(query, t.pg(), args)
	if t.pipe != nil {
		n, err := t.pipe.rows(ctx, numbered(query), args, dest)
		if err != nil {
			return 0, t.fail(wrapErr(op, err))
		}
		return n, nil
	}
	rows, err := t.stmt(query, args).Rows()
	if err != nil {
		return 0, t.fail(wrapErr(op, t.translate(err)))
	}
	n, err := scanRows(rows, dest)
	if err != nil {
		return 0, t.fail(wrapErr(op, t.translate(err)))
	}
	return n, nil
}

// scanRows scans rows into dest (see find) and closes them.
func scanRows(rows *sql.Rows, dest any) (int64, error) {
	defer rows.Close()
	n, err := scanEach(rows, dest)
	if err != nil {
		return 0, err
	}
	return n, rows.Close()
}

// rowSource is what scanEach reads: *sql.Rows and pgx.Rows.
type rowSource interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// scanEach scans every row into dest: each into a new element of a
// collector, or the first into a scanner (the others are only counted).
// It returns the number of rows; the caller closes rows.
func scanEach(rows rowSource, dest any) (int64, error) {
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
			return 0, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	return n, nil
}

// translate maps a driver error through the dialector's error translation
// (gorm.ErrDuplicatedKey, gorm.ErrForeignKeyViolated), keeping the original
// error in the chain.
func (t *txn) translate(err error) error {
	if tr, ok := t.s.db.Dialector.(gorm.ErrorTranslator); ok {
		if terr := tr.Translate(err); terr != err && terr != nil {
			return &translated{gorm: terr, err: err}
		}
	}
	return err
}

// translated is a driver error with GORM's translation of it.
type translated struct{ gorm, err error }

func (e *translated) Error() string   { return e.err.Error() }
func (e *translated) Unwrap() []error { return []error{e.gorm, e.err} }

// query is one statement of findAll: its text, arguments and destination.
type query struct {
	dest any
	sql  string
	args []any
}

// findAll runs independent queries, each as find would, and returns the
// number of rows of each. When pipelining they travel in one round trip.
func (t *txn) findAll(ctx context.Context, op string, queries ...query) ([]int64, error) {
	if t.pipe != nil && len(queries) > 1 {
		if err := t.check(ctx); err != nil {
			return nil, t.fail(wrapErr(op, err))
		}
		counts, err := t.pipe.all(ctx, op, queries)
		if err != nil {
			return nil, t.fail(wrapErr(op, err))
		}
		return counts, nil
	}
	counts := make([]int64, len(queries))
	for i, q := range queries {
		n, err := t.find(ctx, op, q.dest, q.sql, q.args...)
		if err != nil {
			return nil, err
		}
		counts[i] = n
	}
	return counts, nil
}

// fail records err as the reason the transaction is aborted (see
// Store.InTx) and returns it. Outside a transaction it only returns it.
func (t *txn) fail(err error) error {
	if t.inTx && t.abort == nil && err != nil {
		t.abort = err
	}
	return err
}

// check reports why no statement may run now: the store is closed, the
// transaction is over or aborted, or a context has ended.
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
