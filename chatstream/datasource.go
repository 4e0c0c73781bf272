package chatstream

import (
	"context"
	"errors"
	"time"
)

// DataSource runs an agent's SQL for one user: the data behind the
// svcSqlApi tool and the data query API
// (POST .../agents/{agentId}/sql) are the same source, so a query gives the
// same rows, under the same row access, in both.
//
// analytics.SQLTool implements it for SQLite and PostgreSQL; a host may
// write its own over any database (see [DataRows.Values] for the values it
// may give).
type DataSource interface {
	// QueryData runs sqlQuery for the user of t (t.User, t.ActiveBranchName
	// and t.Branches are used) with the tool's rules and row access, but
	// without the tool's row limit or result-size cap, and within timeout
	// (the source's own default when timeout is zero). It returns once the
	// first row is ready or the query has failed. A query that is refused,
	// invalid, names an unknown branch or runs out of time fails with a
	// *[QueryError] (an error once ctx's deadline has passed is taken for
	// running out of time too, unless it wraps [ErrSourceUnavailable]);
	// any other error is the source's own fault, answered 503 by the data
	// query API. The caller
	// reads the rows with Next and Values and must Close them; Close stops
	// the query at once.
	QueryData(ctx context.Context, t Turn, sqlQuery string, timeout time.Duration) (DataRows, error)
}

// DataRows is the result of [DataSource.QueryData], read one row at a time
// so that no result is held in memory whole.
type DataRows interface {
	// Columns describes the result's columns, in order.
	Columns() []DataColumn
	// Next advances to the next row; false at the end or on error (see Err).
	Next() bool
	// Values returns the current row, one value per column of Columns,
	// in order. Each value is nil, a string, a bool, a number or a
	// time.Time, which the data query API writes so:
	//   - a number of any Go integer or floating-point type (int, int8 to
	//     int64, uint, uint8 to uint64, uintptr, float32, float64, or a
	//     type defined on one of them) is a JSON number, unquoted in CSV;
	//     a float32 is written at its own precision (0.1, not
	//     0.10000000149011612); a NaN or an infinity, which JSON cannot
	//     hold, is NaN, Infinity or -Infinity (a JSON string, unquoted in
	//     CSV);
	//   - a json.Number (a decimal kept exact, such as PostgreSQL's
	//     numeric) is written as it is; one that is not a JSON number is
	//     written as a string;
	//   - a time.Time is a text (a JSON string, quoted in CSV): RFC 3339 in
	//     UTC, whatever its location, with the nine digits of its
	//     nanoseconds ("2024-03-05T13:07:09.120000000Z"), so that every
	//     time has one width and, from year 0 to 9999, times sort as
	//     their texts do.
	// Any other type is written as its fmt.Sprint text, a string. A row
	// with more or fewer values than Columns is a fault of the source: the
	// data query API ends its answer there, as when Err reports an error
	// after the first row. The slice is valid until the next call of Next.
	Values() []any
	// Err is the error that ended the rows, if any (a *[QueryError] for a
	// timeout).
	Err() error
	// Close releases the query; it is safe to call more than once.
	Close() error
}

// DataColumn describes one column of a query result, as the spec's tool
// result and the data query API's schema line do.
type DataColumn struct {
	Name string `json:"name"`
	// ColumnType is string, number, time or boolean.
	ColumnType string `json:"column_type"`
}

// ErrSourceUnavailable marks a [DataSource] error as the database's: it
// did not answer or refused before the query was sent. The data query API
// answers it 503, even when the request's time ran out meanwhile (the
// query never ran, so it did not run long).
var ErrSourceUnavailable = errors.New("chatstream: the data source is unavailable")

// QueryError is a query failure that may be shown to the user who asked:
// the query was refused, is invalid, names an unknown branch or ran out of
// time. Its message names no table the data model does not list.
type QueryError struct{ Msg string }

func (e *QueryError) Error() string { return e.Msg }
