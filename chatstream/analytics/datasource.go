package analytics

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/embedkit/embedkit/chatstream"
)

var _ chatstream.DataSource = (*SQLTool)(nil)

// QueryData runs sqlQuery for the user of tu as svcSqlApi does (the same
// executor, rules and row access, and the same branch check), but streams
// every row: no row limit and no cap on the result's size (each value is
// still at most 1 MiB on SQLite, a blob's hex text twice that). timeout
// bounds the whole query, reading included; zero means the tool's
// [WithTimeout]. The work budget ([WithMaxSteps])
// does not apply: the timeout alone bounds a data query's work, on SQLite
// as on PostgreSQL. The columns' types are read as the tool reads them: by
// the first non-null value of a column among the rows the tool would hold
// (its row limit, 4 MiB), else by the type its definition declares, so
// that the same query has the same schema from both. QueryData returns
// once every column has a value that is not null, or those rows are
// read, or the query has ended or failed; a refused,
// invalid or timed-out query, or an unknown branch, is a
// *[chatstream.QueryError] with the message of the tool error. Close
// stops the query at once.
func (t *SQLTool) QueryData(ctx context.Context, tu chatstream.Turn, sqlQuery string, timeout time.Duration) (chatstream.DataRows, error) {
	q, err := checkQuery(tu, sqlQuery)
	if err != nil {
		return nil, asQueryError(err)
	}
	if timeout <= 0 {
		timeout = t.timeout
	}
	// No work budget: the data query API bounds a query by its timeout
	// alone, on SQLite as on PostgreSQL (the timeout, the cancellation and
	// the memory bound still stop it, even inside one instruction).
	c, err := t.open(ctx, q, AccessOf(t.model, tu.User), timeout, unbudgeted)
	if err != nil {
		return nil, asQueryError(err)
	}
	r := &dataRows{c: c}
	size := int64(len(c.columns())) * 64 // as the tool counts its result
	typed, untyped := make([]bool, len(c.columns())), len(c.columns())
	for len(r.held) < t.rowLimit && size <= maxResultBytes && (len(r.held) == 0 || untyped > 0) {
		if !c.next(true, math.MaxInt64) {
			r.ended.Store(true) // no more rows: the cursor is not read again
			break
		}
		row := slices.Clone(c.values())
		size += jsonSize(row)
		r.held = append(r.held, row)
		for i, v := range row {
			if v != nil && !typed[i] {
				typed[i], untyped = true, untyped-1
			}
		}
	}
	if len(r.held) == 0 {
		if err := c.failure(); err != nil {
			c.close()
			return nil, asQueryError(err)
		}
	}
	for _, col := range t.schema(c.columns(), c.types(), c.declared(), r.held) {
		r.cols = append(r.cols, chatstream.DataColumn(col))
	}
	return r, nil
}

// unbudgeted is a work budget no query uses up within any timeout.
const unbudgeted = math.MaxInt64 / 2

// asQueryError turns a tool error into the data source's QueryError.
func asQueryError(err error) error {
	if te, ok := errors.AsType[*ToolError](err); ok {
		return &chatstream.QueryError{Msg: te.Msg}
	}
	return err
}

// dataRows reads a cursor for QueryData. Close may be called while Next
// runs in another goroutine: it interrupts the query, then waits for Next.
type dataRows struct {
	mu   sync.Mutex // held by Next and Close
	c    cursor
	cols []chatstream.DataColumn
	held [][]any // rows read ahead for the schema, not yet returned
	cur  []any   // the current row
	done bool
	// ended is set once the rows are read to their end: Close then has no
	// query to interrupt (a PostgreSQL cancel request would cost a round
	// trip and could reach a later statement).
	ended atomic.Bool
}

func (r *dataRows) Columns() []chatstream.DataColumn { return r.cols }

func (r *dataRows) Next() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.held) > 0 {
		r.cur, r.held = r.held[0], r.held[1:]
		return true
	}
	if r.done || r.ended.Load() {
		r.done, r.cur = true, nil
		return false
	}
	if !r.c.next(true, math.MaxInt64) {
		r.done, r.cur = true, nil
		r.ended.Store(true)
		return false
	}
	r.cur = r.c.values()
	return true
}

func (r *dataRows) Values() []any { return r.cur }

func (r *dataRows) Err() error { return asQueryError(r.c.failure()) }

func (r *dataRows) Close() error {
	if !r.ended.Load() {
		r.c.interrupt()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done, r.held, r.cur = true, nil, nil
	r.c.close()
	return nil
}
