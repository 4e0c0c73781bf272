package analytics

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/embedkit/embedkit/chatstream"
)

var _ chatstream.DataSource = (*SQLTool)(nil)

// QueryData runs sqlQuery for the user of tu as svcSqlApi does (the same
// executor, rules and row access, and the same branch check), but streams
// every row: no row limit and no cap on the result's size (each value is
// still at most 1 MiB). timeout bounds the whole query, reading included;
// zero means the tool's [WithTimeout]. The work budget ([WithMaxSteps])
// does not apply: the timeout alone bounds a data query's work, on SQLite
// as on PostgreSQL. It returns once the first row is
// ready or the query has failed; a refused, invalid or timed-out query, or
// an unknown branch, is a *[chatstream.QueryError] with the message of the
// tool error. Close stops the query at once.
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
	r.primed = c.next(true, math.MaxInt64)
	if !r.primed {
		if err := c.failure(); err != nil {
			c.close()
			return nil, asQueryError(err)
		}
	}
	var first [][]any
	if r.primed {
		first = [][]any{c.values()}
	}
	for _, col := range t.schema(c.columns(), c.types(), first) {
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
	mu     sync.Mutex // held by Next and Close
	c      cursor
	cols   []chatstream.DataColumn
	primed bool // the first row is read and not yet returned
	done   bool
	// ended is set once the rows are read to their end: Close then has no
	// query to interrupt (a PostgreSQL cancel request would cost a round
	// trip and could reach a later statement).
	ended atomic.Bool
}

func (r *dataRows) Columns() []chatstream.DataColumn { return r.cols }

func (r *dataRows) Next() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.primed {
		r.primed = false
		return true
	}
	if r.done {
		return false
	}
	if !r.c.next(true, math.MaxInt64) {
		r.done = true
		r.ended.Store(true)
		return false
	}
	return true
}

func (r *dataRows) Values() []any { return r.c.values() }

func (r *dataRows) Err() error { return asQueryError(r.c.failure()) }

func (r *dataRows) Close() error {
	if !r.ended.Load() {
		r.c.interrupt()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done, r.primed = true, false
	r.c.close()
	return nil
}
