package analytics_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/analytics"
)

// pgFixture is the shop of fixtureSQL in a schema of its own, with roles
// and a tool schema of random names, all dropped in t.Cleanup.
type pgFixture struct {
	admin  *sql.DB
	data   string // schema of the host's tables
	cfg    analytics.PostgresConfig
	reader string // DSN of the reader role
	model  *analytics.Model
}

func newPGFixture(t testing.TB) *pgFixture {
	t.Helper()
	return newPGFixtureOn(t, testDSN(t))
}

// testDSN returns the test database's DSN, or skips t.
func testDSN(t testing.TB) string {
	dsn := os.Getenv("EMBEDKIT_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("EMBEDKIT_TEST_POSTGRES_DSN not set; skipping PostgreSQL tests")
	}
	return dsn
}

// newPGFixtureOn is newPGFixture in the database of dsn.
func newPGFixtureOn(t testing.TB, dsn string) *pgFixture {
	t.Helper()
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	tag := strings.ToLower(rand.Text()[:10])
	f := &pgFixture{admin: admin, data: "ek_data_" + tag, cfg: analytics.PostgresConfig{
		Schema: "ek_tool_" + tag, Owner: "ek_owner_" + tag, Reader: "ek_reader_" + tag,
	}}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, q := range []string{
			"DROP SCHEMA IF EXISTS " + f.data + " CASCADE", "DROP SCHEMA IF EXISTS " + f.cfg.Schema + " CASCADE",
			"DROP OWNED BY " + f.cfg.Owner + ", " + f.cfg.Reader, "DROP ROLE IF EXISTS " + f.cfg.Owner, "DROP ROLE IF EXISTS " + f.cfg.Reader,
			"DROP OWNED BY " + f.cfg.Owner + "_functions", "DROP ROLE IF EXISTS " + f.cfg.Owner + "_functions",
		} {
			if _, err := admin.ExecContext(ctx, q); err != nil && !strings.Contains(err.Error(), "does not exist") {
				t.Errorf("%s: %v", q, err)
			}
		}
		admin.Close()
	})
	ctx := context.Background()
	for _, q := range []string{
		"CREATE SCHEMA " + f.data,
		"CREATE TABLE " + f.data + ".customers (id integer PRIMARY KEY, name text NOT NULL, country text NOT NULL, region integer NOT NULL)",
		"CREATE TABLE " + f.data + ".orders (id integer PRIMARY KEY, customer_id integer NOT NULL, amount double precision NOT NULL, created_at date NOT NULL)",
		"CREATE TABLE " + f.data + ".secrets (id integer PRIMARY KEY, value text)",
		"INSERT INTO " + f.data + ".customers VALUES (1, 'Anna', 'Germany', 10), (2, 'Ben', 'Germany', 11), (3, 'SECRET-FR Chloe', 'France', 20)",
		"INSERT INTO " + f.data + ".orders VALUES (1, 1, 10.5, '2025-01-02'), (2, 2, 20, '2025-02-03'), (3, 3, 999, '2025-03-04')",
		"INSERT INTO " + f.data + ".secrets VALUES (1, 'SECRET-TABLE')",
		"ANALYZE " + f.data + ".customers",
	} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	f.model = model()
	f.model.Views[0].SQL = "SELECT id, name, country, region FROM " + f.data + ".customers"
	f.model.Views[1].SQL = "SELECT o.id, o.amount, o.created_at, c.name AS customer, c.country FROM " + f.data + ".orders o JOIN " + f.data + ".customers c ON c.id = o.customer_id"
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(f.cfg.Reader)
	f.reader = u.String()
	return f
}

func (f *pgFixture) tool(t testing.TB, opts ...analytics.SQLOption) *analytics.SQLTool {
	t.Helper()
	if err := analytics.SetupPostgres(context.Background(), f.admin, f.model, f.cfg); err != nil {
		t.Fatalf("SetupPostgres: %v", err)
	}
	tool, err := analytics.NewPostgresSQLTool(f.readerPool(t), f.model, f.cfg, opts...)
	if err != nil {
		t.Fatalf("NewPostgresSQLTool: %v", err)
	}
	return tool
}

// readerPool opens a pool that logs in as the reader, closed in
// t.Cleanup.
func (f *pgFixture) readerPool(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", f.reader)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// hostilePostgres is the attack suite in PostgreSQL's dialect; DATA stands
// for the schema of the host's tables, TOOL for the tool's schema, OWNER
// for the owner role.
var hostilePostgres = []hostileCase{
	{"base table", "SELECT count(*) FROM DATA.customers", -1},
	{"CTE named like a view", "WITH customers AS (SELECT * FROM DATA.customers) SELECT count(*) FROM customers", -1},
	{"quoted CTE named like a view", `WITH "customers" AS MATERIALIZED (SELECT * FROM "DATA"."customers") SELECT count(*) FROM "customers"`, -1},
	{"recursive CTE", "WITH RECURSIVE customers(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM customers WHERE n < (SELECT count(*) FROM DATA.customers)) SELECT max(n) FROM customers", -1},
	{"alias", "SELECT count(*) FROM DATA.customers AS customers", -1},
	{"scalar subquery", "SELECT (SELECT string_agg(name, ',') FROM DATA.customers)", -1},
	{"NATURAL JOIN", "SELECT count(*) FROM (SELECT 'France' AS country) x NATURAL JOIN DATA.customers", -1},
	{"table outside the model", "SELECT * FROM DATA.secrets", -1},
	{"the source view", "SELECT count(*) FROM TOOL.embedkit_source_customers", -1},
	{"the access table", "SELECT * FROM TOOL.embedkit_access", -1},
	{"set the access from the query", "SELECT TOOL.embedkit_begin('{\"\": [\"\"]}'), count(*) FROM customers", -1},
	{"set the access in a CTE", "WITH a AS (SELECT TOOL.embedkit_begin('{\"country\": [\"France\"]}')) SELECT count(*) FROM customers, a", -1},
	{"SET ROLE", "SET ROLE OWNER", -1},
	{"RESET ROLE", "RESET ROLE", -1},
	{"set_config role", "SELECT set_config('role', 'OWNER', true)", -1},
	{"set_config session_authorization", "SELECT set_config('session_authorization', 'postgres', true)", -1},
	{"read-write again", "SELECT set_config('transaction_read_only', 'off', true)", -1},
	{"pg_read_file", "SELECT pg_read_file('/etc/passwd')", -1},
	{"pg_ls_dir", "SELECT * FROM pg_ls_dir('.')", -1},
	{"lo_import", "SELECT lo_import('/etc/passwd')", -1},
	{"dblink", "SELECT * FROM dblink('dbname=test', 'SELECT name FROM DATA.customers') AS t(name text)", -1},
	{"COPY", "COPY (SELECT 1) TO STDOUT", -1},
	{"two statements", "SELECT 1; SELECT 2", -1},
	{"COMMIT", "COMMIT", -1},
	{"write", "INSERT INTO TOOL.embedkit_access VALUES (1, 1, '', '')", -1},
	{"DDL", "CREATE TEMP VIEW x AS SELECT 1", -1},
	{"parameters", "SELECT $1::int", -1},
	{"EXPLAIN ANALYZE counts hidden rows", "EXPLAIN ANALYZE SELECT * FROM customers", -1},
	// Nothing that outlives the query's transaction or reaches other
	// sessions: locks others wait on (embedkit's own turn lock among them),
	// WAL no rollback removes, other users' queries stopped.
	{"advisory lock held by the transaction", "SELECT pg_advisory_xact_lock(hashtextextended('embedkit.turns', 1))", -1},
	{"advisory lock held by the session", "SELECT pg_catalog.pg_advisory_lock(1)", -1},
	{"advisory locks by the thousand", "SELECT count(pg_try_advisory_xact_lock_shared(g, g)) FROM generate_series(1, 5000) g", -1},
	{"WAL message", "SELECT pg_logical_emit_message(false, 'embedkit', repeat('x', 1000000))", -1},
	{"stop another session", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()", -1},
	{"cancel another session", "SELECT pg_cancel_backend(pg_backend_pid())", -1},
	// Legitimate SQL, and attacks that run but change nothing.
	{"view", "SELECT count(*) FROM customers", 2},
	{"quoted view", `SELECT count(*) FROM "customers"`, 2},
	{"qualified view", "SELECT count(*) FROM TOOL.customers", 2},
	{"upper case folds", "SELECT count(*) FROM CUSTOMERS", 2},
	{"CTE of any name", "WITH customers AS (SELECT * FROM customers) SELECT count(*) FROM customers", 2},
	{"subquery and alias", "SELECT count(*) FROM (SELECT * FROM orders) AS customers", 2},
	{"set_config of any setting changes no filter", "SELECT count(*) FROM customers, (SELECT set_config('embedkit.country', 'France', true), set_config('search_path', 'DATA', true)) AS x", 2},
	{"current_setting", "SELECT count(*) FROM customers WHERE current_setting('search_path') <> ''", 2},
	{"an error on a hidden row never fires", "SELECT count(*) FROM customers WHERE 1 / (CASE WHEN name LIKE 'SECRET%' THEN 0 ELSE 1 END) = 1", 2},
	{"catalog metadata is visible", "SELECT count(*) FROM (SELECT relname FROM pg_class WHERE relname IN ('customers', 'secrets') LIMIT 2) AS m", 2},
	{"statistics of the base tables are not", "SELECT count(*) + 2 FROM pg_stats WHERE schemaname = 'DATA'", 2},
	{"no table", "SELECT 2", 2},
}

func pgCase(f *pgFixture, q string) string {
	return strings.NewReplacer("DATA", f.data, "TOOL", f.cfg.Schema, "OWNER", f.cfg.Owner).Replace(q)
}

func TestHostilePostgres(t *testing.T) {
	f := newPGFixture(t)
	tool := f.tool(t)
	for _, c := range hostilePostgres {
		t.Run(c.name, func(t *testing.T) {
			c.q = pgCase(f, c.q)
			checkHostile(t, tool, c)
		})
	}
	// The tables behind the views and outside the model stay unread:
	// nothing of theirs in any result, for any user.
	res, err := tool.Run(t.Context(), chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: "SELECT name, country, region FROM customers ORDER BY id"})
	if err != nil || len(res.Data) != 2 || res.Data[0][0] != "Anna" || res.Data[0][2] != int64(10) {
		t.Errorf("German customers: %v %v", res, err)
	}
	res, err = tool.Run(t.Context(), chatstream.Turn{User: internal}, analytics.SQLInput{SQLQuery: "SELECT count(*), sum(amount), min(created_at) FROM orders"})
	if err != nil || res.Data[0][0] != int64(3) || res.Data[0][1] != 1029.5 || res.Schema[2].ColumnType != "time" {
		t.Errorf("internal orders: %+v %v", res, err)
	}
	for _, u := range []chatstream.User{{ExternalID: "x"}, {ExternalID: "x", Attributes: map[string]any{"country": "x') OR true --"}}} {
		res, err := tool.Run(t.Context(), chatstream.Turn{User: u}, analytics.SQLInput{SQLQuery: "SELECT count(*) FROM customers"})
		if err != nil || res.Data[0][0] != int64(0) {
			t.Errorf("%v: %v %v, want no rows", u, res, err)
		}
	}
}

// TestPostgresWritesRefused: a write through a view over a join is
// refused as a write (PostgreSQL's own refusal names the view beneath),
// and the data is as it was.
func TestPostgresWritesRefused(t *testing.T) {
	f := newPGFixture(t)
	tool := f.tool(t)
	for _, q := range []string{
		"UPDATE orders SET amount = 1 RETURNING *",
		"DELETE FROM orders RETURNING *",
		"INSERT INTO orders (id) VALUES (1) RETURNING *",
		"WITH u AS (UPDATE orders SET amount = 0 RETURNING 1) SELECT * FROM u",
	} {
		_, err := tool.Run(t.Context(), chatstream.Turn{User: internal}, analytics.SQLInput{SQLQuery: q})
		toolError(t, q, err, "only a single read-only SELECT statement is allowed")
	}
	res, err := tool.Run(t.Context(), chatstream.Turn{User: internal}, analytics.SQLInput{SQLQuery: "SELECT count(*), sum(amount) FROM orders"})
	if err != nil || res.Data[0][0] != int64(3) || res.Data[0][1] != 1029.5 {
		t.Errorf("orders after the writes: %+v %v", res, err)
	}
}

func TestPostgresBoundedCost(t *testing.T) {
	f := newPGFixture(t)
	tool := f.tool(t, analytics.WithTimeout(500*time.Millisecond))
	for _, q := range []string{
		"SELECT count(*) FROM generate_series(1, 10000000000)",
		"SELECT set_config('statement_timeout', '0', true), pg_sleep(5)",
		"SELECT pg_sleep(5)",
	} {
		start := time.Now()
		_, err := tool.Run(t.Context(), chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: q})
		toolError(t, q, err, "longer than 500ms")
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("%s took %v", q, took)
		}
	}
	sized := f.tool(t)
	for q, want := range map[string]string{
		"SELECT repeat('x', 20000000)":                           "a row is larger than 16 MiB",
		"SELECT repeat('x', 1000000) FROM generate_series(1, 8)": "result too large",
		"SELECT " + strings.Repeat("1, ", 100) + "1":             "result too large",
	} {
		_, err := sized.Run(t.Context(), chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: q})
		toolError(t, q, err, want)
	}
	// The data query API, which has no result cap, says the same of a row.
	big, bigErr := sized.QueryData(t.Context(), chatstream.Turn{User: german}, "SELECT repeat('x', 20000000)", 0)
	if bigErr == nil {
		for big.Next() {
		}
		bigErr = big.Err()
		big.Close()
	}
	if bigErr == nil || !strings.Contains(bigErr.Error(), "a row is larger than 16 MiB") {
		t.Errorf("data query of a 20 MB row: %v, want %q", bigErr, "a row is larger than 16 MiB")
	}
	// The tool works after each of them.
	if _, err := sized.Run(t.Context(), chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: "SELECT count(*) FROM customers"}); err != nil {
		t.Error(err)
	}

	// A cancelled caller stops the query at once.
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := tool.Run(ctx, chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: "SELECT pg_sleep(5)"})
	if !errors.Is(err, context.Canceled) || time.Since(start) > time.Second {
		t.Errorf("cancelled: %v after %v", err, time.Since(start))
	}

	// QueryData streams past the row limit and the size cap (with the
	// default timeout: 6,000 rows under the race detector on a loaded
	// machine can take longer than the 500 ms above).
	rows, err := sized.QueryData(t.Context(), chatstream.Turn{User: german}, "SELECT c.name, g FROM customers c, generate_series(1, 3000) g", 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(readAll(t, rows)); n != 6000 {
		t.Errorf("%d rows, want 6000", n)
	}
	_, err = tool.QueryData(t.Context(), chatstream.Turn{User: german}, "SELECT * FROM "+f.data+".customers", 0)
	if qe, ok := errors.AsType[*chatstream.QueryError](err); !ok || strings.Contains(qe.Msg, "customers\"") {
		t.Errorf("QueryData of a base table: %v", err)
	}
}

// TestSetupPostgresConcurrently: replicas that start at once all set up,
// and the result is the same as one setup.
func TestSetupPostgresConcurrently(t *testing.T) {
	f := newPGFixture(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- analytics.SetupPostgres(context.Background(), f.admin, f.model, f.cfg) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	tool := f.tool(t)
	res, err := tool.Run(t.Context(), chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: "SELECT count(*) FROM orders"})
	if err != nil || res.Data[0][0] != int64(2) {
		b, _ := json.Marshal(res)
		t.Errorf("after concurrent setups: %s %v", b, err)
	}

	// A reader that can read a base table itself is refused.
	if _, err := f.admin.Exec("GRANT USAGE ON SCHEMA " + f.data + " TO " + f.cfg.Reader + "; GRANT SELECT ON " + f.data + ".customers TO " + f.cfg.Reader); err != nil {
		t.Fatal(err)
	}
	db := f.readerPool(t)
	if _, err := analytics.NewPostgresSQLTool(db, f.model, f.cfg); err == nil || !strings.Contains(err.Error(), "can read") {
		t.Errorf("a reader that can read customers: %v", err)
	}
}

// TestPostgresReaderConfined: NewPostgresSQLTool refuses a reader that can
// execute a function whose effects reach beyond its query's transaction
// (SetupPostgres revokes them from PUBLIC), and the reader's temporary
// files are bounded by a setting no query can raise.
func TestPostgresReaderConfined(t *testing.T) {
	f := newPGFixture(t)
	// A role of the host's, not a superuser, that uses advisory locks (as
	// embedkit's store and cluster do when they log in as such a role).
	// And a group role of the host's that the reader belongs to: it gets
	// nothing, or the reader would inherit it.
	app, group := f.cfg.Reader+"_app", f.cfg.Reader+"_group"
	for _, q := range []string{"CREATE ROLE " + app + " LOGIN", "CREATE ROLE " + group} {
		if _, err := f.admin.ExecContext(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, r := range []string{app, group} {
			_, _ = f.admin.ExecContext(context.Background(), "DROP ROLE IF EXISTS "+r)
		}
	})
	// The reader exists already, granted the function by another
	// installation's setup (before it was marked as a reader): SetupPostgres
	// takes it back.
	for _, q := range []string{"CREATE ROLE " + f.cfg.Reader + " LOGIN", "GRANT EXECUTE ON FUNCTION pg_advisory_lock(bigint) TO " + f.cfg.Reader, "GRANT " + group + " TO " + f.cfg.Reader} {
		if _, err := f.admin.ExecContext(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	tool := f.tool(t)
	var appLocks, readerLocks bool
	if err := f.admin.QueryRowContext(t.Context(), "SELECT has_function_privilege($1, 'pg_advisory_xact_lock(bigint)', 'EXECUTE'), has_function_privilege($2, 'pg_try_advisory_xact_lock(bigint)', 'EXECUTE')",
		app, f.cfg.Reader).Scan(&appLocks, &readerLocks); err != nil {
		t.Fatal(err)
	}
	if !appLocks || readerLocks {
		t.Errorf("after SetupPostgres: the host's role can take advisory locks %v (want true), the reader %v (want false)", appLocks, readerLocks)
	}
	// The host's role is still dropped as it was: it holds a membership,
	// not privileges on objects.
	if _, err := f.admin.ExecContext(t.Context(), "DROP ROLE "+app); err != nil {
		t.Errorf("DROP ROLE of the host's role after SetupPostgres: %v", err)
	}
	res, err := tool.Run(t.Context(), chatstream.Turn{User: internal}, analytics.SQLInput{SQLQuery: "SELECT current_setting('temp_file_limit'), set_config('temp_file_limit', '-1', true) IS NULL"})
	if err == nil {
		t.Errorf("the reader raised its temp_file_limit: %v", res.Data)
	}
	res, err = tool.Run(t.Context(), chatstream.Turn{User: internal}, analytics.SQLInput{SQLQuery: "SELECT current_setting('temp_file_limit')"})
	if err != nil || res.Data[0][0] != "1GB" {
		t.Errorf("temp_file_limit = %v %v, want 1GB", res, err)
	}
	ctx := t.Context()
	if _, err := f.admin.ExecContext(ctx, "GRANT EXECUTE ON FUNCTION pg_advisory_lock(bigint) TO "+f.cfg.Reader); err != nil {
		t.Fatal(err)
	}
	db := f.readerPool(t)
	if _, err := analytics.NewPostgresSQLTool(db, f.model, f.cfg); err == nil || !strings.Contains(err.Error(), "pg_advisory_lock(bigint)") {
		t.Errorf("NewPostgresSQLTool with a reader that can take advisory locks: %v, want a refusal naming the function", err)
	}
	if _, err := f.admin.ExecContext(ctx, "REVOKE EXECUTE ON FUNCTION pg_advisory_lock(bigint) FROM "+f.cfg.Reader); err != nil {
		t.Fatal(err)
	}
}

// TestPostgresXPathRefused: nothing interrupts XPath in libxml2 (not
// statement_timeout, a cancel request or pg_terminate_backend), so a
// query of nested count()s over a few hundred nodes ran for minutes past
// its timeout, keeping a backend and a connection slot, and repeated it
// took every connection of the server. The reader executes none of the
// XPath functions, and a query whose plan runs XMLTABLE, however spelled,
// is refused before it runs.
func TestPostgresXPathRefused(t *testing.T) {
	f := newPGFixture(t)
	tool := f.tool(t, analytics.WithTimeout(300*time.Millisecond))
	const doc = "xmlparse(document ('<r>' || repeat('<a/>', 450) || '</r>'))"
	const path = "'count(//a[count(//a[count(//a)>0])>0])'"
	for _, q := range []string{
		"SELECT xpath(" + path + ", " + doc + ")",
		"SELECT pg_catalog.xpath(" + path + ", " + doc + ", '{}')",
		"SELECT xpath_exists(" + path + ", " + doc + ")",
		"SELECT XMLEXISTS(" + path + " PASSING " + doc + ")",
		"SELECT \"xmlexists\"(" + path + ", " + doc + ")",
		// Parsing ignores interrupts too.
		"SELECT xml_is_well_formed(repeat('<a/>', 3))",
		"SELECT xml_is_well_formed_document(repeat('<a/>', 3))",
		"SELECT CAST(repeat('<a/>', 3) AS xml)::text",
		// Functions that run SQL text, whose plan the tool never sees.
		"SELECT query_to_xml('SELECT * FROM XMLTABLE(''/r'' PASSING ''<r/>'' COLUMNS n int PATH ''1'')', true, false, '')::text",
		"SELECT query_to_xml_and_xmlschema('SELECT 1', true, false, '')::text",
		"SELECT * FROM ts_stat('SELECT to_tsvector(''a'')')",
		"SELECT ts_rewrite('a'::tsquery, 'SELECT ''a''::tsquery, ''b''::tsquery')::text",
	} {
		_, err := run(t, tool, german, q)
		toolError(t, q, err, "may not call the function")
	}
	for _, q := range []string{
		"SELECT * FROM XMLTABLE('/r' PASSING " + doc + " COLUMNS n float8 PATH " + path + ")",
		"WITH x AS (SELECT * FROM XMLTABLE('/r' PASSING " + doc + " COLUMNS n float8 PATH " + path + ")) SELECT * FROM x",
		"SELECT (SELECT n FROM XMLTABLE('/r' PASSING " + doc + " COLUMNS n float8 PATH " + path + ")) FROM customers",
		"SELECT c.name, x.n FROM customers c, LATERAL XMLTABLE('/r' PASSING xmlparse(document ('<r>' || c.name || '</r>')) COLUMNS n text PATH " + path + ") x",
		"SELECT 1 WHERE EXISTS (SELECT 1 FROM xmltable('/r' PASSING '<r/>' COLUMNS n int PATH '1'))",
	} {
		start := time.Now()
		_, err := run(t, tool, german, q)
		toolError(t, q, err, "XMLTABLE is not allowed")
		if took := time.Since(start); took > 5*time.Second { // 12 s past its timeout before
			t.Errorf("%s: refused after %v", q, took)
		}
	}
	// XML without XPath runs, and SHOW, which cannot be explained, is
	// refused as before.
	if res, err := run(t, tool, german, "SELECT xmlelement(name a, 'x')::text"); err != nil || res.Data[0][0] != "<a>x</a>" {
		t.Errorf("xmlelement: %v %v", res, err)
	}
	_, err := run(t, tool, german, "SHOW search_path")
	toolError(t, "SHOW", err, "only a single read-only SELECT statement is allowed")
	// An error of the plan's constant folding is the query's, as when it
	// ran.
	_, err = run(t, tool, german, "SELECT 1/0")
	toolError(t, "1/0", err, "the query failed: division by zero")
	// A reader that can execute one of them is refused.
	if _, err := f.admin.ExecContext(t.Context(), "GRANT EXECUTE ON FUNCTION xpath(text, xml, text[]) TO "+f.cfg.Reader); err != nil {
		t.Fatal(err)
	}
	db := f.readerPool(t)
	if _, err := analytics.NewPostgresSQLTool(db, f.model, f.cfg); err == nil || !strings.Contains(err.Error(), "xpath(text,xml,text[])") {
		t.Errorf("NewPostgresSQLTool with a reader that can execute xpath: %v, want a refusal naming it", err)
	}
	// SetupPostgres takes it back.
	f.tool(t)
}

// TestPostgresExtensionsChecked: a reader that can execute a function of
// xml2 (XPath and SQL text, as the revoked functions of pg_catalog) or of
// dblink is refused, in a database of its own (an extension is the
// database's).
func TestPostgresExtensionsChecked(t *testing.T) {
	dsn := testDSN(t)
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	name := "ek_ext_" + strings.ToLower(rand.Text()[:10])
	if _, err := admin.ExecContext(t.Context(), "CREATE DATABASE "+name); err != nil {
		admin.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the fixture's own (its roles, its connections)
		defer admin.Close()
		if _, err := admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop the test's database: %v", err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	f := newPGFixtureOn(t, u.String())
	for _, ext := range []string{"xml2", "dblink"} {
		if _, err := f.admin.ExecContext(t.Context(), "CREATE EXTENSION IF NOT EXISTS "+ext+" SCHEMA "+f.data); err != nil {
			t.Skipf("%s is not installed here: %v", ext, err)
		}
	}
	if err := analytics.SetupPostgres(t.Context(), f.admin, f.model, f.cfg); err != nil {
		t.Fatal(err)
	}
	db := f.readerPool(t)
	_, err = analytics.NewPostgresSQLTool(db, f.model, f.cfg)
	if err == nil || !strings.Contains(err.Error(), "xpath_table(") || !strings.Contains(err.Error(), "dblink(") {
		t.Errorf("NewPostgresSQLTool with a reader that can execute xml2 and dblink: %v, want a refusal naming their functions", err)
	}
	if _, err := f.admin.ExecContext(t.Context(), "REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA "+f.data+" FROM PUBLIC"); err != nil {
		t.Fatal(err)
	}
	if _, err := analytics.NewPostgresSQLTool(db, f.model, f.cfg); err != nil {
		t.Errorf("after the host revoked them: %v", err)
	}
}

// TestPostgresAccessNotInActivity: the user's filter values reach
// PostgreSQL as a parameter, whatever the pool's query mode (the simple
// protocol, as behind PgBouncer, would write them into the statement's
// text): another user's query polling pg_stat_activity never sees them.
func TestPostgresAccessNotInActivity(t *testing.T) {
	f := newPGFixture(t)
	f.reader += "&default_query_exec_mode=simple_protocol"
	if !strings.Contains(f.reader, "?") {
		f.reader = strings.Replace(f.reader, "&", "?", 1)
	}
	tool := f.tool(t, analytics.WithTimeout(10*time.Second))
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { // a French user asks again and again
		for ctx.Err() == nil {
			_, _ = tool.Run(ctx, chatstream.Turn{User: chatstream.User{ExternalID: "fr", Attributes: map[string]any{"country": "France"}}},
				analytics.SQLInput{SQLQuery: "SELECT count(*) FROM customers"})
		}
	})
	res, err := tool.Run(t.Context(), chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: `SELECT string_agg(DISTINCT a.query, ' | ')
		FROM generate_series(1, 20000) g,
		LATERAL pg_stat_get_activity(CASE WHEN pg_stat_clear_snapshot() IS NULL OR g > 0 THEN NULL::int END) a
		WHERE a.pid <> pg_backend_pid() AND a.query LIKE '%embedkit_begin%'`})
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if seen := fmt.Sprint(res.Data); strings.Contains(seen, "France") {
		t.Errorf("a German user read a French user's filter value in pg_stat_activity: %s", seen)
	} else if !strings.Contains(seen, "embedkit_begin") {
		t.Logf("the poll saw no other session's embedkit_begin: %s", seen)
	}
}

// TestSetupPostgresRoles: the roles SetupPostgres gives the functions it
// takes from PUBLIC. A host role without INHERIT keeps them too; a role
// of the group's name that is not embedkit's, or a group name that is
// not one of its own (an owner of 63 bytes), is refused; and a host group
// that another installation's reader belongs to gets nothing.
func TestSetupPostgresRoles(t *testing.T) {
	ctx := context.Background()
	t.Run("a role without INHERIT", func(t *testing.T) {
		f := newPGFixture(t)
		app := f.cfg.Reader + "_noinh"
		if _, err := f.admin.ExecContext(ctx, "CREATE ROLE "+app+" LOGIN NOINHERIT"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = f.admin.ExecContext(ctx, "DROP OWNED BY "+app)
			_, _ = f.admin.ExecContext(ctx, "DROP ROLE IF EXISTS "+app)
		})
		f.tool(t)
		var can bool
		if err := f.admin.QueryRowContext(ctx, "SELECT has_function_privilege($1, 'pg_advisory_xact_lock(bigint)', 'EXECUTE')", app).Scan(&can); err != nil || !can {
			t.Errorf("a NOINHERIT host role can take advisory locks: %v %v, want true", can, err)
		}
	})
	t.Run("a role the reader comes to belong to", func(t *testing.T) {
		for _, inherit := range []string{"INHERIT", "NOINHERIT"} {
			f := newPGFixture(t)
			app := f.cfg.Reader + "_app"
			if _, err := f.admin.ExecContext(ctx, "CREATE ROLE "+app+" NOLOGIN "+inherit); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_, _ = f.admin.ExecContext(ctx, "DROP OWNED BY "+app)
				_, _ = f.admin.ExecContext(ctx, "DROP ROLE IF EXISTS "+app)
			})
			f.tool(t) // the role gets the functions (a membership, or themselves)
			if _, err := f.admin.ExecContext(ctx, "GRANT "+app+" TO "+f.cfg.Reader); err != nil {
				t.Fatal(err)
			}
			f.tool(t) // the next setup takes them back from it
		}
	})
	t.Run("a host role of the group's name", func(t *testing.T) {
		f := newPGFixture(t)
		taken := f.cfg.Owner + "_functions"
		if _, err := f.admin.ExecContext(ctx, "CREATE ROLE "+taken+" LOGIN"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = f.admin.ExecContext(ctx, "DROP ROLE IF EXISTS "+taken) })
		if err := analytics.SetupPostgres(ctx, f.admin, f.model, f.cfg); err == nil || !strings.Contains(err.Error(), "not embedkit's") {
			t.Errorf("SetupPostgres with a host role named %s: %v, want a refusal", taken, err)
		}
	})
	t.Run("an owner name of 63 bytes", func(t *testing.T) {
		f := newPGFixture(t)
		f.cfg.Owner = (f.cfg.Owner + strings.Repeat("o", 63))[:63]
		t.Cleanup(func() {
			_, _ = f.admin.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+f.cfg.Schema+" CASCADE")
			_, _ = f.admin.ExecContext(ctx, "DROP OWNED BY "+f.cfg.Owner)
			_, _ = f.admin.ExecContext(ctx, "DROP ROLE IF EXISTS "+f.cfg.Owner)
		})
		if err := analytics.SetupPostgres(ctx, f.admin, f.model, f.cfg); err == nil || !strings.Contains(err.Error(), "at most 53 bytes") {
			t.Errorf("SetupPostgres with a 63-byte owner: %v, want a refusal", err)
		}
	})
	t.Run("another installation's reader in a host group", func(t *testing.T) {
		fa, fb := newPGFixture(t), newPGFixture(t)
		group := fb.cfg.Reader + "_group"
		for _, q := range []string{"CREATE ROLE " + group, "CREATE ROLE " + fb.cfg.Reader + " LOGIN IN ROLE " + group} {
			if _, err := fb.admin.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { _, _ = fb.admin.ExecContext(ctx, "DROP ROLE IF EXISTS "+group) })
		fb.tool(t)
		if err := analytics.SetupPostgres(ctx, fa.admin, fa.model, fa.cfg); err != nil {
			t.Fatal(err)
		}
		var can bool
		if err := fb.admin.QueryRowContext(ctx, "SELECT has_function_privilege($1, 'pg_advisory_lock(bigint)', 'EXECUTE')", fb.cfg.Reader).Scan(&can); err != nil || can {
			t.Errorf("B's reader can take advisory locks after A's setup: %v %v", can, err)
		}
		fb.tool(t) // B starts again
	})
}

// TestPostgresOtherUsersSQLNotVisible: every user's queries run as the
// reader, and pg_stat_activity shows a role the SQL of its other sessions,
// literals and all; SetupPostgres turns the reader's track_activities off,
// so that one user's query never reads the text of another's running one.
func TestPostgresOtherUsersSQLNotVisible(t *testing.T) {
	f := newPGFixture(t)
	tool := f.tool(t, analytics.WithTimeout(10*time.Second))
	french := chatstream.User{ExternalID: "jean", Attributes: map[string]any{"country": "France"}}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	running := make(chan struct{}, 1)
	wg.Go(func() {
		for ctx.Err() == nil {
			select {
			case running <- struct{}{}:
			default:
			}
			_, _ = tool.Run(ctx, chatstream.Turn{User: french}, analytics.SQLInput{
				SQLQuery: "SELECT count(*), pg_sleep(0.2) FROM customers WHERE name = 'SECRET-FR Chloe'"})
		}
	})
	<-running
	time.Sleep(100 * time.Millisecond) // the French query runs
	res, err := tool.Run(t.Context(), chatstream.Turn{User: german}, analytics.SQLInput{
		SQLQuery: "SELECT count(*), string_agg(coalesce(query, ''), ' | ') FROM pg_stat_activity WHERE pid <> pg_backend_pid()"})
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if s := fmt.Sprint(res.Data); strings.Contains(s, "SECRET-FR") {
		t.Errorf("another user's running SQL is visible: %s", s)
	}
}

// TestPostgresReaderSettingsRequired: NewPostgresSQLTool refuses a reader
// whose queries other users would read in pg_stat_activity, or whose
// temporary files are unbounded (settings SetupPostgres makes as a
// superuser, and a host without one must make).
func TestPostgresReaderSettingsRequired(t *testing.T) {
	f := newPGFixture(t)
	f.tool(t) // SetupPostgres ran: accepted
	for _, q := range []string{"ALTER ROLE %s RESET track_activities", "ALTER ROLE %s SET track_activities = off; ALTER ROLE %s RESET temp_file_limit"} {
		for _, stmt := range strings.Split(q, "; ") {
			if _, err := f.admin.ExecContext(t.Context(), strings.ReplaceAll(stmt, "%s", f.cfg.Reader)); err != nil {
				t.Fatal(err)
			}
		}
		db, err := sql.Open("pgx", f.reader)
		if err != nil {
			t.Fatal(err)
		}
		_, err = analytics.NewPostgresSQLTool(db, f.model, f.cfg)
		db.Close()
		if err == nil || !strings.Contains(err.Error(), "track_activities") {
			t.Errorf("after %q: NewPostgresSQLTool: %v, want a refusal naming the settings", q, err)
		}
	}
}
