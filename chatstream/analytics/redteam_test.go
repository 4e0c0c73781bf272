package analytics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/analytics"
)

// redteamSQL adds to hostileSQL the attacks of a red-team pass: other
// spellings of the schema and the secret views, table-valued functions,
// compound selects, INDEXED BY, rowid, and functions whose errors would
// show a value, each run as the German user.
var redteamSQL = []hostileCase{
	// The schema and the secret views, by any name.
	{"sqlite_temp_schema", "SELECT name FROM sqlite_temp_schema", -1},
	{"temp.sqlite_temp_master", "SELECT sql FROM temp.sqlite_temp_master", -1},
	{"quoted temp schema", `SELECT sql FROM "temp"."SQLITE_TEMP_MASTER"`, -1},
	{"schema as a string literal table", "SELECT sql FROM 'sqlite_master'", -1},
	{"schema in a scalar subquery", "SELECT (SELECT group_concat(name) FROM temp.sqlite_master)", -1},
	{"schema in EXISTS", "SELECT EXISTS (SELECT 1 FROM sqlite_temp_master WHERE name LIKE 'embedkit%')", -1},
	// No column of these is asked of the authorizer: a FULL JOIN's USING
	// column (which returns the right table's value), a NATURAL JOIN's
	// columns, count(*).
	{"temp schema through a FULL JOIN's USING column", "SELECT sql FROM (SELECT NULL AS sql) AS a FULL JOIN sqlite_temp_master USING (sql) WHERE sql IS NOT NULL", -1},
	{"temp schema through a RIGHT JOIN's USING column", "SELECT sql FROM (SELECT NULL AS sql) AS a RIGHT JOIN temp.sqlite_master USING (sql)", -1},
	{"schema through a FULL JOIN's USING column", "SELECT sql FROM (SELECT NULL AS sql) AS a FULL JOIN sqlite_master USING (sql) WHERE sql IS NOT NULL", -1},
	{"count of the temp schema", "SELECT count(*) FROM sqlite_temp_master", -1},
	{"NATURAL JOIN oracle on the temp schema", "SELECT count(*) FROM (SELECT 'customers' AS name) NATURAL JOIN sqlite_temp_master", -1},
	{"base table through a FULL JOIN's USING column", "SELECT name FROM (SELECT NULL AS name) AS a FULL JOIN main.customers USING (name) WHERE name IS NOT NULL", -1},
	{"FULL JOIN USING of two views", "SELECT count(*) FROM customers FULL JOIN (SELECT country FROM orders) USING (country)", 4},
	{"guessed secret view", "SELECT * FROM temp.embedkit_aaaaaaaaaaaaaaaa_source_0", -1},
	{"pragma_table_list of temp", "SELECT name FROM pragma_table_list('temp')", -1},
	{"schema-qualified pragma function", "SELECT * FROM main.pragma_table_info('customers')", -1},
	{"pragma_index_list", "SELECT * FROM pragma_index_list('customers')", -1},
	{"pragma_compile_options", "SELECT * FROM pragma_compile_options", -1},
	{"generate_series", "SELECT count(*) FROM generate_series(1, 10)", -1},
	{"dbstat", "SELECT * FROM dbstat", -1},
	{"sqlite_dbpage", "SELECT * FROM sqlite_dbpage", -1},
	{"sqlite_stmt", "SELECT sql FROM sqlite_stmt", -1},
	{"fts3tokenize", "SELECT * FROM fts3tokenize('simple', 'x')", -1},
	{"json_tree over a base table", "SELECT count(*) FROM json_tree((SELECT json_group_array(name) FROM main.customers))", -1},
	{"json_each over the schema", "SELECT * FROM json_each((SELECT json_group_array(sql) FROM sqlite_temp_master))", -1},
	{"json_each named like a view over a base table", "SELECT count(*) FROM json_each((SELECT json_group_array(name) FROM main.customers)) AS customers", -1},
	// Base tables through compound selects, joins and indexes.
	{"INTERSECT with the base table", "SELECT name FROM customers INTERSECT SELECT name FROM main.customers", -1},
	{"EXCEPT with the base table", "SELECT name FROM main.customers EXCEPT SELECT name FROM customers", -1},
	{"UNION ALL inside a recursive CTE", "WITH RECURSIVE customers(name) AS (SELECT name FROM main.customers UNION ALL SELECT name FROM customers LIMIT 10) SELECT count(*) FROM customers", -1},
	{"VALUES joined to a base table", "SELECT count(*) FROM (VALUES ('France')) AS v(country) JOIN main.customers USING (country)", -1},
	{"LEFT JOIN USING with a base table", "SELECT count(*) FROM customers LEFT JOIN main.customers USING (country)", -1},
	{"INDEXED BY on a base table", "SELECT count(*) FROM main.customers INDEXED BY sqlite_autoindex_customers_1", -1},
	{"NOT INDEXED base table", "SELECT count(*) FROM main.customers NOT INDEXED", -1},
	{"rowid of a base table", "SELECT max(rowid) FROM main.customers", -1},
	{"_rowid_ of a base table as a CTE", "WITH 'customers' AS (SELECT _rowid_ AS r FROM main.customers) SELECT max(r) FROM customers", -1},
	{"window over a base table", "SELECT count(*) OVER () FROM main.customers LIMIT 1", -1},
	{"window function in a CTE named like a view", "WITH customers AS (SELECT row_number() OVER () AS n FROM main.orders) SELECT max(n) FROM customers", -1},
	{"ORDER BY a base table's subquery", "SELECT x FROM (VALUES (1), (2)) AS v(x) ORDER BY (SELECT count(*) FROM main.customers) * x", -1},
	{"LIMIT from a base table", "SELECT 1 LIMIT (SELECT count(*) FROM main.customers)", -1},
	{"CASE over a base table", "SELECT CASE WHEN (SELECT count(*) FROM main.customers) > 2 THEN 1 ELSE 0 END", -1},
	{"table outside the model in a window", "SELECT count(*) OVER (ORDER BY (SELECT count(*) FROM secrets)) FROM customers", -1},
	// Functions outside the list.
	{"sqlite_version", "SELECT sqlite_version()", -1},
	{"sqlite_source_id", "SELECT sqlite_source_id()", -1},
	{"changes", "SELECT changes()", -1},
	{"last_insert_rowid", "SELECT last_insert_rowid()", -1},
	{"sqlite_offset", "SELECT sqlite_offset(id) FROM customers", -1},
	{"readfile", "SELECT readfile('/etc/passwd')", -1},
	{"row-filter function in a subquery", "SELECT (SELECT embedkit_rls_all())", -1},
	// Errors that would show a value run on the user's rows only: the
	// filter view is neither flattened nor given the query's conditions.
	{"json path error on a hidden row", "SELECT count(*) FROM customers WHERE json_extract('{}', CASE WHEN name LIKE 'SECRET%' THEN name ELSE '$.a' END) IS NULL", 2},
	{"json error on a hidden row", "SELECT count(*) FROM customers WHERE json(CASE WHEN name LIKE 'SECRET%' THEN name ELSE '1' END) IS NOT NULL", 2},
	{"CAST on a hidden row", "SELECT count(*) FROM customers WHERE CAST(name AS INTEGER) = 0", 2},
	{"printf of every name", "SELECT count(*) FROM (SELECT printf('%s', group_concat(name)) AS s FROM customers) WHERE s NOT LIKE '%SECRET%'", 1},
	{"aggregate over a join of the views", "SELECT count(*) FROM customers c JOIN orders o ON o.customer = c.name WHERE o.country <> 'Germany'", 0},
	// Legitimate SQL keeps working.
	{"INTERSECT of the views", "SELECT count(*) FROM (SELECT name FROM customers INTERSECT SELECT customer FROM orders)", 2},
	{"EXCEPT of the views", "SELECT count(*) FROM (SELECT name FROM customers EXCEPT SELECT customer FROM orders)", 0},
	{"NATURAL JOIN of the views", "SELECT count(*) FROM customers NATURAL JOIN (SELECT country FROM orders)", 4},
	{"window over a view", "SELECT max(n) FROM (SELECT row_number() OVER (PARTITION BY country ORDER BY name) AS n FROM customers)", 2},
	{"json_tree of a literal", "SELECT count(*) FROM json_tree('[1]')", 2},
	{"VALUES", "SELECT count(*) FROM (VALUES (1), (2))", 2},
	{"CURRENT_DATE, CURRENT_TIME, CURRENT_TIMESTAMP", "SELECT count(*) FROM (SELECT CURRENT_DATE, CURRENT_TIME, CURRENT_TIMESTAMP) WHERE CURRENT_DATE > '2000-01-01'", 1},
}

func TestRedteamSQLite(t *testing.T) {
	tool, _ := newTool(t)
	for _, c := range redteamSQL {
		t.Run(c.name, func(t *testing.T) { checkHostile(t, tool, c) })
	}
}

// TestRedteamCompileCost: a query whose compilation grows exponentially
// with its size ends within its timeout. SQLite's query flattener copies a
// subquery's expression into every reference of its column, so a chain of
// common table expressions each adding a column to itself compiled to an
// expression of 2^n terms (26 links, about 900 bytes: 38 s and 1.5 GB
// before; the flattener is off on the tool's connections now). Copies of a
// common table expression read twice by the next one are compiled before
// any row is read, where sqlite3_interrupt does not reach; the authorizer
// stops them once the timeout has passed.
func TestRedteamCompileCost(t *testing.T) {
	tool, _ := newTool(t, analytics.WithTimeout(time.Second))
	chain := "WITH t0(x) AS (SELECT count(*) FROM customers)"
	for i := 1; i <= 30; i++ {
		chain += fmt.Sprintf(", t%d(x) AS (SELECT x + x FROM t%d)", i, i-1)
	}
	chain += " SELECT x FROM t30"
	start := time.Now()
	res, err := run(t, tool, german, chain)
	if err != nil || res.Data[0][0] != int64(2<<30) {
		t.Errorf("a chain of 30 self-additions: %v %v, want %d", res, err, int64(2<<30))
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("a chain of 30 self-additions took %v", took)
	}

	// Chains of common table expressions each read twice by the next
	// one, in any spelling, are refused before they compile (2^19 copies,
	// 600 bytes: 30 s and 1.6 GB before); 2^6 copies compile.
	fanOut := func(n int, name func(int) string, body string) string {
		q := "WITH " + name(0) + " AS (" + body + ")"
		for i := 1; i <= n; i++ {
			q += fmt.Sprintf(", %s AS NOT MATERIALIZED (SELECT x.* FROM %s x, %s /* c */ y)", name(i), name(i-1), name(i-1))
		}
		return q + " SELECT count(*) FROM " + name(n)
	}
	for _, name := range []func(int) string{
		func(i int) string { return fmt.Sprintf("a%d", i) },
		func(i int) string { return fmt.Sprintf(`"A %d"`, i) },
		func(i int) string { return fmt.Sprintf("'a%d'", i) },
		func(i int) string { return fmt.Sprintf("[a%d]", i) },
		func(i int) string { return fmt.Sprintf("`A%d`", i) },
	} {
		for _, body := range []string{"SELECT * FROM customers", "SELECT 1 AS x"} {
			q := fanOut(19, name, body)
			start := time.Now()
			_, err := run(t, tool, german, q)
			toolError(t, q, err, "too complex")
			if took := time.Since(start); took > 100*time.Millisecond {
				t.Errorf("%s: refused after %v", q, took)
			}
		}
	}
	// A column list whose names read as parentheses hides no link.
	for _, col := range []string{`")"`, "[)]", "')'", "`)`", `"("`} {
		q := "WITH a0(" + col + ") AS (SELECT 1)"
		for i := 1; i <= 19; i++ {
			q += fmt.Sprintf(", a%d(%s) AS NOT MATERIALIZED (SELECT x.%s FROM a%d x, a%d y)", i, col, col, i-1, i-1)
		}
		q += " SELECT count(*) FROM a19"
		start := time.Now()
		_, err := run(t, tool, german, q)
		toolError(t, q, err, "too complex")
		if took := time.Since(start); took > 100*time.Millisecond {
			t.Errorf("%s: refused after %v", q, took)
		}
	}
	if res, err := run(t, tool, german, fanOut(6, func(i int) string { return fmt.Sprintf("a%d", i) }, "SELECT * FROM customers WHERE id = 1")); err != nil || res.Data[0][0] != int64(1) {
		t.Errorf("2^6 copies: %v %v, want 1", res, err)
	}
	// Names defined again in nested WITHs count once per definition: 3^8
	// copies of a 2,000-value list (4.7 KB of SQL; 1.5 GB to compile).
	nested := "WITH a AS (SELECT 1 AS x WHERE 1 IN (" + strings.TrimSuffix(strings.Repeat("1, ", 2000), ", ") + ")) SELECT count(*) FROM ("
	prev, closes := "a", ")"
	for i := 1; i <= 8; i++ {
		nm := []string{"a", "b"}[i%2]
		nested += fmt.Sprintf("WITH %s AS NOT MATERIALIZED (SELECT t0.* FROM %s t0, %s t1, %s t2) SELECT * FROM (", nm, prev, prev, prev)
		prev, closes = nm, closes+")"
	}
	nested += "SELECT * FROM " + prev + closes
	_, err = run(t, tool, german, nested)
	toolError(t, "3^8 copies through nested redefinitions", err, "too complex")

	// Copies of views count too: 2^8 copies of a join of 60 views.
	q := fanOut(8, func(i int) string { return fmt.Sprintf("a%d", i) }, "SELECT 1 AS x FROM "+strings.TrimSuffix(strings.Repeat("customers, ", 60), ", "))
	_, err = run(t, tool, german, q)
	toolError(t, "2^8 copies of a join of 60 views", err, "too complex")

	// Whatever compiles long within those bounds ends at the authorizer's
	// next call after the timeout: 2^4 copies of joins of 60 views.
	fan := fanOut(4, func(i int) string { return fmt.Sprintf("a%d", i) }, "SELECT 1 AS x FROM "+strings.TrimSuffix(strings.Repeat("customers, ", 60), ", "))
	start = time.Now()
	_, err = run(t, tool, german, fan)
	// The bound only catches a compilation that runs on (uncancelled, it
	// ends at the work budget, some seconds in): loose, for a loaded machine.
	if took := time.Since(start); took > 10*time.Second || err == nil || !strings.Contains(err.Error(), "ran longer than 1s") {
		t.Errorf("2^4 copies of a join of 60 views: %v after %v, want stopped by the timeout of 1s", err, took)
	}
	// The connection and the checker work after.
	if res, err := run(t, tool, german, "SELECT count(*) FROM customers"); err != nil || res.Data[0][0] != int64(2) {
		t.Errorf("after: %v %v", res, err)
	}

	// A cancelled caller stops a compilation too.
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	slow, _ := newTool(t, analytics.WithTimeout(time.Minute))
	start = time.Now()
	_, err = slow.Run(ctx, chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: fan})
	if !errors.Is(err, context.Canceled) { // stopped by the cancellation, not by the work budget
		t.Errorf("cancelled while compiling: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second { // as above: a loaded machine stretches it
		t.Errorf("cancelled while compiling: stopped after %v", took)
	}
}

// TestRedteamCost: more work inside one function, sorting and results
// wider than the caps; each ends within the timeout with a tool error.
func TestRedteamCost(t *testing.T) {
	tool, _ := newTool(t, analytics.WithTimeout(2*time.Second))
	const mb = "printf('%.*c', 1000000, 'a')"
	manyPercent := "'" + strings.Repeat("%a", 49) + "b'" // 100 bytes
	for _, q := range []string{
		"SELECT " + mb + " LIKE " + manyPercent,
		"SELECT " + mb + " GLOB '" + strings.Repeat("*a", 49) + "b'",
		"SELECT " + mb + " GLOB '" + strings.Repeat("*[a-z]", 16) + "b'",
		"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c ORDER BY -x LIMIT 1",
		"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5000) SELECT count(*) FROM (SELECT DISTINCT " + mb + " || x FROM c)",
		"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT length(group_concat(x)) FROM c",
		"SELECT length(json_set(json_array(" + mb + ")" + strings.Repeat(", '$[0]', "+mb, 20) + "))",
		"SELECT length(hex(randomblob(1000000)))",
		"SELECT length(printf('%!.*f', 2000000, 1.5))",
		"SELECT count(*) FROM json_each((SELECT json_group_array(x) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c)))",
	} {
		start := time.Now()
		_, err := run(t, tool, german, q)
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("%.80s: %v after %v", q, err, took)
		}
	}
	// A row of 100 values of 1 MiB is refused, and nothing is copied.
	wide := "SELECT " + strings.TrimSuffix(strings.Repeat("zeroblob(1000000), ", 100), ", ")
	_, err := run(t, tool, german, wide)
	toolError(t, "100 columns of 1 MiB", err, "result too large")
}

// redteamPostgres adds to hostilePostgres the attacks of a red-team pass,
// in PostgreSQL's dialect (DATA, TOOL and OWNER as there).
var redteamPostgres = []hostileCase{
	{"query_to_xml of a base table", "SELECT * FROM query_to_xml('SELECT * FROM DATA.customers', true, false, '')", -1},
	{"query_to_xml setting the access", `SELECT * FROM query_to_xml('SELECT TOOL.embedkit_begin(''{"": [""]}'')', true, false, '')`, -1},
	{"the access function in FROM", `SELECT * FROM TOOL.embedkit_begin('{"": [""]}')`, -1},
	{"LATERAL over a base table", "SELECT count(*) FROM customers c1, LATERAL (SELECT * FROM DATA.customers) c2", -1},
	{"TABLE of a base table", "TABLE DATA.customers", -1},
	{"quoted base table", `SELECT count(*) FROM "DATA"."customers"`, -1},
	{"to_regclass of a base table", "SELECT to_regclass('DATA.customers')::text", -1},
	{"pg_stat_get_live_tuples", "SELECT pg_stat_get_live_tuples('DATA.customers'::regclass)", -1},
	{"set_config role inside a query of a view", "SELECT count(*) FROM customers WHERE set_config('role', 'OWNER', false) IS NOT NULL", -1},
	{"isolation level", "SELECT set_config('transaction_isolation', 'serializable', true)", -1},
	{"FETCH", "FETCH ALL FROM x", -1},
	{"EXECUTE", "EXECUTE x", -1},
	{"CALL", "CALL x()", -1},
	{"system columns", "SELECT xmin, ctid FROM customers", -1},
	{"TABLESAMPLE of a view", "SELECT * FROM customers TABLESAMPLE SYSTEM (100)", -1},
	// Writes through a view over a join: PostgreSQL's rewrite refuses
	// them naming the view beneath, which the tool's message does not.
	{"UPDATE RETURNING through a view over a join", "UPDATE orders SET amount = 1 RETURNING *", -1},
	{"DELETE RETURNING through a view over a join", "DELETE FROM orders RETURNING *", -1},
	{"INSERT RETURNING through a view over a join", "INSERT INTO orders (id) VALUES (1) RETURNING *", -1},
	{"a data-modifying CTE on a view over a join", "WITH u AS (UPDATE orders SET amount = 0 RETURNING 1) SELECT * FROM u", -1},
	{"TABLE of a view", "SELECT count(*) FROM (TABLE customers) AS c", 2},
	{"VALUES", "SELECT count(*) FROM (VALUES (1), (2)) AS v(x)", 2},
	{"pg_notify is harmless (rolled back)", "SELECT count(*) FROM customers, (SELECT pg_notify('x', 'y')) AS n", 2},
	{"json error on a hidden row never fires", "SELECT count(*) FROM customers WHERE (CASE WHEN name LIKE 'SECRET%' THEN name ELSE '1' END)::jsonb IS NOT NULL", 2},
	{"cast error on a hidden row never fires", "SELECT count(*) FROM orders WHERE (CASE WHEN customer LIKE 'SECRET%' THEN customer ELSE '1' END)::int = 1", 2},
}

func TestRedteamPostgres(t *testing.T) {
	f := newPGFixture(t)
	tool := f.tool(t)
	for _, c := range redteamPostgres {
		t.Run(c.name, func(t *testing.T) {
			c.q = pgCase(f, c.q)
			checkHostile(t, tool, c)
		})
	}
}

// TestRedteamPostgresAdvisoryLocks: a session-level advisory lock would
// outlive the query's transaction on its pooled connection, blocking
// SetupPostgres (another replica starting) and the host's own users of the
// key. The reader can take none: the query is refused and holds nothing.
func TestRedteamPostgresAdvisoryLocks(t *testing.T) {
	f := newPGFixture(t)
	tool := f.tool(t)
	for _, q := range []string{
		"SELECT pg_advisory_lock(hashtext('embedkit analytics setup')), pg_advisory_lock(4242), pg_advisory_lock_shared(4243)",
		"SELECT count(*) FROM customers, (SELECT pg_try_advisory_lock(4242)) AS l",
	} {
		if _, err := run(t, tool, german, q); !errors.As(err, new(*analytics.ToolError)) {
			t.Fatalf("%s: %v, want a tool error", q, err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		var free bool
		err := f.admin.QueryRowContext(ctx, "SELECT NOT EXISTS (SELECT FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND a.usename = $1)", f.cfg.Reader).Scan(&free)
		if err != nil || !free {
			t.Errorf("%s: the reader still holds advisory locks (%v)", q, err)
		}
		// Another replica sets up at once.
		if err := analytics.SetupPostgres(ctx, f.admin, f.model, f.cfg); err != nil {
			t.Errorf("SetupPostgres after %s: %v", q, err)
		}
		cancel()
	}
}

// TestRedteamVirtualTables: a host's virtual tables outside the model
// (R*Tree, FTS4) and their shadow tables are refused, also through the
// columns of a USING or NATURAL join, which SQLite's authorizer is not
// asked about (the in-memory checker sees no OpenRead for a virtual
// table, but the module's own statements are refused by the authorizer).
func TestRedteamVirtualTables(t *testing.T) {
	rw, ro := openDB(t)
	for _, q := range []string{
		"CREATE VIRTUAL TABLE rt USING rtree(id, minx, maxx)",
		"INSERT INTO rt VALUES (7, 1, 2)",
		"CREATE VIRTUAL TABLE ft USING fts4(body)",
		"INSERT INTO ft(docid, body) VALUES (7, 'SECRET-FTS')",
	} {
		if _, err := rw.ExecContext(context.Background(), q); err != nil {
			t.Fatal(q, err)
		}
	}
	tool, err := analytics.NewSQLTool(ro, model())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"SELECT count(*) FROM (SELECT 7 AS id) JOIN rt USING (id)",
		"SELECT count(*) FROM (SELECT 7 AS id) NATURAL JOIN rt",
		"SELECT count(*) FROM rt",
		"SELECT count(*) FROM (SELECT 7 AS docid) JOIN ft USING (docid)",
		"SELECT body FROM ft WHERE ft MATCH 'secret'",
		"SELECT count(*) FROM rt_node",
		"SELECT count(*) FROM (SELECT 1 AS nodeno) NATURAL JOIN rt_node",
		"SELECT count(*) FROM (SELECT 7 AS docid) NATURAL JOIN ft_content",
		"WITH customers AS (SELECT * FROM ft) SELECT * FROM customers",
	} {
		checkHostile(t, tool, hostileCase{q: q, want: -1})
	}
}

// TestErrorsDependOnTheModelAlone: what a refused query is told does not
// depend on what the database holds beside the model. Each query naming a
// table or index the database has outside the model gets the same error
// as the same query naming one it lacks, so errors cannot probe the
// schema.
func TestErrorsDependOnTheModelAlone(t *testing.T) {
	tool, rw := newTool(t)
	for _, q := range []string{
		"CREATE INDEX secrets_value ON secrets(value COLLATE NOCASE)",
		"CREATE TRIGGER secrets_audit AFTER INSERT ON secrets BEGIN SELECT 1; END",
	} {
		if _, err := rw.Exec(q); err != nil {
			t.Fatal(q, err)
		}
	}
	pairs := [][2]string{
		// Whether the database has an index with a collation, or a trigger.
		{"REINDEX NOCASE", "REINDEX RTRIM"},
		{"DROP TRIGGER IF EXISTS secrets_audit", "DROP TRIGGER IF EXISTS nosuch"},
		{"EXPLAIN DROP TRIGGER IF EXISTS secrets_audit", "EXPLAIN DROP TRIGGER IF EXISTS nosuch"},
		{"EXPLAIN QUERY PLAN DROP TRIGGER IF EXISTS secrets_audit", "EXPLAIN QUERY PLAN DROP TRIGGER IF EXISTS nosuch"},
		{"SELECT count(*) FROM secrets", "SELECT count(*) FROM nosuch"},
		{"SELECT * FROM main.secrets", "SELECT * FROM main.nosuch"},
		{"SELECT count(*) FROM customers FULL JOIN main.secrets USING (name)", "SELECT count(*) FROM customers FULL JOIN main.nosuch USING (name)"},
		{"SELECT count(*) FROM customers FULL JOIN main.secrets USING (value)", "SELECT count(*) FROM customers FULL JOIN main.nosuch USING (value)"},
		{"SELECT count(*) FROM main.customers INDEXED BY sqlite_autoindex_customers_1", "SELECT count(*) FROM main.customers INDEXED BY nosuch"},
		{"DELETE FROM secrets", "DELETE FROM nosuch"},
		{"INSERT INTO secrets VALUES (1)", "INSERT INTO nosuch VALUES (1)"},
		{"UPDATE secrets SET value = 1", "UPDATE nosuch SET value = 1"},
		{"DROP TABLE secrets", "DROP TABLE nosuch"},
		{"DROP INDEX sqlite_autoindex_customers_1", "DROP INDEX nosuch"},
		{"REINDEX secrets", "REINDEX nosuch"},
		{"REINDEX main.secrets", "REINDEX main.nosuch"},
	}
	// The names themselves may be echoed: compare the errors without them.
	names := strings.NewReplacer("sqlite_autoindex_customers_1", "NAME", "secrets_audit", "NAME", "secrets", "NAME", "nosuch", "NAME", "NOCASE", "NAME", "RTRIM", "NAME")
	for _, p := range pairs {
		_, errHas := run(t, tool, german, p[0])
		_, errLacks := run(t, tool, german, p[1])
		if errHas == nil || errLacks == nil || names.Replace(errHas.Error()) != names.Replace(errLacks.Error()) {
			t.Errorf("%s: %v\n%s: %v\nwant the same refusal", p[0], errHas, p[1], errLacks)
		}
	}
	// Mistakes within the model keep SQLite's own message.
	for q, want := range map[string]string{
		"SELECT nosuchcol FROM customers":           "no such column: nosuchcol",
		"SELEC 1":                                   "syntax error",
		"SELECT * FROM customers INDEXED BY nosuch": "no such index: nosuch",
		"DELETE FROM orders":                        "read-only SELECT",
		"SELECT count(*) FROM secrets, nosuch":      "may read only the views",
	} {
		_, err := run(t, tool, german, q)
		toolError(t, q, err, want)
	}
}
