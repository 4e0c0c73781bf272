package analytics_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/analytics"
	"github.com/embedkit/embedkit/internal/optiontest"
)

// A small shop: three customers in two countries, with one order each. The
// French rows carry a marker that must never reach a German user.
const fixtureSQL = `
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT NOT NULL, region INTEGER NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL, amount REAL NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE secrets (id INTEGER PRIMARY KEY, value TEXT);
INSERT INTO customers VALUES (1, 'Anna', 'Germany', 10), (2, 'Ben', 'Germany', 11), (3, 'SECRET-FR Chloe', 'France', 20);
INSERT INTO orders VALUES (1, 1, 10.5, '2025-01-02'), (2, 2, 20, '2025-02-03'), (3, 3, 999, '2025-03-04');
INSERT INTO secrets VALUES (1, 'SECRET-TABLE');
`

func model() *analytics.Model {
	byCountry := []analytics.RowFilter{{Attribute: "country", Column: "country", Normalize: func(s string) string {
		if strings.EqualFold(s, "de") {
			return "Germany"
		}
		return s
	}}}
	return &analytics.Model{Views: []analytics.View{
		{
			Name: "customers", Title: "Customers", Description: "One row per customer.",
			SQL:     "SELECT id, name, country, region FROM main.customers",
			Filters: byCountry,
			Members: []analytics.Member{
				{Name: "customers.count", Title: "Customers", Type: "number", AggType: "count"},
				{Name: "customers.country", Title: "Country", Description: "Where the customer lives.", Type: "string"},
			},
		},
		{
			Name: "orders", Title: "Orders", Description: "One row per order.",
			SQL: `SELECT o.id, o.amount, o.created_at, c.name AS customer, c.country
FROM main.orders o JOIN main.customers c ON c.id = o.customer_id`,
			Filters: byCountry,
			Members: []analytics.Member{
				{Name: "orders.amount", Title: "Amount", Description: "Order amount.", Type: "number", AggType: "sum"},
				{Name: "orders.created_at", Title: "Order date", Type: "time"},
			},
		},
	}}
}

// openDB returns a database with the fixture loaded, and a second handle
// on it for the tool.
func openDB(t testing.TB) (rw, ro *sql.DB) {
	t.Helper()
	return openDBWith(t, "")
}

// openDBWith is openDB, the read-only pool's DSN ending with params.
func openDBWith(t testing.TB, params string) (rw, ro *sql.DB) {
	t.Helper()
	name := "file:/analytics-" + rand.Text() + "?vfs=memdb"
	rw, err := sql.Open("sqlite3", name)
	if err != nil {
		t.Fatal(err)
	}
	rw.SetMaxIdleConns(2)
	t.Cleanup(func() { rw.Close() })
	// Keep the in-memory database alive.
	pin, err := rw.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pin.Close() })
	if _, err := pin.ExecContext(context.Background(), fixtureSQL); err != nil {
		t.Fatal(err)
	}
	ro, err = sql.Open("sqlite3", name+"&mode=ro"+params)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ro.Close() })
	return rw, ro
}

func newTool(t testing.TB, opts ...analytics.SQLOption) (*analytics.SQLTool, *sql.DB) {
	t.Helper()
	rw, ro := openDB(t)
	tool, err := analytics.NewSQLTool(ro, model(), opts...)
	if err != nil {
		t.Fatalf("NewSQLTool: %v", err)
	}
	return tool, rw
}

var (
	german   = chatstream.User{ExternalID: "hans", Attributes: map[string]any{"country": "Germany"}}
	internal = chatstream.User{InternalID: "alice@acme.test"}
)

func run(t *testing.T, tool *analytics.SQLTool, u chatstream.User, q string) (*analytics.SQLResult, error) {
	t.Helper()
	return tool.Run(t.Context(), chatstream.Turn{User: u}, analytics.SQLInput{SQLQuery: q})
}

// toolError asserts that err is a tool error whose message contains want.
func toolError(t *testing.T, q string, err error, want string) {
	t.Helper()
	var te *analytics.ToolError
	if !errors.As(err, &te) {
		t.Fatalf("%s: error %v (%T), want a *ToolError", q, err, err)
	}
	if !strings.Contains(te.Msg, want) {
		t.Errorf("%s: error %q, want it to contain %q", q, te.Msg, want)
	}
}

func TestOnlyOneReadOnlySelect(t *testing.T) {
	tool, rw := newTool(t)
	for _, tt := range []struct{ q, want string }{
		{"INSERT INTO orders VALUES (9, 1, 1, '2025-01-01', 'x')", "read-only SELECT"},
		// Judged over the views alone: the view has 5 columns.
		{"INSERT INTO orders VALUES (9, 1, 1, '2025-01-01')", "5 columns"},
		{"DELETE FROM orders", "read-only SELECT"},
		{"UPDATE customers SET country = 'Germany'", "read-only SELECT"},
		{"DROP TABLE orders; --", "read-only SELECT"},
		{"SELECT 1; DELETE FROM orders", "more than one statement"},
		{"SELECT 1; SELECT 2", "more than one statement"},
		{"SELECT 1;; ;SELECT 2", "more than one statement"},
		{"PRAGMA query_only = 0", "read-only SELECT"},
		{"PRAGMA table_info(customers)", "PRAGMA"},
		{"SELECT * FROM pragma_table_info('customers')", "only the views of the data model"},
		{"ATTACH DATABASE ':memory:' AS x", "read-only SELECT"},
		{"DETACH DATABASE main", "read-only SELECT"},
		{"WITH x AS (SELECT 1) DELETE FROM orders", "read-only SELECT"},
		{"WITH x AS (SELECT 1) INSERT INTO orders SELECT 2, 'x', 1, 1, '2025-01-01'", "read-only SELECT"},
		// A table outside the model is refused as a missing one is.
		{"WITH x AS (SELECT 1) INSERT INTO secrets SELECT 2, 'x'", "only the views of the data model"},
		{"CREATE TEMP VIEW v AS SELECT * FROM main.customers", "read-only SELECT"},
		{"CREATE TEMP TABLE t AS SELECT 1", "read-only SELECT"},
		{"BEGIN", "read-only SELECT"},
		{"VACUUM", "read-only SELECT"},
		{"ANALYZE", "read-only SELECT"},
		{"EXPLAIN SELECT * FROM main.customers", "only the views of the data model"},
		{"EXPLAIN SELECT 1", "EXPLAIN"},
		{"EXPLAIN QUERY PLAN SELECT 1", "EXPLAIN"},
		{"EXPLAIN DELETE FROM orders", "EXPLAIN"},
		// Statements that return no columns, even where they would do
		// nothing.
		{"REINDEX", "read-only SELECT"},
		{"REINDEX RTRIM", "read-only SELECT"},
		{"DROP TRIGGER IF EXISTS nosuch", "read-only SELECT"},
		{"DROP VIEW IF EXISTS nosuch", "read-only SELECT"},
		{"SELECT load_extension('x')", "load_extension"},
		{"", "empty"},
		{"   -- just a comment", "no statement"},
		{"SELEC 1", "not valid SQL"},
	} {
		_, err := run(t, tool, internal, tt.q)
		toolError(t, tt.q, err, tt.want)
	}
	var n int
	if err := rw.QueryRow("SELECT count(*) FROM orders").Scan(&n); err != nil || n != 3 {
		t.Errorf("orders after the attempts: %d (%v), want 3", n, err)
	}

	// A query that reads no table runs as usual, and so does a trailing
	// semicolon or comment.
	for _, q := range []string{"SELECT 1", "SELECT 1;", "select 1 -- one", "SELECT 1; -- done", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5) SELECT count(*) FROM c"} {
		res, err := run(t, tool, german, q)
		if err != nil {
			t.Errorf("%s: %v", q, err)
			continue
		}
		if len(res.Data) != 1 || res.TotalRows != 1 {
			t.Errorf("%s: %v, want one row", q, res.Data)
		}
	}
}

func TestRowSecurity(t *testing.T) {
	tool, _ := newTool(t)
	count := func(u chatstream.User, q string) int64 {
		t.Helper()
		res, err := run(t, tool, u, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return res.Data[0][0].(int64)
	}
	for _, tt := range []struct {
		name string
		user chatstream.User
		want int64 // customers seen
	}{
		{"internal user sees every row", internal, 3},
		{"one country", german, 2},
		{"normalized value", chatstream.User{ExternalID: "x", Attributes: map[string]any{"country": "de"}}, 2},
		{"list of countries", chatstream.User{ExternalID: "x", Attributes: map[string]any{"country": []any{"Germany", "France"}}}, 3},
		{"no attribute: fails closed", chatstream.User{ExternalID: "x"}, 0},
		{"empty list: fails closed", chatstream.User{ExternalID: "x", Attributes: map[string]any{"country": []string{}}}, 0},
		{"empty string: fails closed", chatstream.User{ExternalID: "x", Attributes: map[string]any{"country": ""}}, 0},
		{"other type: fails closed", chatstream.User{ExternalID: "x", Attributes: map[string]any{"country": true}}, 0},
		{"no identity at all: fails closed", chatstream.User{}, 0},
		{"quotes are values, not SQL", chatstream.User{ExternalID: "x", Attributes: map[string]any{"country": "x') OR 1=1 --"}}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := count(tt.user, "SELECT count(*) FROM customers"); got != tt.want {
				t.Errorf("customers = %d, want %d", got, tt.want)
			}
			if got := count(tt.user, "SELECT count(*) FROM orders"); got != tt.want {
				t.Errorf("orders = %d, want %d", got, tt.want)
			}
		})
	}

	// Whatever the SQL, a German user never reads French rows or the
	// tables behind the views.
	for _, q := range []string{
		"SELECT * FROM main.customers",
		"SELECT count(*) FROM main.customers",
		"SELECT count(*) FROM main.orders, orders",
		"SELECT * FROM secrets",
		"SELECT * FROM main.secrets",
		"SELECT * FROM sqlite_master",
		"SELECT * FROM sqlite_temp_master",
		"SELECT * FROM temp.sqlite_master",
		"WITH customers AS (SELECT * FROM main.customers) SELECT * FROM customers",
		`WITH "Customers"(id, name, country, region) AS (SELECT * FROM main.customers) SELECT name FROM "Customers"`,
		"WITH x AS (SELECT 1), orders AS MATERIALIZED (SELECT * FROM main.orders) SELECT * FROM orders",
		"WITH x AS (SELECT '--'), [orders] AS (SELECT * FROM main.orders) SELECT * FROM orders",
		"SELECT * FROM (SELECT * FROM main.customers) AS customers",
		"SELECT embedkit_rls_all()",
		"SELECT * FROM customers WHERE (SELECT embedkit_rls_values('country')) IS NOT NULL",
		"SELECT * FROM json_each((SELECT group_concat(name) FROM main.customers))",
	} {
		res, err := run(t, tool, german, q)
		if err == nil {
			b, _ := json.Marshal(res.Data)
			t.Errorf("%s: ran, rows %s; want a tool error", q, b)
			continue
		}
		var te *analytics.ToolError
		if !errors.As(err, &te) {
			t.Errorf("%s: %v, want a tool error", q, err)
		}
	}
	// Through the views, filters in the query narrow what the user sees;
	// nothing widens it.
	for _, q := range []string{
		"SELECT name FROM customers WHERE country = 'France' OR 1 = 1",
		"SELECT customer FROM orders UNION ALL SELECT name FROM customers",
		"SELECT c.name FROM customers c LEFT JOIN orders o ON 1 = 1",
		"SELECT name FROM temp.customers",
		"WITH de AS (SELECT name, country FROM customers) SELECT name FROM de",
		"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3) SELECT name FROM customers, n",
		"SELECT o.customer, c.region FROM orders o JOIN customers c ON c.name = o.customer",
		"SELECT name FROM customers WHERE id IN (SELECT id FROM customers)",
		"SELECT value FROM json_each('[1, 2]')",
	} {
		res, err := run(t, tool, german, q)
		if err != nil {
			t.Errorf("%s: %v", q, err)
			continue
		}
		b, _ := json.Marshal(res.Data)
		if strings.Contains(string(b), "SECRET") {
			t.Errorf("%s: %s reaches a German user", q, b)
		}
	}
}

// TestNormalizePerFilter: each row filter compares its column with the
// attribute's values as its own Normalize gives them, or as they are;
// another filter's Normalize on the same attribute does not apply.
func TestNormalizePerFilter(t *testing.T) {
	rw, ro := openDB(t)
	if _, err := rw.Exec(`CREATE TABLE codes (id INTEGER PRIMARY KEY, cc TEXT); INSERT INTO codes VALUES (1, 'de'), (2, 'fr')`); err != nil {
		t.Fatal(err)
	}
	toName := func(s string) string {
		if strings.EqualFold(s, "de") {
			return "Germany"
		}
		return ""
	}
	m := &analytics.Model{Views: []analytics.View{
		{Name: "bycode", SQL: "SELECT id, cc FROM main.codes", Filters: []analytics.RowFilter{{Attribute: "country", Column: "cc"}}},
		{Name: "byname", SQL: "SELECT id, name, country FROM main.customers", Filters: []analytics.RowFilter{{Attribute: "country", Column: "country", Normalize: toName}}},
		{Name: "byupper", SQL: "SELECT id, upper(cc) AS cc FROM main.codes", Filters: []analytics.RowFilter{{Attribute: "country", Column: "cc", Normalize: strings.ToUpper}}},
	}}
	tool, err := analytics.NewSQLTool(ro, m)
	if err != nil {
		t.Fatal(err)
	}
	u := chatstream.User{ExternalID: "x", Attributes: map[string]any{"country": "de"}}
	for q, want := range map[string]int64{
		"SELECT count(*) FROM bycode":  1,
		"SELECT count(*) FROM byname":  2,
		"SELECT count(*) FROM byupper": 1,
		"SELECT count(*) FROM bycode JOIN byname ON bycode.id = byname.id JOIN byupper ON byupper.id = bycode.id": 1,
	} {
		res, err := run(t, tool, u, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if got := res.Data[0][0].(int64); got != want {
			t.Errorf("%s = %d, want %d", q, got, want)
		}
	}
	if got := analytics.AccessOf(m, u).Values("country"); len(got) != 1 || got[0] != "de" {
		t.Errorf("Values(country) = %v, want the first filter's [de]", got)
	}
}

func TestResultShapeAndRowCap(t *testing.T) {
	tool, _ := newTool(t, analytics.WithRowLimit(2))
	vega := `{"mark":"bar","encoding":{"x":{"field":"country"}}}`
	in := analytics.SQLInput{
		SQLQuery: "SELECT country, created_at, amount FROM orders ORDER BY amount", QueryTitle: "T", Description: "D",
		UserRequest: "R", MemoryID: "m", VegaSpec: vega,
	}
	res, err := tool.Run(t.Context(), chatstream.Turn{User: internal}, in)
	if err != nil {
		t.Fatal(err)
	}
	if res.TotalRows != 3 || len(res.Data) != 2 {
		t.Errorf("rows %d of %d, want 2 of 3", len(res.Data), res.TotalRows)
	}
	want := []analytics.Column{{Name: "country", ColumnType: "string"}, {Name: "created_at", ColumnType: "time"}, {Name: "amount", ColumnType: "number"}}
	for i, c := range want {
		if res.Schema[i] != c {
			t.Errorf("schema[%d] = %v, want %v", i, res.Schema[i], c)
		}
	}
	if res.SQLQuery != in.SQLQuery || res.QueryTitle != "T" || res.Description != "D" || res.UserRequest != "R" || res.VegaSpec != vega || res.UUID == "" {
		t.Errorf("result %+v does not echo the input", res)
	}
	if res.Data[0][2] != 10.5 || res.Data[0][0] != "Germany" {
		t.Errorf("first row %v", res.Data[0])
	}
	again, _ := tool.Run(t.Context(), chatstream.Turn{User: internal}, in)
	other, _ := tool.Run(t.Context(), chatstream.Turn{User: german}, in)
	if again.UUID != res.UUID || other.UUID == res.UUID {
		t.Errorf("uuids %s, %s (same query), %s (other access)", res.UUID, again.UUID, other.UUID)
	}
	// The id is keyed with a secret of the tool: another tool, over the
	// same data, gives the same query and access another id, so the id
	// (which the model reads) cannot be recomputed for a guessed access.
	tool2, _ := newTool(t)
	if other2, err := tool2.Run(t.Context(), chatstream.Turn{User: german}, in); err != nil || other2.UUID == other.UUID {
		t.Errorf("another tool's uuid for the same query and access: %v %v, want another than %s", other2, err, other.UUID)
	}

	if _, err := tool.Run(t.Context(), chatstream.Turn{User: internal}, analytics.SQLInput{SQLQuery: "SELECT 1", VegaSpec: "{not json"}); err == nil {
		t.Error("a vegaSpec that is not JSON was accepted")
	}
	if _, err := tool.Run(t.Context(), chatstream.Turn{User: internal, ActiveBranchName: "dev-2", Branches: []string{"main"}}, analytics.SQLInput{SQLQuery: "SELECT 1"}); err == nil || err.Error() != `branch "dev-2" not found` {
		t.Errorf("unknown branch: %v", err)
	}
}

func TestTimeAndWorkBounds(t *testing.T) {
	const forever = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
	tool, _ := newTool(t, analytics.WithTimeout(50*time.Millisecond), analytics.WithMaxSteps(1<<40))
	_, err := run(t, tool, internal, forever)
	toolError(t, "timeout", err, "longer than 50ms")

	tool, _ = newTool(t, analytics.WithMaxSteps(100))
	_, err = run(t, tool, internal, forever)
	toolError(t, "work budget", err, "too much work")

	// The connection is usable afterwards.
	if _, err := run(t, tool, internal, "SELECT count(*) FROM orders"); err != nil {
		t.Errorf("after an interrupted query: %v", err)
	}

	// A cancelled caller gets ctx.Err(), not a tool error.
	ctx, cancel := context.WithCancel(t.Context())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	tool, _ = newTool(t, analytics.WithMaxSteps(1<<40))
	if _, err := tool.Run(ctx, chatstream.Turn{User: internal}, analytics.SQLInput{SQLQuery: forever}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
}

func TestCall(t *testing.T) {
	tool, _ := newTool(t)
	res, err := tool.Call(t.Context(), chatstream.Turn{User: german}, json.RawMessage(`{"sqlQuery":"SELECT count(*) AS n FROM customers","queryTitle":"n"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	var got map[string]any
	json.Unmarshal(b, &got)
	for _, k := range []string{"sqlQuery", "queryTitle", "description", "userRequest", "schema", "data", "totalRows", "uuid"} {
		if _, ok := got[k]; !ok {
			t.Errorf("result %s lacks %q", b, k)
		}
	}
	if _, err := tool.Call(t.Context(), chatstream.Turn{}, json.RawMessage(`{"query":"SELECT 1"}`)); err != nil {
		t.Errorf("query under \"query\": %v", err)
	}
	_, err = tool.Call(t.Context(), chatstream.Turn{}, json.RawMessage(`[1]`))
	toolError(t, "not an object", err, "not a valid JSON object")

	if tool.Name() != "svcSqlApi" || tool.Description() == "" {
		t.Errorf("name %q, description %q", tool.Name(), tool.Description())
	}
	props := tool.Parameters()["properties"].(map[string]any)
	for _, k := range []string{"sqlQuery", "queryTitle", "description", "userRequest", "memoryId", "vegaSpec"} {
		if _, ok := props[k]; !ok {
			t.Errorf("parameters lack %q", k)
		}
	}

	meta := analytics.NewMetaTool(model())
	mres, err := meta.Call(t.Context(), chatstream.Turn{}, json.RawMessage(`{"searchQuery":"amounts"}`))
	if err != nil {
		t.Fatal(err)
	}
	mr := mres.(analytics.MetaResult)
	if mr.SearchQuery != "amounts" || len(mr.Cubes) != 1 || mr.Cubes[0].Name != "orders" || mr.Cubes[0].Type != "view" || len(mr.Cubes[0].Members) != 1 {
		t.Errorf("svcMeta(amounts) = %+v", mr)
	}
	if meta.Name() != "svcMeta" || meta.Parameters()["required"].([]string)[0] != "searchQuery" {
		t.Errorf("svcMeta name/parameters: %q %v", meta.Name(), meta.Parameters())
	}
}

func TestDescribeAndUserContext(t *testing.T) {
	m := model()
	d := m.Describe()
	for _, s := range []string{"customers: Customers", "orders: Orders", "- amount (number, measure: sum): Amount"} {
		if !strings.Contains(d, s) {
			t.Errorf("Describe lacks %q:\n%s", s, d)
		}
	}
	// The model learns whether row filters apply, never the values,
	// groups, identifiers, e-mail or security context.
	secretive := chatstream.User{
		ExternalID: "hans-4711", Email: "hans@example.test", Groups: []string{"sales-emea"},
		Attributes:      map[string]any{"country": []any{"Germany", "de"}, "region_ids": []any{17.0}},
		SecurityContext: json.RawMessage(`{"tenant":"acme-internal-42"}`),
	}
	for _, u := range []chatstream.User{secretive, german, {ExternalID: "x"}} {
		c := m.UserContext(chatstream.Turn{User: u})
		if !strings.Contains(c, "Row filters apply to the views customers, orders") {
			t.Errorf("UserContext(%v) = %q, want it to say that row filters apply", u, c)
		}
		for _, leak := range []string{"Germany", `"de"`, "hans", "4711", "example.test", "sales", "17", "acme", "tenant", "attribute"} {
			if strings.Contains(c, leak) {
				t.Errorf("UserContext(%v) = %q names %q", u, c, leak)
			}
		}
	}
	if c := m.UserContext(chatstream.Turn{User: chatstream.User{ExternalID: "x"}}); c != m.UserContext(chatstream.Turn{User: german}) {
		t.Errorf("UserContext tells a user without a value (%q) from one with one (%q)", c, m.UserContext(chatstream.Turn{User: german}))
	}
	if c := m.UserContext(chatstream.Turn{User: internal}); !strings.Contains(c, "no row filters apply") || strings.Contains(c, "alice") {
		t.Errorf("UserContext(internal) = %q", c)
	}
}

// TestRefusesBadSetups: a database the tool cannot use is an error of
// NewSQLTool (the views are compiled against it); an invalid model is a
// configuration value, which Validate reports and the constructors panic
// on (TestInvalidOptionsPanic).
func TestRefusesBadSetups(t *testing.T) {
	_, ro := openDB(t)
	bad := model()
	bad.Views[0].SQL = "SELECT * FROM nowhere"
	if err := bad.Validate(); err != nil {
		t.Fatalf("Validate: %v; the SQL is checked against the database", err)
	}
	if _, err := analytics.NewSQLTool(ro, bad); err == nil {
		t.Error("a view over a missing table was accepted")
	}
	other := sql.OpenDB(otherConnector{})
	defer other.Close()
	if _, err := analytics.NewSQLTool(other, model()); err == nil || !strings.Contains(err.Error(), "SQLite") {
		t.Errorf("another driver: %v, want a refusal naming SQLite", err)
	}
	if err := model().Validate(); err != nil {
		t.Errorf("Validate of a valid model: %v", err)
	}
	twice := model()
	twice.Views[1].Name = "Customers"
	if err := twice.Validate(); err == nil || err.Error() != `analytics: invalid model: view names must be unique regardless of case, got "Customers" twice` {
		t.Errorf("Validate of a model with a view twice: %v", err)
	}
}

// TestInvalidOptionsPanic checks that every invalid option value panics,
// when its With function is called, with a message naming the package, the
// option and the value, and that the constructors panic on an invalid
// model or a nil db.
func TestInvalidOptionsPanic(t *testing.T) {
	_, ro := openDB(t)
	noSQL := model()
	noSQL.Views[1].SQL = " "
	badName := model()
	badName.Views[0].Name = "my view"
	badFilter := model()
	badFilter.Views[0].Filters = []analytics.RowFilter{{Attribute: "country"}}
	optiontest.Panics(t, map[string]func(){
		"analytics: WithRowLimit: count must be positive, got 0":                                                                                           func() { analytics.WithRowLimit(0) },
		"analytics: WithTimeout: duration must be positive, got -1s":                                                                                       func() { analytics.WithTimeout(-time.Second) },
		"analytics: WithMaxSteps: count must be positive, got 0":                                                                                           func() { analytics.WithMaxSteps(0) },
		"analytics: WithResultCache: count must be positive, got -1 (leave the option out for no cache)":                                                   func() { analytics.WithResultCache(-1) },
		"analytics: NewSQLTool: db must not be nil, got nil":                                                                                               func() { _, _ = analytics.NewSQLTool(nil, model()) },
		"analytics: NewSQLTool: invalid model: the model must not be nil, got nil":                                                                         func() { _, _ = analytics.NewSQLTool(ro, nil) },
		"analytics: NewSQLTool: invalid model: the model must have at least one view, got none":                                                            func() { _, _ = analytics.NewSQLTool(ro, &analytics.Model{}) },
		`analytics: NewSQLTool: invalid model: view "orders": SQL must not be empty, got " "`:                                                              func() { _, _ = analytics.NewSQLTool(ro, noSQL) },
		`analytics: NewMetaTool: invalid model: view name must be a plain SQL identifier, got "my view"`:                                                   func() { analytics.NewMetaTool(badName) },
		"analytics: NewMetaTool: invalid model: the model must have at least one view, got none":                                                           func() { analytics.NewMetaTool(&analytics.Model{}) },
		`analytics: NewMetaTool: invalid model: view "customers": a row filter must have an attribute and a column, got attribute "country" and column ""`: func() { analytics.NewMetaTool(badFilter) },
	})
}

// otherDriver stands for any database that is not SQLite.
type otherDriver struct{}

func (otherDriver) Open(string) (driver.Conn, error) { return otherConn{}, nil }

// otherConnector opens otherDriver without sql.Register, which panics when
// the test runs twice in one process (-count=2).
type otherConnector struct{}

func (otherConnector) Connect(context.Context) (driver.Conn, error) { return otherConn{}, nil }
func (otherConnector) Driver() driver.Driver                        { return otherDriver{} }

type otherConn struct{}

func (otherConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("no") }
func (otherConn) Close() error                        { return nil }
func (otherConn) Begin() (driver.Tx, error)           { return nil, errors.New("no") }

// FuzzSQLTool runs arbitrary SQL as a German user: its result is the
// result of the same query over a copy of the data without the French rows
// for a user without filters (row access holds whatever the query does),
// unless the query's result varies by itself (random, the clock) or it ran
// out of time in one of them; and nothing changes the data.
func FuzzSQLTool(f *testing.F) {
	for _, q := range []string{
		"SELECT * FROM customers", "SELECT name FROM main.customers", "WITH customers AS (SELECT * FROM main.customers) SELECT name FROM customers",
		"SELECT group_concat(customer) FROM orders", "DELETE FROM orders", "SELECT 1; DROP TABLE orders", "PRAGMA query_only=0",
		"SELECT * FROM customers WHERE name LIKE 'SECRET%'", "SELECT (SELECT name FROM main.customers LIMIT 1)",
		"SELECT#A0000000000000", "SELECT ?", "SELECT zeroblob(1000000000)",
	} {
		f.Add(q)
	}
	opts := []analytics.SQLOption{analytics.WithTimeout(200 * time.Millisecond), analytics.WithMaxSteps(2000)}
	tool, rw := newTool(f, opts...)
	germanOnly := germanOnlyTool(f, opts...)
	f.Fuzz(func(t *testing.T, q string) {
		res, err := tool.Run(context.Background(), chatstream.Turn{User: german}, analytics.SQLInput{SQLQuery: q})
		sameAsGermanRows(t, germanOnly, q, res, err)
		if err != nil {
			var te *analytics.ToolError
			if !errors.As(err, &te) {
				t.Fatalf("%q: %v is not a tool error", q, err)
			}
			return
		}
		var n int
		if err := rw.QueryRow("SELECT (SELECT count(*) FROM orders) + (SELECT count(*) FROM customers)").Scan(&n); err != nil || n != 6 {
			t.Fatalf("after %q: %d rows (%v), want 6", q, n, err)
		}
	})
}

// germanOnlyTool returns a tool over a copy of the data without the French
// rows.
func germanOnlyTool(t testing.TB, opts ...analytics.SQLOption) *analytics.SQLTool {
	t.Helper()
	tool, rw := newTool(t, opts...)
	if _, err := rw.Exec("DELETE FROM orders WHERE customer_id IN (SELECT id FROM customers WHERE country <> 'Germany'); DELETE FROM customers WHERE country <> 'Germany'"); err != nil {
		t.Fatal(err)
	}
	return tool
}

// varies matches a query whose result may vary by itself.
var varies = regexp.MustCompile(`(?i)random|now|current_|julianday|strftime|time|date|changes|last_insert`)

// sameAsGermanRows checks that res and err, what q gave the German user,
// are what q gives a user without filters over the German rows alone
// (germanOnly): row access holds whatever the query does. Queries whose
// result varies by itself, or that run out of time in either, are not
// compared.
func sameAsGermanRows(t *testing.T, germanOnly *analytics.SQLTool, q string, res *analytics.SQLResult, err error) {
	t.Helper()
	want, werr := germanOnly.Run(context.Background(), chatstream.Turn{User: internal}, analytics.SQLInput{SQLQuery: q})
	if varies.MatchString(q) || ranOut(err) || ranOut(werr) {
		return
	}
	switch {
	case (err == nil) != (werr == nil):
		t.Fatalf("%q: %v as the German user, %v over the German rows alone", q, err, werr)
	case err == nil && !sameRows(res, want):
		t.Fatalf("%q: %v as the German user, %v over the German rows alone", q, res.Data, want.Data)
	}
}

// ranOut reports whether err is the tool's refusal of a query that ran out
// of time or steps.
func ranOut(err error) bool {
	var te *analytics.ToolError
	return errors.As(err, &te) && (strings.Contains(te.Msg, "ran longer than") || strings.Contains(te.Msg, "too complex"))
}

// sameRows reports whether a and b have the same columns and the same rows
// in any order.
func sameRows(a, b *analytics.SQLResult) bool {
	key := func(r *analytics.SQLResult) ([]string, string) {
		rows := make([]string, len(r.Data))
		for i, row := range r.Data {
			j, _ := json.Marshal(row)
			rows[i] = string(j)
		}
		slices.Sort(rows)
		cols, _ := json.Marshal(r.Schema)
		return rows, string(cols)
	}
	ra, ca := key(a)
	rb, cb := key(b)
	return ca == cb && slices.Equal(ra, rb) && a.TotalRows == b.TotalRows
}

// Users with different access share the tool's connections without
// seeing each other's rows.
func TestConcurrentUsers(t *testing.T) {
	tool, _ := newTool(t)
	french := chatstream.User{ExternalID: "jean", Attributes: map[string]any{"country": "France"}}
	done := make(chan error, 8)
	for i := range 8 {
		go func() {
			u, want := german, int64(2)
			switch i % 3 {
			case 1:
				u, want = french, 1
			case 2:
				u, want = internal, 3
			}
			for range 50 {
				res, err := tool.Run(context.Background(), chatstream.Turn{User: u}, analytics.SQLInput{SQLQuery: "SELECT count(*) FROM customers"})
				if err != nil {
					done <- err
					return
				}
				if got := res.Data[0][0].(int64); got != want {
					done <- fmt.Errorf("user %d saw %d customers, want %d", i, got, want)
					return
				}
			}
			done <- nil
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// TestCallHidesSourceErrors: a failure of the database that is not a tool
// error (here a closed pool; on PostgreSQL a refused connection names the
// host, the role and the database) reaches the model and the user as "the
// query could not be run", with its cause for errors.Unwrap.
func TestCallHidesSourceErrors(t *testing.T) {
	_, ro := openDB(t)
	tool, err := analytics.NewSQLTool(ro, model())
	if err != nil {
		t.Fatal(err)
	}
	ro.Close()
	_, err = tool.Call(t.Context(), chatstream.Turn{User: german}, json.RawMessage(`{"sqlQuery":"SELECT 1"}`))
	if err == nil || err.Error() != "the query could not be run" || errors.Unwrap(err) == nil {
		t.Errorf("Call on a closed pool: %v (cause %v), want \"the query could not be run\" with its cause", err, errors.Unwrap(err))
	}
	// A tool error is shown as it is.
	tool2, _ := newTool(t)
	_, err = tool2.Call(t.Context(), chatstream.Turn{User: german}, json.RawMessage(`{"sqlQuery":"SELECT * FROM sqlite_master"}`))
	var te *analytics.ToolError
	if !errors.As(err, &te) {
		t.Errorf("a refused query through Call: %v, want the tool error", err)
	}
}

// TestSchemaWithoutValues checks the types of columns that have no value
// to read them from (no rows, or null in every one): as their definitions
// declare them, an expression's as string; the tool and the data query
// API agree.
func TestSchemaWithoutValues(t *testing.T) {
	tool, _ := newTool(t)
	const q = "SELECT country, amount, id, created_at, amount * 2 AS twice, NULL AS empty FROM orders WHERE amount < 0"
	want := []analytics.Column{{Name: "country", ColumnType: "string"}, {Name: "amount", ColumnType: "number"}, {Name: "id", ColumnType: "number"},
		{Name: "created_at", ColumnType: "time"}, {Name: "twice", ColumnType: "string"}, {Name: "empty", ColumnType: "string"}}
	res, err := tool.Run(t.Context(), chatstream.Turn{User: internal}, analytics.SQLInput{SQLQuery: q, QueryTitle: "T"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Data) != 0 || !slices.Equal(res.Schema, want) {
		t.Errorf("tool: %d rows, schema %v, want none and %v", len(res.Data), res.Schema, want)
	}
	rows, err := tool.QueryData(t.Context(), chatstream.Turn{User: internal}, q, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []analytics.Column
	for _, c := range rows.Columns() {
		got = append(got, analytics.Column(c))
	}
	if !slices.Equal(got, want) || rows.Next() {
		t.Errorf("data query: schema %v, want %v and no rows", got, want)
	}
}
