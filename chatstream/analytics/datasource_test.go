package analytics_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/analytics"
)

// readAll reads rows to the end.
func readAll(t *testing.T, rows chatstream.DataRows) [][]any {
	t.Helper()
	defer rows.Close()
	var out [][]any
	for rows.Next() {
		out = append(out, append([]any(nil), rows.Values()...))
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("rows: %v", err)
	}
	return out
}

func TestQueryData(t *testing.T) {
	tool, _ := newTool(t, analytics.WithRowLimit(2))
	turn := chatstream.Turn{User: german}

	// Every row, past the tool's row limit, under the user's access.
	rows, err := tool.QueryData(t.Context(), turn, "SELECT name, n.x FROM customers, (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5000) SELECT x FROM c) AS n ORDER BY 2, 1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if cols := rows.Columns(); len(cols) != 2 || cols[0] != (chatstream.DataColumn{Name: "name", ColumnType: "string"}) || cols[1].ColumnType != "number" {
		t.Errorf("columns %v", cols)
	}
	got := readAll(t, rows)
	if len(got) != 10000 || got[0][0] != "Anna" || got[9999][1] != int64(5000) {
		t.Errorf("%d rows, first %v", len(got), got[:1])
	}
	for _, r := range got {
		if r[0] != "Anna" && r[0] != "Ben" {
			t.Fatalf("row %v reaches a German user", r)
		}
	}
	// No result-size cap either: 8 MiB of values.
	rows, err = tool.QueryData(t.Context(), turn, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 8) SELECT printf('%.*c', 1000000, 'a') FROM c", 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(readAll(t, rows)); n != 8 {
		t.Errorf("%d rows of 1 MB, want 8", n)
	}
	// An empty result has its columns.
	rows, err = tool.QueryData(t.Context(), turn, "SELECT name FROM customers WHERE 0", 0)
	if err != nil || len(rows.Columns()) != 1 || len(readAll(t, rows)) != 0 {
		t.Errorf("empty result: %v", err)
	}

	// A failure is a QueryError with the tool's message.
	for _, q := range []string{"SELECT * FROM main.customers", "DELETE FROM orders", "SELEC 1", "WITH 'customers' AS (SELECT * FROM main.customers) SELECT * FROM customers", ""} {
		_, toolErr := tool.Run(t.Context(), turn, analytics.SQLInput{SQLQuery: q})
		_, err := tool.QueryData(t.Context(), turn, q, 0)
		qe, ok := errors.AsType[*chatstream.QueryError](err)
		if !ok || toolErr == nil || qe.Msg != toolErr.Error() {
			t.Errorf("%q: %v, want a QueryError %q", q, err, toolErr)
		}
	}
	_, err = tool.QueryData(t.Context(), chatstream.Turn{User: german, ActiveBranchName: "dev", Branches: []string{"main"}}, "SELECT 1", 0)
	if qe, ok := errors.AsType[*chatstream.QueryError](err); !ok || qe.Msg != `branch "dev" not found` {
		t.Errorf("unknown branch: %v", err)
	}
}

// TestQueryDataTimeAndClose: QueryData returns at the first row of an
// endless query; the timeout ends it with a QueryError; Close stops it at
// once, even from another goroutine, and the tool keeps working.
func TestQueryDataTimeAndClose(t *testing.T) {
	const endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c"
	tool, _ := newTool(t, analytics.WithMaxSteps(1<<50))
	turn := chatstream.Turn{User: german}
	start := time.Now()
	rows, err := tool.QueryData(t.Context(), turn, endless, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Errorf("first row after %v", took)
	}
	for rows.Next() {
	}
	if qe, ok := errors.AsType[*chatstream.QueryError](rows.Err()); !ok || qe.Msg != "the query ran longer than 200ms and was stopped" {
		t.Errorf("after the timeout: %v", rows.Err())
	}
	rows.Close()

	// A query that fails before its first row fails QueryData.
	_, err = tool.QueryData(t.Context(), turn, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c", 100*time.Millisecond)
	if _, ok := errors.AsType[*chatstream.QueryError](err); !ok {
		t.Errorf("timeout before the first row: %v", err)
	}

	rows, err = tool.QueryData(t.Context(), turn, endless, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		for rows.Next() {
		}
		close(done)
	}()
	time.Sleep(50 * time.Millisecond)
	start = time.Now()
	rows.Close()
	<-done
	if took := time.Since(start); took > 200*time.Millisecond {
		t.Errorf("Close took %v", took)
	}
	rows.Close()
	if rows.Next() {
		t.Error("Next after Close")
	}
	if _, err := run(t, tool, german, "SELECT count(*) FROM customers"); err != nil {
		t.Errorf("after Close: %v", err)
	}
}

// TestQueryDataNoWorkBudget: the data query API bounds a query by its
// timeout alone: a query past the tool's work budget, which the tool
// stops, runs to its end through QueryData.
func TestQueryDataNoWorkBudget(t *testing.T) {
	const q = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000) SELECT count(*) FROM c"
	tool, _ := newTool(t, analytics.WithMaxSteps(100))
	turn := chatstream.Turn{User: german}
	_, err := tool.Run(t.Context(), turn, analytics.SQLInput{SQLQuery: q})
	toolError(t, "the tool", err, "did too much work")
	rows, err := tool.QueryData(t.Context(), turn, q, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	if !rows.Next() || rows.Err() != nil || fmt.Sprint(rows.Values()) != "[200000]" {
		t.Errorf("QueryData: %v %v", rows.Values(), rows.Err())
	}
}

// TestNonFiniteNumbers: a number that is not finite is a float64 for the
// data query API on both databases (which writes it as NaN, Infinity or
// -Infinity), and its name in the tool's result, which is JSON.
func TestNonFiniteNumbers(t *testing.T) {
	type engine struct {
		name  string
		tool  *analytics.SQLTool
		query string
	}
	_, ro := openDB(t)
	lite, err := analytics.NewSQLTool(ro, model())
	if err != nil {
		t.Fatal(err)
	}
	engines := []engine{{"sqlite", lite, "SELECT 1e999 AS a, -1e999 AS b"}}
	if os.Getenv("EMBEDKIT_TEST_POSTGRES_DSN") != "" {
		f := newPGFixture(t)
		engines = append(engines, engine{"postgres", f.tool(t), "SELECT 'Infinity'::float8 AS a, '-Infinity'::numeric AS b, 'NaN'::float8 AS c"})
	}
	for _, e := range engines {
		rows, err := e.tool.QueryData(t.Context(), chatstream.Turn{User: internal}, e.query, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range readAll(t, rows)[0] {
			if f, ok := v.(float64); !ok || !(math.IsInf(f, 0) || math.IsNaN(f)) {
				t.Errorf("%s: data column %d = %T %v, want a non-finite float64", e.name, i, v, v)
			}
		}
		res, err := run(t, e.tool, internal, e.query)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := json.Marshal(res); err != nil || !strings.Contains(string(b), `"data":[["Infinity","-Infinity"`) {
			t.Errorf("%s: the tool's result as JSON: %s %v", e.name, b, err)
		}
		if res.Schema[0].ColumnType != "number" {
			t.Errorf("%s: the tool says column a is %q, want number (as the data query API says)", e.name, res.Schema[0].ColumnType)
		}
	}
}

// TestPostgresNumericExact: PostgreSQL's numeric (sum over bigint is one)
// reaches the data query API and the tool's JSON with every digit, as a
// JSON number; bigint stays exact too.
func TestPostgresNumericExact(t *testing.T) {
	if os.Getenv("EMBEDKIT_TEST_POSTGRES_DSN") == "" {
		t.Skip("EMBEDKIT_TEST_POSTGRES_DSN not set")
	}
	f := newPGFixture(t)
	tool := f.tool(t)
	const q = "SELECT 123456789012345678901234567890.120::numeric AS a, 9007199254740993::bigint AS b, sum(x) AS c FROM (VALUES (9007199254740993::bigint), (1::bigint)) AS v(x)"
	rows, err := tool.QueryData(t.Context(), chatstream.Turn{User: internal}, q, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(t, rows)[0]
	want := []any{json.Number("123456789012345678901234567890.120"), int64(9007199254740993), json.Number("9007199254740994")}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("data column %d = %T %v, want %T %v", i, got[i], got[i], want[i], want[i])
		}
	}
	res, err := run(t, tool, internal, q)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := json.Marshal(res); err != nil || !strings.Contains(string(b), `"data":[[123456789012345678901234567890.120,9007199254740993,9007199254740994]]`) {
		t.Errorf("the tool's result as JSON: %s %v", b, err)
	}
	for _, c := range res.Schema {
		if c.ColumnType != "number" {
			t.Errorf("column %s is %q, want number", c.Name, c.ColumnType)
		}
	}
}

// TestBinaryValues: a blob (SQLite) or a bytea (PostgreSQL) is the text of
// its bytes in hex after \x, the same on both databases and for the tool
// and the data query API: no byte is lost to UTF-8.
func TestBinaryValues(t *testing.T) {
	const want = `\x00ff41`
	check := func(t *testing.T, tool *analytics.SQLTool, u chatstream.User, q string) {
		rows, err := tool.QueryData(t.Context(), chatstream.Turn{User: u}, q, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, rows); len(got) != 1 || got[0][0] != want || got[0][1] != `\x` {
			t.Errorf("data query: %q, want [%s \\x]", got, want)
		}
		res, err := run(t, tool, u, q)
		if err != nil || len(res.Data) != 1 || res.Data[0][0] != want || res.Data[0][1] != `\x` {
			t.Errorf("the tool: %v %v, want [%s \\x]", res, err, want)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		tool, _ := newTool(t)
		check(t, tool, german, "SELECT X'00ff41' AS b, X'' AS e")
	})
	t.Run("postgres", func(t *testing.T) {
		if os.Getenv("EMBEDKIT_TEST_POSTGRES_DSN") == "" {
			t.Skip("EMBEDKIT_TEST_POSTGRES_DSN not set")
		}
		f := newPGFixture(t)
		check(t, f.tool(t), internal, `SELECT '\x00ff41'::bytea AS b, ''::bytea AS e`)
	})
}

// TestQueryDataSchemaAsTheTool: a column's type is read off its first
// value that is not null, among the rows the tool holds, for the data
// query API as for the tool; the rows read ahead for it come in order.
func TestQueryDataSchemaAsTheTool(t *testing.T) {
	tool, _ := newTool(t)
	turn := chatstream.Turn{User: german}
	const q = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300) " +
		"SELECT x, CASE WHEN x < 50 THEN NULL ELSE x END AS late, NULL AS never FROM c"
	res, err := run(t, tool, german, q)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := tool.QueryData(t.Context(), turn, q, 0)
	if err != nil {
		t.Fatal(err)
	}
	cols := rows.Columns()
	for i, c := range res.Schema {
		if cols[i].ColumnType != c.ColumnType {
			t.Errorf("column %s: %q from the data query API, %q from the tool", c.Name, cols[i].ColumnType, c.ColumnType)
		}
	}
	if cols[1].ColumnType != "number" {
		t.Errorf("a column null in its first 49 rows is %q, want number", cols[1].ColumnType)
	}
	got := readAll(t, rows)
	if len(got) != 300 {
		t.Fatalf("%d rows, want 300", len(got))
	}
	for i, row := range got {
		if row[0] != int64(i+1) {
			t.Fatalf("row %d is %v", i, row)
		}
	}
}

// TestDatabaseFaultIsNotAQueryError: a database that is locked (SQLite) or
// whose session was ended (PostgreSQL) fails a data query with an error
// that is not a QueryError, which the data query API answers 503, not 400
// with the database's text.
func TestDatabaseFaultIsNotAQueryError(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "shop.db")
		rw, err := sql.Open("sqlite3", "file:"+path)
		if err != nil {
			t.Fatal(err)
		}
		defer rw.Close()
		if _, err := rw.Exec(fixtureSQL); err != nil {
			t.Fatal(err)
		}
		ro, err := sql.Open("sqlite3", "file:"+path+"?mode=ro&_busy_timeout=50")
		if err != nil {
			t.Fatal(err)
		}
		defer ro.Close()
		tool, err := analytics.NewSQLTool(ro, model())
		if err != nil {
			t.Fatal(err)
		}
		lock, err := rw.Conn(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Close()
		if _, err := lock.ExecContext(t.Context(), "BEGIN EXCLUSIVE; UPDATE customers SET name = name"); err != nil {
			t.Fatal(err)
		}
		defer lock.ExecContext(context.Background(), "ROLLBACK")
		_, err = tool.QueryData(t.Context(), chatstream.Turn{User: german}, "SELECT count(*) FROM customers", 0)
		if _, ok := errors.AsType[*chatstream.QueryError](err); ok || err == nil {
			t.Errorf("a locked database: %v, want an error that is not a QueryError", err)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		if os.Getenv("EMBEDKIT_TEST_POSTGRES_DSN") == "" {
			t.Skip("EMBEDKIT_TEST_POSTGRES_DSN not set")
		}
		f := newPGFixture(t)
		tool := f.tool(t)
		if _, err := run(t, tool, internal, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		if _, err := f.admin.ExecContext(t.Context(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", f.cfg.Reader); err != nil {
			t.Fatal(err)
		}
		_, err := tool.QueryData(t.Context(), chatstream.Turn{User: internal}, "SELECT 1", 0)
		if _, ok := errors.AsType[*chatstream.QueryError](err); ok {
			t.Errorf("a session ended by the administrator: %v, want an error that is not a QueryError", err)
		}
		// An internal error a query provokes is the query's.
		_, err = tool.QueryData(t.Context(), chatstream.Turn{User: internal}, "SELECT array_in('{1}'::cstring, 999999::oid, -1)", 0)
		if _, ok := errors.AsType[*chatstream.QueryError](err); !ok {
			t.Errorf("XX000 provoked by the query: %v, want a QueryError", err)
		}
	})
}
