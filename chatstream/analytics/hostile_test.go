package analytics_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/analytics"
)

// hostileCase is an attack on the row access of a German user: refused, or
// run with the rows of the user's own access only.
type hostileCase struct {
	name, q string
	// want is the number in the first cell of a query that runs; -1 for a
	// query that must be refused with a tool error.
	want int64
}

// hostileSQL is the attack suite on SQLite: every spelling of a name that
// could reach a base table, the schema or a table outside the model.
var hostileSQL = []hostileCase{
	// Common table expressions named like a view, in every quoting style
	// and case and position.
	{"string literal CTE name", "WITH 'customers' AS (SELECT * FROM main.customers) SELECT count(*) FROM customers", -1},
	{"string literal CTE, grouped", "WITH 'customers' AS (SELECT * FROM main.customers) SELECT country, count(*) FROM customers GROUP BY 1", -1},
	{"double-quoted CTE name", `WITH "customers" AS (SELECT * FROM main.customers) SELECT count(*) FROM customers`, -1},
	{"bracketed CTE name", "WITH [customers] AS (SELECT * FROM main.customers) SELECT count(*) FROM [customers]", -1},
	{"backquoted CTE name", "WITH `customers` AS (SELECT * FROM main.customers) SELECT count(*) FROM `customers`", -1},
	{"upper-case CTE name", "WITH CUSTOMERS AS (SELECT * FROM main.customers) SELECT count(*) FROM Customers", -1},
	{"CTE with columns", `WITH "Customers"(id, name, country, region) AS (SELECT * FROM main.customers) SELECT count(*) FROM "Customers"`, -1},
	{"CTE in second position, materialized", "WITH x AS (SELECT 1), 'orders' AS MATERIALIZED (SELECT * FROM main.orders) SELECT count(*) FROM orders", -1},
	{"not materialized", "WITH orders AS NOT MATERIALIZED (SELECT * FROM main.orders) SELECT count(*) FROM orders", -1},
	{"recursive CTE named like a view", "WITH RECURSIVE customers(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM customers WHERE n < (SELECT count(*) FROM main.customers)) SELECT max(n) FROM customers", -1},
	{"CTE inside a subquery", "SELECT count(*) FROM (WITH customers AS (SELECT * FROM main.customers) SELECT * FROM customers)", -1},
	{"CTE named like a table-valued function", "WITH json_each AS (SELECT * FROM main.customers) SELECT count(*) FROM json_each", -1},
	{"CTE with a quoted qualified table", `WITH x AS (SELECT * FROM "main"."customers") SELECT count(*) FROM x`, -1},
	{"CTE name in a comment trick", "WITH /* customers */ 'customers' -- x\n AS (SELECT * FROM main.customers) SELECT count(*) FROM customers", -1},
	// Aliases and subqueries.
	{"base table aliased as the view", "SELECT count(*) FROM main.customers AS customers", -1},
	{"subquery aliased as the view", "SELECT count(*) FROM (SELECT * FROM main.customers) AS customers", -1},
	{"scalar subquery", "SELECT (SELECT group_concat(name) FROM main.customers)", -1},
	{"IN subquery", "SELECT count(*) FROM customers WHERE name IN (SELECT name FROM main.customers)", -1},
	{"EXISTS", "SELECT EXISTS (SELECT 1 FROM main.customers WHERE country = 'France')", -1},
	{"no column read (count)", "SELECT count(*) FROM main.customers", -1},
	{"no column read (constant)", "SELECT 1 FROM main.orders LIMIT 1", -1},
	{"join with the base table", "SELECT count(*) FROM customers NATURAL JOIN main.customers", -1},
	{"NATURAL JOIN with a base table", "SELECT count(*) FROM (SELECT 'France' AS country) NATURAL JOIN main.customers", -1},
	{"USING join with a base table", "SELECT count(*) FROM (SELECT 'SECRET-FR Chloe' AS name) JOIN main.customers USING (name)", -1},
	{"USING join with a table outside the model", "SELECT count(*) FROM (SELECT 'SECRET-TABLE' AS value) JOIN secrets USING (value)", -1},
	{"NATURAL JOIN with the schema", "SELECT count(*) FROM (SELECT 'table' AS type) NATURAL JOIN sqlite_master", -1},
	{"union with the base table", "SELECT name FROM customers UNION SELECT name FROM main.customers", -1},
	{"cross join with an aggregate", "SELECT * FROM customers, (SELECT count(*) FROM main.orders)", -1},
	{"window named like a view", "SELECT count(*) OVER customers FROM main.customers WINDOW customers AS ()", -1},
	// The schema, other tables and table-valued functions.
	{"sqlite_master", "SELECT * FROM sqlite_master", -1},
	{"sqlite_schema", "SELECT sql FROM main.sqlite_schema", -1},
	{"sqlite_temp_master", "SELECT * FROM sqlite_temp_master", -1},
	{"temp.sqlite_master", "SELECT * FROM temp.sqlite_master", -1},
	{"quoted sqlite_master", `SELECT * FROM "SQLITE_MASTER"`, -1},
	{"schema through a CTE named like a view", "WITH customers AS (SELECT * FROM sqlite_temp_master) SELECT * FROM customers", -1},
	{"table outside the model", "SELECT * FROM secrets", -1},
	{"qualified table outside the model", "SELECT * FROM main.secrets", -1},
	{"quoted table outside the model", `SELECT * FROM "secrets"`, -1},
	{"table outside the model as a CTE named like a view", "WITH 'orders' AS (SELECT * FROM secrets) SELECT * FROM orders", -1},
	{"pragma_table_list", "SELECT * FROM pragma_table_list", -1},
	{"pragma_table_info", "SELECT * FROM pragma_table_info('secrets')", -1},
	{"pragma_database_list", "SELECT * FROM pragma_database_list", -1},
	{"pragma_function_list", "SELECT * FROM pragma_function_list", -1},
	{"json_each over a base table", "SELECT * FROM json_each((SELECT json_group_array(name) FROM main.customers))", -1},
	{"row-filter function", "SELECT embedkit_rls_values('country')", -1},
	{"row-filter function in a CTE named like a view", "WITH customers AS (SELECT embedkit_rls_all() AS a) SELECT a FROM customers", -1},
	{"function outside the list", "SELECT sqlite_compileoption_get(0)", -1},
	{"load_extension", "SELECT load_extension('x')", -1},
	{"json_patch", "SELECT json_patch('{}', '{}')", -1},
	{"PRAGMA", "PRAGMA query_only = 0", -1},
	{"ATTACH", "ATTACH DATABASE ':memory:' AS x", -1},
	// Legitimate SQL keeps working, under the user's access (2 German
	// customers, 2 German orders).
	{"quoted view name", `SELECT count(*) FROM "customers"`, 2},
	{"bracketed view name", "SELECT count(*) FROM [customers]", 2},
	{"backquoted view name", "SELECT count(*) FROM `customers`", 2},
	{"upper-case view name", "SELECT count(*) FROM CUSTOMERS", 2},
	{"qualified view name", `SELECT count(*) FROM "temp"."customers"`, 2},
	{"CTE of any name", "WITH de AS (SELECT * FROM customers) SELECT count(*) FROM de", 2},
	{"string literal CTE over a view", "WITH 'x' AS (SELECT * FROM orders) SELECT count(*) FROM x", 2},
	{"CTE named like a view over the view", "WITH customers AS (SELECT * FROM temp.customers) SELECT count(*) FROM customers", 2},
	{"CTE named like the other view", "WITH orders AS (SELECT * FROM customers) SELECT count(*) FROM orders", 2},
	{"materialized CTE", "WITH c AS MATERIALIZED (SELECT * FROM customers) SELECT count(*) FROM c", 2},
	{"alias", "SELECT count(*) FROM customers AS orders", 2},
	{"subquery", "SELECT count(*) FROM (SELECT * FROM customers) AS c", 2},
	{"scalar subquery over a view", "SELECT (SELECT count(*) FROM orders)", 2},
	{"IN subquery over a view", "SELECT count(*) FROM customers WHERE id IN (SELECT id FROM customers)", 2},
	{"recursive CTE", "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3) SELECT count(*) / 3 FROM n, customers", 2},
	{"filters narrow, never widen", "SELECT count(*) FROM customers WHERE country = 'France' OR 1 = 1", 2},
	{"join of the views", "SELECT count(*) FROM orders o JOIN customers c ON c.name = o.customer", 2},
	{"json_each of a literal", "SELECT count(*) FROM json_each('[1, 2]')", 2},
	{"no table", "SELECT 2", 2},
}

// checkHostile runs c as the German user and checks the outcome.
func checkHostile(t *testing.T, tool *analytics.SQLTool, c hostileCase) {
	t.Helper()
	res, err := tool.Run(t.Context(), chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: c.q})
	if c.want < 0 {
		var te *analytics.ToolError
		if !errors.As(err, &te) {
			b, _ := json.Marshal(res)
			t.Fatalf("%s: %v, result %s; want a tool error", c.q, err, b)
		}
		for _, leak := range []string{"secrets", "sqlite_", "embedkit_", "pragma_", "SECRET", "main."} {
			if strings.Contains(te.Msg, leak) && !strings.Contains(c.q, leak) {
				t.Errorf("%s: error %q names %q", c.q, te.Msg, leak)
			}
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: %v", c.q, err)
	}
	b, _ := json.Marshal(res.Data)
	if strings.Contains(string(b), "SECRET") {
		t.Fatalf("%s: %s reaches a German user", c.q, b)
	}
	if got, _ := res.Data[0][0].(int64); got != c.want {
		t.Errorf("%s: %s, want %d", c.q, b, c.want)
	}
}

func TestHostileSQL(t *testing.T) {
	tool, _ := newTool(t)
	for _, c := range hostileSQL {
		t.Run(c.name, func(t *testing.T) { checkHostile(t, tool, c) })
	}
}

// TestBoundedCost: whatever a query computes, it ends within its timeout
// or work budget with a tool error, and its result is bounded.
func TestBoundedCost(t *testing.T) {
	const (
		mb   = "printf('%.*c', 1000000, 'a')"
		half = "printf('%.*c', 500000, 'a')"
	)
	long := map[string]string{
		"instr":   "SELECT instr(" + mb + ", " + half + " || 'b')",
		"replace": "SELECT length(replace(" + mb + ", " + half + " || 'b', 'c'))",
		"trim":    "SELECT length(trim(" + mb + ", replace(" + half + ", 'a', 'b') || 'a'))",
		"ltrim":   "SELECT length(ltrim(" + mb + ", replace(" + half + ", 'a', 'b') || 'a'))",
		"like":    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c WHERE " + mb + " || x LIKE '%' || printf('%.*c', 98, 'a') || 'b'",
		"glob":    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c WHERE " + mb + " || x GLOB '*' || printf('%.*c', 98, 'a') || 'b'",
		// A row of matches runs without a jump between them, where the
		// progress handler would be called.
		"a row of LIKEs": "WITH s(x, p) AS (SELECT " + mb + ", '%" + strings.Repeat("a_", 49) + "b') SELECT " + strings.Repeat("(x LIKE p) + ", 19) + "(x LIKE p) FROM s",
		"a row of GLOBs": "WITH s(x, p) AS (SELECT " + mb + ", '*" + strings.Repeat("a?", 49) + "b') SELECT " + strings.Repeat("(x GLOB p) + ", 19) + "(x GLOB p) FROM s",
		// Each match below what is charged at once, and each of its
		// characters a lead byte and 1,099 continuation bytes.
		"a row of small LIKEs": "WITH s(x, p) AS (SELECT replace(printf('%.*c', 900, 'q'), 'q', 'é' || CAST(unhex('C3' || replace(printf('%.*c', 1099, 'q'), 'q', '80')) AS TEXT)), '%" +
			strings.Repeat("é_", 32) + "b') SELECT " + strings.Repeat("(x LIKE p) + ", 199) + "(x LIKE p) FROM s",
		"recursion":  "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
		"cross join": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000) SELECT count(*) FROM c a, c b",
	}
	// The work budget stops the string functions quickly, although their
	// work is done inside one instruction; with an unbounded budget, the
	// timeout stops every query, even inside one function call.
	for i, opts := range [][]analytics.SQLOption{
		{analytics.WithMaxSteps(20_000)},
		{analytics.WithMaxSteps(1 << 50), analytics.WithTimeout(300 * time.Millisecond)},
	} {
		tool, _ := newTool(t, opts...)
		for name, q := range long {
			if i == 0 && (name == "recursion" || name == "cross join") {
				continue
			}
			start := time.Now()
			_, err := tool.Run(t.Context(), chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: q})
			took := time.Since(start)
			var te *analytics.ToolError
			if !errors.As(err, &te) || !strings.Contains(te.Msg, "stopped") {
				t.Errorf("%s: %v, want a tool error saying it was stopped", name, err)
			}
			// The race detector and a loaded machine slow it.
			if took > 3*time.Second {
				t.Errorf("%s took %v", name, took)
			}
		}
	}

	tool, _ := newTool(t)
	for _, tt := range []struct{ name, q, want string }{
		{"a value over 1 MiB", "SELECT zeroblob(2000000)", "too big"},
		{"replace over 1 MiB", "SELECT replace(" + mb + ", 'a', 'aa')", "too big"},
		{"a long LIKE pattern", "SELECT 'a' LIKE printf('%.*c', 101, '%')", "pattern too complex"},
		{"4 MiB of JSON", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 8) SELECT " + mb + ", " + mb + ", " + mb + ", " + mb + ", " + mb + " FROM c", "result too large"},
		{"escaped JSON", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 8) SELECT printf('%.*c', 1000000, '<') FROM c", "result too large"},
		{"bytes that are not UTF-8 (\\ufffd each)", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 8) SELECT unhex(printf('%.*c', 1000000, 'f')) FROM c", "result too large"},
		{"U+2028 (\\u2028 each)", "SELECT printf('%.*c', 340000, char(8232)) FROM (VALUES (1), (2), (3), (4))", "result too large"},
		{"101 columns", "SELECT " + strings.Repeat("1, ", 100) + "1", "result too large"},
	} {
		_, err := tool.Run(t.Context(), chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: tt.q})
		toolError(t, tt.name, err, tt.want)
	}
	// printf stops at the size limit.
	if res, err := run(t, tool, german, "SELECT length(printf('%.*c', 2000000, 'a'))"); err != nil || res.Data[0][0] != nil {
		t.Errorf("printf over 1 MiB: %v", err)
	}
	// Past the row limit, rows are counted, not held.
	res, err := tool.Run(t.Context(), chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000) SELECT " + mb + " FROM c LIMIT 1000 OFFSET 997"})
	if err != nil || res.TotalRows != 3 {
		t.Errorf("rows past the limit: %v", err)
	}
	if res, err := tool.Run(t.Context(), chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: "SELECT " + strings.Repeat("1, ", 99) + "1"}); err != nil || len(res.Schema) != 100 {
		t.Errorf("100 columns: %v", err)
	}

	// Pathological queries of about 150 bytes end within the default
	// timeout.
	for _, q := range []string{
		"SELECT instr(printf('%.*c',8000000,'a'),printf('%.*c',4000000,'a')||'b')",
		"SELECT instr(printf('%.*c',1000000,'a'),printf('%.*c',500000,'a')||'b')",
		"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c WHERE printf('%.*c',999999,'a')||x LIKE '%'||printf('%.*c',98,'a')||'b'",
	} {
		start := time.Now()
		_, err := tool.Run(t.Context(), chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: q})
		if took := time.Since(start); took > analytics.DefaultTimeout+time.Second {
			t.Errorf("%s: %v after %v", q, err, took)
		}
	}
}

// TestBoundedMemory: a sort, a DISTINCT set or a temporary table of large
// values, which the step budget does not stop (copying a value is one
// instruction), is stopped by the memory bound, not by the timeout, and
// holds neither memory nor temporary files after: a guarded connection
// keeps them in memory, where the progress handler measures them.
func TestBoundedMemory(t *testing.T) {
	tool, _ := newTool(t, analytics.WithTimeout(time.Minute))
	const rows = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
	for name, q := range map[string]string{
		"a sort":             rows + "SELECT count(*) FROM (SELECT zeroblob(1000000) || x AS b FROM c ORDER BY b)",
		"a DISTINCT set":     rows + "SELECT count(DISTINCT zeroblob(100000) || x) FROM c",
		"a UNION":            rows + "SELECT count(*) FROM (SELECT zeroblob(100000) || x FROM c UNION SELECT 1)",
		"a grouping":         rows + "SELECT count(*) FROM (SELECT zeroblob(100000) || x AS b FROM c GROUP BY b)",
		"a materialized CTE": rows + ", m AS MATERIALIZED (SELECT zeroblob(100000) || x AS b FROM c) SELECT count(*) FROM m",
	} {
		start := time.Now()
		_, err := tool.Run(t.Context(), chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: q})
		toolError(t, name, err, "used too much memory")
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("%s: stopped after %v", name, took)
		}
	}
	// The connection serves the next query.
	if _, err := run(t, tool, german, "SELECT count(*) FROM customers"); err != nil {
		t.Errorf("after the stopped queries: %v", err)
	}
}

// TestMemoryBoundCounts: what the memory bound counts is the query's own:
// a list of more expressions than the column limit, which SQLite computes
// between two checks of the bound, is refused, and the guarded
// connection's page cache of a host that asked for a large one is capped,
// so that reading a large database is not taken for the query's memory.
func TestMemoryBoundCounts(t *testing.T) {
	tool, _ := newTool(t)
	keys := strings.Repeat("b || 1, ", 300) + "b"
	_, err := tool.Run(t.Context(), chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: "WITH t(b) AS MATERIALIZED (SELECT printf('%.*c', 1000000, 'x')) SELECT count(*) FROM (SELECT 1 FROM t ORDER BY " + keys + ")"})
	toolError(t, "301 ORDER BY terms", err, "too many terms")

	name := "file:/analytics-" + rand.Text() + "?vfs=memdb"
	rw, err := sql.Open("sqlite3", name)
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	if _, err := rw.Exec(fixtureSQL); err != nil {
		t.Fatal(err)
	}
	ro, err := sql.Open("sqlite3", name+"&mode=ro&_cache_size=-1000000")
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	ro.SetMaxOpenConns(1)
	big, err := analytics.NewSQLTool(ro, model())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, big, german, "SELECT count(*) FROM customers"); err != nil {
		t.Fatal(err)
	}
	var kib int64
	if err := ro.QueryRow("PRAGMA cache_size").Scan(&kib); err != nil || kib != -32768 {
		t.Errorf("the guarded connection's cache_size = %d %v, want -32768 (32 MiB)", kib, err)
	}

	// The limit is the query's: a host's table wider than it, outside the
	// model, still loads when SQLite reloads the schema after a change.
	cols := make([]string, 300)
	for i := range cols {
		cols[i] = fmt.Sprintf("c%d", i)
	}
	if _, err := rw.Exec("CREATE TABLE wide (" + strings.Join(cols, ", ") + ")"); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, big, german, "SELECT count(*) FROM customers"); err != nil {
		t.Fatal(err)
	}
	if _, err := rw.Exec("CREATE INDEX wide_c0 ON wide (c0)"); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, big, german, "SELECT count(*) FROM customers"); err != nil {
		t.Errorf("after the host changed its schema, with a table of 300 columns: %v", err)
	}
}

// TestCancelInsideAFunction: cancelling the caller stops a query at once,
// even inside one long function call, and the connection works after.
func TestCancelInsideAFunction(t *testing.T) {
	tool, _ := newTool(t, analytics.WithMaxSteps(1<<50), analytics.WithTimeout(time.Minute))
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := tool.Run(ctx, chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: "SELECT instr(printf('%.*c', 1000000, 'a'), printf('%.*c', 500000, 'a') || 'b')"})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the query stopped %v after it started, want about 100ms", took)
	}
	if _, err := run(t, tool, german, "SELECT count(*) FROM customers"); err != nil {
		t.Errorf("after a cancelled query: %v", err)
	}
}

// TestCancelInsideARow: a cancelled caller stops a query in the middle of
// a row whose matches run without a jump between them.
func TestCancelInsideARow(t *testing.T) {
	tool, _ := newTool(t, analytics.WithMaxSteps(1<<50), analytics.WithTimeout(time.Minute))
	for _, op := range []string{"LIKE", "GLOB"} {
		pat := "'%" + strings.Repeat("a_", 49) + "b'"
		if op == "GLOB" {
			pat = "'*" + strings.Repeat("a?", 49) + "b'"
		}
		q := "WITH s(x, p) AS (SELECT printf('%.*c', 1000000, 'a'), " + pat + ") SELECT " +
			strings.Repeat("(x "+op+" p) + ", 99) + "(x " + op + " p) FROM s"
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		_, err := tool.Run(ctx, chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: q})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v, want it cancelled", op, err)
		}
		// Uncancelled, the row takes tens of seconds; loose for a loaded
		// machine and the race detector.
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("%s: cancelled after 100ms, stopped after %v", op, took)
		}
	}
}

// TestFunctionCallsBounded: a row's expressions run without a jump, where
// SQLite checks interrupts, and a built-in function over a 1 MiB value
// takes a millisecond or two that nothing charges: a row of 1,800 such
// calls ran 2 to 3 s past a 100 ms timeout. A query compiles at most 256
// function calls.
func TestFunctionCallsBounded(t *testing.T) {
	tool, _ := newTool(t, analytics.WithTimeout(100*time.Millisecond))
	row := func(n int) string {
		return "WITH s(x) AS (SELECT printf('%.*c', 1000000, 'a')) SELECT " + strings.Repeat("length(upper(x)) + ", n-1) + "length(upper(x)) FROM s"
	}
	start := time.Now()
	_, err := run(t, tool, german, row(600))
	toolError(t, "a row of 1,200 calls", err, "the query calls functions in more than 256 places")
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("refused after %v", took)
	}
	if res, err := run(t, tool, german, "SELECT "+strings.Repeat("abs(-1) + ", 99)+"abs(-1)"); err != nil || res.Data[0][0] != int64(100) {
		t.Errorf("100 calls: %v %v", res, err)
	}
}

// TestWrappedFunctionsAgree: instr, replace, the trims, LIKE and GLOB
// behave as SQLite's own.
func TestWrappedFunctionsAgree(t *testing.T) {
	tool, rw := newTool(t)
	for _, expr := range []string{
		"instr('hello', 'l')", "instr('hello', '')", "instr('héllo', 'l')", "instr(NULL, 'a')", "instr('abc', 'd')",
		"instr(x'0102', x'02')", "instr(12345, 34)", "instr('ab', 'abc')",
		"replace('hello', 'l', 'L')", "replace('hello', '', 'x')", "replace('aaa', 'aa', 'b')", "replace(NULL, 'a', 'b')",
		"replace('abc', 'b', NULL)", "replace(123, 2, 9)", "replace('héhé', 'é', 'e')",
		"trim('  a  ')", "ltrim('  a  ')", "rtrim('  a  ')", "trim('xxaxx', 'x')", "trim('éaé', 'é')", "ltrim('abcx', 'cba')",
		"rtrim('xabc', 'cb')", "trim(NULL)", "trim('a', NULL)", "trim('aa', '')", "trim(12.0, '0')",
		"'abc' LIKE 'a%'", "'ABC' LIKE 'a_c'", "'abc' LIKE '%B%'", "'é' LIKE 'É'", "'éa' LIKE '_A'", "'a%b' LIKE 'a\\%b' ESCAPE '\\'",
		"'a_b' LIKE 'a/_b' ESCAPE '/'", "'axb' LIKE 'a/_b' ESCAPE '/'", "'abc' LIKE 'a%' ESCAPE '%'", "'a%' LIKE 'a%%' ESCAPE '%'",
		"'abc' LIKE NULL", "NULL LIKE 'a'", "'abc' LIKE 'a%' ESCAPE NULL", "12345 LIKE '1%5'",
		"x'616263' LIKE 'a%'", "'' LIKE '%'", "'' LIKE '_'", "'abc' LIKE '%%%c'", "'a' LIKE 'a' ESCAPE 'é'",
		"'abc' GLOB 'a*'", "'ABC' GLOB 'a*'", "'abc' GLOB '[a-c]??'", "'b' GLOB '[^a]'", "']' GLOB '[]]'", "'-' GLOB '[a-]'",
		"'abc' GLOB '*[c]'", "'x' GLOB '[]'", "'abc' GLOB 'a[b'", "'é' GLOB '?'", "'aXb' GLOB 'a*[X-Z]b'", "'a' GLOB NULL",
	} {
		q := "SELECT quote(" + expr + ")"
		res, err := run(t, tool, german, q)
		if err != nil {
			t.Errorf("%s: %v", q, err)
			continue
		}
		var want string
		if err := rw.QueryRow(q).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(res.Data[0][0]); got != want {
			t.Errorf("%s = %s, SQLite's own %s", expr, got, want)
		}
	}
}

// FuzzHostileSQL builds common table expressions, aliases and quoting
// styles from the model's view names around reads of the base tables, the
// schema and a table outside the model: whatever runs returns no row
// outside the German user's access, no schema text and no other table.
func FuzzHostileSQL(f *testing.F) {
	f.Add(uint8(0), uint8(0), uint8(0), uint8(0), uint8(0), uint8(0))
	f.Add(uint8(1), uint8(2), uint8(3), uint8(1), uint8(1), uint8(2))
	f.Add(uint8(2), uint8(4), uint8(5), uint8(2), uint8(3), uint8(4))
	tool, _ := newTool(f, analytics.WithTimeout(time.Second))
	germanOnly := germanOnlyTool(f, analytics.WithTimeout(time.Second))
	names := []string{"customers", "orders", "json_each", "x", "sqlite_master", "main", "temp"}
	quotes := []func(string) string{
		func(s string) string { return s },
		func(s string) string { return `"` + s + `"` },
		func(s string) string { return "'" + s + "'" },
		func(s string) string { return "[" + s + "]" },
		func(s string) string { return "`" + s + "`" },
		strings.ToUpper,
		func(s string) string { return `"` + strings.ToUpper(s[:1]) + s[1:] + `"` },
	}
	bodies := []string{
		"SELECT * FROM main.customers", "SELECT * FROM main.orders", "SELECT * FROM secrets", "SELECT * FROM sqlite_master",
		"SELECT * FROM temp.sqlite_master", "SELECT * FROM customers", "SELECT name, country FROM main.customers UNION ALL SELECT value, 0 FROM secrets",
		"SELECT * FROM pragma_table_list", "SELECT count(*) FROM main.customers",
		// Reads no column of which reaches the authorizer.
		"SELECT sql FROM (SELECT NULL AS sql) AS a FULL JOIN sqlite_temp_master USING (sql)",
		"SELECT name FROM (SELECT NULL AS name) AS a FULL JOIN main.customers USING (name)",
		"SELECT count(*) FROM sqlite_temp_master",
	}
	f.Fuzz(func(t *testing.T, name, quote, body, shape, alias, read uint8) {
		n := names[int(name)%len(names)]
		qn := quotes[int(quote)%len(quotes)](n)
		b := bodies[int(body)%len(bodies)]
		ref := quotes[int(read)%len(quotes)](n)
		if strings.HasPrefix(ref, "'") {
			ref = n
		}
		as := ""
		switch alias % 3 {
		case 1:
			as = " AS " + quotes[int(alias/3)%len(quotes)](names[int(alias)%len(names)])
		case 2:
			as = " " + names[int(alias/3)%len(names)]
		}
		var q string
		switch shape % 7 {
		case 0:
			q = fmt.Sprintf("WITH %s AS (%s) SELECT * FROM %s%s", qn, b, ref, as)
		case 1:
			q = fmt.Sprintf("WITH a AS (SELECT 1), %s AS MATERIALIZED (%s) SELECT * FROM %s%s, a", qn, b, ref, as)
		case 2:
			q = fmt.Sprintf("WITH RECURSIVE %s AS NOT MATERIALIZED (%s) SELECT * FROM %s%s", qn, b, ref, as)
		case 3:
			q = fmt.Sprintf("SELECT * FROM (%s)%s", b, as)
		case 4:
			q = fmt.Sprintf("SELECT (SELECT group_concat(x) FROM (WITH %s AS (%s) SELECT * FROM %s) AS x)", qn, b, ref)
		case 5:
			q = fmt.Sprintf("SELECT * FROM customers%s WHERE EXISTS (WITH %s AS (%s) SELECT 1 FROM %s)", as, qn, b, ref)
		case 6:
			q = fmt.Sprintf("WITH %s AS (%s) SELECT * FROM customers%s JOIN %s ON 1", qn, b, as, ref)
		}
		res, err := tool.Run(context.Background(), chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: q})
		sameAsGermanRows(t, germanOnly, q, res, err)
		if err != nil {
			var te *analytics.ToolError
			if !errors.As(err, &te) {
				t.Fatalf("%s: %v is not a tool error", q, err)
			}
			if strings.Contains(te.Msg, "secrets") || strings.Contains(te.Msg, "embedkit_") || strings.Contains(te.Msg, "CREATE") {
				t.Fatalf("%s: error %q names what the model must not see", q, te.Msg)
			}
			return
		}
		out, _ := json.Marshal(res.Data)
		for _, leak := range []string{"SECRET", "CREATE", "France", "embedkit_"} {
			if strings.Contains(string(out), leak) {
				t.Fatalf("%s returned %s to a German user", q, out)
			}
		}
	})
}

// TestCaseSensitiveLike: on a connection opened with case_sensitive_like
// (go-sqlite3's _cslike), the tool's LIKE is case-sensitive, as the
// connection's own.
func TestCaseSensitiveLike(t *testing.T) {
	_, ro := openDBWith(t, "&_cslike=1")
	tool, err := analytics.NewSQLTool(ro, model())
	if err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]int64{"SELECT 'ABC' LIKE 'abc'": 0, "SELECT 'ABC' LIKE 'ABC'": 1, "SELECT 'ABC' LIKE 'a%' ESCAPE '!'": 0} {
		if res, err := run(t, tool, german, q); err != nil || res.Data[0][0] != want {
			t.Errorf("%s: %v %v, want %d", q, res, err, want)
		}
	}
}

// FuzzLikeAgrees: LIKE (with and without ESCAPE) and GLOB, which guard.c
// replaces by versions that charge their work, answer as SQLite's own for
// any bytes (malformed UTF-8 and NULs included).
func FuzzLikeAgrees(f *testing.F) {
	f.Add("a%", "abc", "", false)
	f.Add("%B_", "abc", "", false)
	f.Add("a/%%", "a%bc", "/", false)
	f.Add("_é%", "Aéé", "", false)
	f.Add("[a-c]*[^x]", "bzy", "", true)
	f.Add("*[]-]?", "a-b", "", true)
	f.Add("\xff%\xc3", "\xff\xc3\xa9\xc3", "", false)
	f.Add("%a%a%a%b", strings.Repeat("a", 200), "", false)
	tool, rw := newTool(f)
	lit := func(s string) string { return fmt.Sprintf("CAST(x'%x' AS TEXT)", s) }
	f.Fuzz(func(t *testing.T, pattern, s, esc string, glob bool) {
		expr := lit(s) + " LIKE " + lit(pattern)
		switch {
		case glob:
			expr = lit(s) + " GLOB " + lit(pattern)
		case esc != "":
			expr += " ESCAPE " + lit(esc)
		}
		q := "SELECT quote(" + expr + ")"
		var want string
		werr := rw.QueryRow(q).Scan(&want)
		res, err := run(t, tool, german, q)
		if len(pattern) > 100 { // the guarded connection's bound, not SQLite's
			toolError(t, q, err, "LIKE or GLOB pattern too complex")
			return
		}
		switch {
		case werr != nil && err == nil:
			t.Fatalf("%s: SQLite's own fails (%v), the guarded one answers %v", q, werr, res.Data)
		case werr != nil:
			if !strings.Contains(err.Error(), strings.TrimPrefix(werr.Error(), "SQL logic error: ")) {
				t.Fatalf("%s: error %v, SQLite's own %v", q, err, werr)
			}
		case err != nil:
			t.Fatalf("%s: %v, SQLite's own answers %s", q, err, want)
		case fmt.Sprint(res.Data[0][0]) != want:
			t.Fatalf("%s = %v, SQLite's own %s", q, res.Data[0][0], want)
		}
	})
}
