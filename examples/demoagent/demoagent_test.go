package demoagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/analytics"
	"github.com/embedkit/embedkit/examples/demoagent"
)

// staff is an internal user: row-level security lets them see every row.
var staff = chatstream.User{InternalID: "alice@acme.test"}

// newAgent returns an agent without pauses, closed at the end of the test.
func newAgent(t testing.TB, opts ...demoagent.Option) *demoagent.Agent {
	t.Helper()
	a, err := demoagent.New(append([]demoagent.Option{demoagent.WithDelay(0)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return a
}

// ask runs one turn and checks the Emitter contract.
func ask(t *testing.T, a *demoagent.Agent, turn chatstream.Turn) *recorder {
	t.Helper()
	r := &recorder{}
	if err := a.Answer(t.Context(), turn, r); err != nil {
		t.Fatalf("Answer(%q): %v", turn.Input, err)
	}
	r.end()
	for _, e := range r.errs {
		t.Errorf("Answer(%q): %s", turn.Input, e)
	}
	for _, e := range r.tools() {
		if !e.ended {
			t.Errorf("Answer(%q): tool call %s never ended", turn.Input, e.tool)
		}
	}
	return r
}

// sqlResult runs a question and returns the svcSqlApi input and result.
func sqlResult(t *testing.T, a *demoagent.Agent, turn chatstream.Turn) (analytics.SQLInput, analytics.SQLResult, *recorder) {
	t.Helper()
	r := ask(t, a, turn)
	tools := r.tools()
	if len(tools) != 2 || tools[0].tool != demoagent.ToolMeta || tools[1].tool != demoagent.ToolSQL {
		t.Fatalf("Answer(%q): tool calls = %v, want svcMeta then svcSqlApi", turn.Input, toolNames(tools))
	}
	if tools[1].failed {
		t.Fatalf("Answer(%q): svcSqlApi failed: %s", turn.Input, tools[1].result)
	}
	var in analytics.SQLInput
	if err := json.Unmarshal([]byte(tools[1].input), &in); err != nil {
		t.Fatalf("svcSqlApi input: %v", err)
	}
	var res analytics.SQLResult
	if err := json.Unmarshal([]byte(tools[1].result), &res); err != nil {
		t.Fatalf("svcSqlApi result: %v", err)
	}
	return in, res, r
}

func toolNames(es []*event) []string {
	var names []string
	for _, e := range es {
		names = append(names, e.tool)
	}
	return names
}

// independent runs query on the agent's database and returns label → value.
func independent(t *testing.T, a *demoagent.Agent, query string, args ...any) map[string]float64 {
	t.Helper()
	rows, err := demoagent.DBOf(a).QueryContext(t.Context(), query, args...)
	if err != nil {
		t.Fatalf("independent query: %v", err)
	}
	defer rows.Close()
	got := map[string]float64{}
	for rows.Next() {
		var k string
		var v float64
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatalf("scan: %v", err)
		}
		got[k] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// The revenue per country is computed independently of the agent's SQL.
const revenueByCountrySQL = `
SELECT c.country, SUM(l.quantity * l.price)
FROM customers c, orders o, order_lines l
WHERE o.customer_id = c.id AND l.order_id = o.id
GROUP BY c.country`

func TestFlowOfAnsweredQuestion(t *testing.T) {
	a := newAgent(t)
	r := ask(t, a, chatstream.Turn{User: staff, Input: "Revenue by country"})
	var kinds []string
	for _, e := range r.events {
		if n := len(kinds); n > 0 && kinds[n-1] == e.kind && e.kind == "content" {
			continue
		}
		kinds = append(kinds, e.kind)
	}
	want := []string{"thinking", "content", "tool", "tool", "content"}
	if !reflect.DeepEqual(kinds, want) {
		t.Errorf("event kinds = %v, want %v", kinds, want)
	}
	if n := r.count("content"); n < 10 {
		t.Errorf("content pieces = %d, want the answer streamed in many pieces", n)
	}

	var meta analytics.MetaResult
	tools := r.tools()
	if err := json.Unmarshal([]byte(tools[0].result), &meta); err != nil {
		t.Fatal(err)
	}
	var metaIn analytics.MetaInput
	if err := json.Unmarshal([]byte(tools[0].input), &metaIn); err != nil {
		t.Fatal(err)
	}
	if meta.SearchQuery != metaIn.SearchQuery || !strings.Contains(strings.ToLower(metaIn.SearchQuery), "revenue") {
		t.Errorf("svcMeta searchQuery in %q, out %q; want the same, naming revenue", metaIn.SearchQuery, meta.SearchQuery)
	}
	members := map[string]analytics.Member{}
	for _, c := range meta.Cubes {
		if c.Type != "view" {
			t.Errorf("cube %s type = %q, want view", c.Name, c.Type)
		}
		for _, m := range c.Members {
			if !strings.HasPrefix(m.Name, c.Name+".") {
				t.Errorf("member %s of cube %s: name not <entity>.<member>", m.Name, c.Name)
			}
			members[m.Name] = m
		}
	}
	if m := members["orders.revenue"]; m.Type != "number" || m.AggType != "sum" {
		t.Errorf("orders.revenue = %+v, want a number with aggType sum", m)
	}
	if m := members["orders.country"]; m.Type != "string" {
		t.Errorf("orders.country = %+v, want a string", m)
	}
}

func TestRevenueByCountryMatchesIndependentSQL(t *testing.T) {
	a := newAgent(t)
	in, res, r := sqlResult(t, a, chatstream.Turn{User: staff, Input: "Revenue by country"})

	want := independent(t, a, revenueByCountrySQL)
	if len(res.Data) != len(want) || res.TotalRows != len(want) {
		t.Fatalf("rows = %d, totalRows = %d, want %d", len(res.Data), res.TotalRows, len(want))
	}
	wantSchema := []analytics.Column{{Name: "country", ColumnType: "string"}, {Name: "revenue", ColumnType: "number"}}
	if !reflect.DeepEqual(res.Schema, wantSchema) {
		t.Errorf("schema = %v, want %v", res.Schema, wantSchema)
	}
	prev := math.Inf(1)
	for _, row := range res.Data {
		country, _ := row[0].(string)
		v, _ := row[1].(float64)
		if math.Abs(v-want[country]) > 0.006 {
			t.Errorf("revenue of %q = %v, want %.2f", country, v, want[country])
		}
		if v > prev {
			t.Errorf("rows not ordered by revenue, highest first: %v after %v", v, prev)
		}
		prev = v
	}
	top, _ := res.Data[0][0].(string)
	if c := r.content(); !strings.Contains(c, top) || !strings.Contains(c, "Revenue by country") {
		t.Errorf("answer = %q, want it to name the leader %q", c, top)
	}
	if in.SQLQuery != res.SQLQuery || in.QueryTitle != res.QueryTitle || in.VegaSpec != res.VegaSpec || res.UserRequest != "Revenue by country" {
		t.Errorf("result does not echo the input: in %+v, result %+v", in, res)
	}
	if in.UserRequest != "Revenue by country" {
		t.Errorf("userRequest = %q, want the question", in.UserRequest)
	}
	if res.UUID == "" {
		t.Error("uuid is empty")
	}
}

func TestQuestions(t *testing.T) {
	a := newAgent(t)
	tests := []struct {
		question string
		columns  []string
		rows     int // -1: any number above 1
	}{
		{"Top 5 products by revenue", []string{"product", "revenue"}, 5},
		{"top 3 categories by quantity", []string{"category", "quantity"}, 3},
		{"Top ten customers by orders", []string{"customer", "orders"}, 10},
		{"orders per month", []string{"month", "orders"}, 24},
		{"Revenue by category", []string{"category", "revenue"}, 8},
		{"How many customers per country?", []string{"country", "customers"}, 12},
		{"average order value by category in 2025", []string{"category", "average_order_value"}, 8},
		{"quarterly revenue", []string{"quarter", "revenue"}, 8},
		{"revenue per year", []string{"year", "revenue"}, 2},
		{"Which country has the most orders?", []string{"country", "orders"}, 12},
		{"best selling products in Books", []string{"product", "quantity"}, 20},
		{"total revenue", []string{"revenue"}, 1},
		{"How many orders in Germany in 2024?", []string{"orders"}, 1},
		{"bottom 2 countries by revenue", []string{"country", "revenue"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.question, func(t *testing.T) {
			_, res, _ := sqlResult(t, a, chatstream.Turn{User: staff, Input: tt.question})
			var cols []string
			for _, c := range res.Schema {
				cols = append(cols, c.Name)
			}
			if !reflect.DeepEqual(cols, tt.columns) {
				t.Errorf("columns = %v, want %v", cols, tt.columns)
			}
			if len(res.Data) != tt.rows || res.TotalRows != tt.rows {
				t.Errorf("rows = %d, totalRows = %d, want %d", len(res.Data), res.TotalRows, tt.rows)
			}
			for _, row := range res.Data {
				if len(row) != len(res.Schema) {
					t.Fatalf("row %v has %d values, want %d", row, len(row), len(res.Schema))
				}
			}
		})
	}
}

func TestTopNIsTheHighest(t *testing.T) {
	a := newAgent(t)
	_, top, _ := sqlResult(t, a, chatstream.Turn{User: staff, Input: "top 5 products by revenue"})
	_, all, _ := sqlResult(t, a, chatstream.Turn{User: staff, Input: "revenue by product"})
	if !reflect.DeepEqual(top.Data, all.Data[:5]) {
		t.Errorf("top 5 = %v, want the first 5 of all products %v", top.Data, all.Data[:5])
	}
	_, bottom, _ := sqlResult(t, a, chatstream.Turn{User: staff, Input: "bottom 2 countries by revenue"})
	_, countries, _ := sqlResult(t, a, chatstream.Turn{User: staff, Input: "revenue by country"})
	n := len(countries.Data)
	if bottom.Data[0][0] != countries.Data[n-1][0] || bottom.Data[1][0] != countries.Data[n-2][0] {
		t.Errorf("bottom 2 = %v, want the last two of %v", bottom.Data, countries.Data)
	}
}

func TestRowLimit(t *testing.T) {
	a := newAgent(t)
	if n := a.Size().Products; n < 150 {
		t.Fatalf("products = %d, want at least 150 so a breakdown exceeds the row limit", n)
	}
	_, res, r := sqlResult(t, a, chatstream.Turn{User: staff, Input: "revenue by product"})
	sold := independent(t, a, "SELECT p.name, COUNT(*) FROM products p JOIN order_lines l ON l.product_id = p.id GROUP BY p.name")
	if len(res.Data) != demoagent.DefaultRowLimit || res.TotalRows != len(sold) || res.TotalRows <= demoagent.DefaultRowLimit {
		t.Errorf("rows = %d, totalRows = %d; want %d rows of %d", len(res.Data), res.TotalRows, demoagent.DefaultRowLimit, len(sold))
	}
	if !strings.Contains(r.content(), "first 100") {
		t.Errorf("answer = %q, want it to say only the first 100 rows are included", r.content())
	}

	days := independent(t, a, "SELECT date(created_at), COUNT(*) FROM orders GROUP BY 1")
	_, res, _ = sqlResult(t, a, chatstream.Turn{User: staff, Input: "daily orders"})
	if len(res.Data) != 100 || res.TotalRows != len(days) {
		t.Errorf("daily orders: rows = %d, totalRows = %d; want 100 of %d", len(res.Data), res.TotalRows, len(days))
	}

	small := newAgent(t, demoagent.WithRowLimit(7))
	_, res, _ = sqlResult(t, small, chatstream.Turn{User: staff, Input: "revenue by product"})
	if len(res.Data) != 7 || res.TotalRows != len(sold) {
		t.Errorf("WithRowLimit(7): rows = %d, totalRows = %d; want 7 of %d", len(res.Data), res.TotalRows, len(sold))
	}
}

func TestCountryAttributeFiltersRows(t *testing.T) {
	a := newAgent(t)
	want := independent(t, a, revenueByCountrySQL)
	user := func(v any) chatstream.User {
		return chatstream.User{ExternalID: "u1", Attributes: map[string]any{"country": v}}
	}
	tests := []struct {
		name      string
		attribute any
		countries []string
	}{
		{"one country by name", "Germany", []string{"Germany"}},
		{"ISO codes and names, any case", []string{"de", "France"}, []string{"Germany", "France"}},
		{"unknown country sees nothing", "Atlantis", nil},
		{"quotes are data, not SQL", "Germany') OR 1=1 --", nil},
		{"wrong attribute type sees nothing", 3.0, nil},
		{"empty list sees nothing", []string{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, res, r := sqlResult(t, a, chatstream.Turn{Input: "revenue by country", User: user(tt.attribute)})
			got := map[string]float64{}
			for _, row := range res.Data {
				got[row[0].(string)] = row[1].(float64)
			}
			if len(got) != len(tt.countries) || res.TotalRows != len(tt.countries) {
				t.Fatalf("countries = %v (totalRows %d), want %v", got, res.TotalRows, tt.countries)
			}
			for _, c := range tt.countries {
				if math.Abs(got[c]-want[c]) > 0.006 {
					t.Errorf("revenue of %s = %v, want %.2f", c, got[c], want[c])
				}
			}
			if len(tt.countries) == 0 && !strings.Contains(r.content(), "no rows") {
				t.Errorf("answer = %q, want it to say there are no rows", r.content())
			}
		})
	}

	t.Run("total is the country's total", func(t *testing.T) {
		_, res, r := sqlResult(t, a, chatstream.Turn{Input: "total revenue", User: user("Japan")})
		if got := res.Data[0][0].(float64); math.Abs(got-want["Japan"]) > 0.006 {
			t.Errorf("total revenue for a Japan user = %v, want %.2f", got, want["Japan"])
		}
		if !strings.Contains(r.content(), "limited to your country: Japan") {
			t.Errorf("answer = %q, want it to name the row filter", r.content())
		}
	})
	t.Run("no attribute sees nothing, and the answer says why", func(t *testing.T) {
		_, res, r := sqlResult(t, a, chatstream.Turn{Input: "revenue by country", User: chatstream.User{ExternalID: "u2"}})
		if res.TotalRows != 0 || len(res.Data) != 0 {
			t.Errorf("totalRows = %d, rows %v; want none", res.TotalRows, res.Data)
		}
		if c := r.content(); !strings.Contains(c, "no country assigned") {
			t.Errorf("answer = %q, want it to say the user has no country", c)
		}
	})
	t.Run("an internal user sees everything", func(t *testing.T) {
		_, res, r := sqlResult(t, a, chatstream.Turn{Input: "revenue by country", User: staff})
		if res.TotalRows != len(want) {
			t.Errorf("totalRows = %d, want %d", res.TotalRows, len(want))
		}
		if c := r.content(); strings.Contains(c, "limited to") || strings.Contains(c, "no country") {
			t.Errorf("answer = %q mentions a row filter", c)
		}
	})
	t.Run("the filtered result has its own uuid", func(t *testing.T) {
		_, all, _ := sqlResult(t, a, chatstream.Turn{User: staff, Input: "total revenue"})
		_, de, _ := sqlResult(t, a, chatstream.Turn{Input: "total revenue", User: user("DE")})
		if all.UUID == de.UUID {
			t.Errorf("uuid %s is the same with and without a row filter", all.UUID)
		}
	})
}

func TestBranches(t *testing.T) {
	a := newAgent(t)
	branches := []string{"main", "dev-1"}

	r := ask(t, a, chatstream.Turn{User: staff, Input: "revenue by country", ActiveBranchName: "nope", Branches: branches})
	tools := r.tools()
	if len(tools) != 2 || tools[1].tool != demoagent.ToolSQL {
		t.Fatalf("tool calls = %v, want svcMeta and svcSqlApi", toolNames(tools))
	}
	var fail struct{ Error string }
	if err := json.Unmarshal([]byte(tools[1].result), &fail); err != nil || !tools[1].failed {
		t.Fatalf("svcSqlApi result = %s, want a failure", tools[1].result)
	}
	if want := `branch "nope" not found`; fail.Error != want {
		t.Errorf("error = %q, want %q", fail.Error, want)
	}
	if c := r.content(); !strings.Contains(c, `branch "nope" is unknown`) {
		t.Errorf("answer = %q, want it to say the branch is unknown", c)
	}

	for _, b := range []string{"dev-1", "main", ""} {
		sqlResult(t, a, chatstream.Turn{User: staff, Input: "revenue by country", ActiveBranchName: b, Branches: branches})
	}
	// No branches known: only the main branch ("") can be queried.
	r = ask(t, a, chatstream.Turn{User: staff, Input: "total revenue", ActiveBranchName: "dev-1"})
	if tools := r.tools(); len(tools) != 2 || !tools[1].failed {
		t.Errorf("branch dev-1 with no known branches: tool calls %v, want a failed svcSqlApi", toolNames(tools))
	}
}

func TestUnknownQuestionGetsHelp(t *testing.T) {
	a := newAgent(t)
	for _, q := range []string{"What's the weather like?", "hello", "", "tell me a joke about 2024"} {
		r := ask(t, a, chatstream.Turn{User: staff, Input: q})
		if n := len(r.tools()); n != 0 {
			t.Errorf("%q: %d tool calls, want none", q, n)
		}
		c := r.content()
		for _, ex := range demoagent.ExampleQuestions() {
			if !strings.Contains(c, ex) {
				t.Errorf("%q: help text %q does not list %q", q, c, ex)
			}
		}
	}
}

func TestFollowUp(t *testing.T) {
	a := newAgent(t)
	first := chatstream.Turn{User: staff, Input: "revenue in Germany by category"}
	in1, res1, _ := sqlResult(t, a, first)
	result := `{"uuid":"` + res1.UUID + `"}`
	history := []chatstream.Message{
		{ID: "m1", Role: chatstream.RoleUser, Content: first.Input},
		{ID: "m2", Role: chatstream.RoleAssistant, ToolCall: &chatstream.ToolInfo{Name: demoagent.ToolSQL, Input: "{}", Result: &result}},
		{ID: "m3", Role: chatstream.RoleAssistant, Content: "Revenue by category in Germany: ..."},
	}
	in, res, _ := sqlResult(t, a, chatstream.Turn{User: staff, Input: "and by month?", History: history})
	if got := []string{res.Schema[0].Name, res.Schema[1].Name}; !reflect.DeepEqual(got, []string{"month", "revenue"}) {
		t.Errorf("follow-up columns = %v, want [month revenue]", got)
	}
	if !strings.Contains(in.SQLQuery, "'Germany'") {
		t.Errorf("follow-up SQL %q lost the Germany filter of %q", in.SQLQuery, in1.SQLQuery)
	}
	if in.MemoryID != res1.UUID {
		t.Errorf("memoryId = %q, want the earlier result %q", in.MemoryID, res1.UUID)
	}

	_, res, _ = sqlResult(t, a, chatstream.Turn{User: staff, Input: "what about orders?", History: history})
	if got := []string{res.Schema[0].Name, res.Schema[1].Name}; !reflect.DeepEqual(got, []string{"category", "orders"}) {
		t.Errorf("follow-up columns = %v, want [category orders]", got)
	}
}

func TestVegaSpec(t *testing.T) {
	a := newAgent(t)
	tests := []struct {
		question, mark, xType string
	}{
		{"revenue by country", "bar", "nominal"},
		{"top 3 categories by quantity", "bar", "nominal"},
		{"orders per month", "line", "temporal"},
		{"daily revenue", "line", "temporal"},
	}
	for _, tt := range tests {
		t.Run(tt.question, func(t *testing.T) {
			in, res, _ := sqlResult(t, a, chatstream.Turn{User: staff, Input: tt.question})
			if in.VegaSpec == "" || in.VegaSpec != res.VegaSpec {
				t.Fatalf("vegaSpec input %q, result %q; want the same, non-empty", in.VegaSpec, res.VegaSpec)
			}
			var spec map[string]any
			if err := json.Unmarshal([]byte(res.VegaSpec), &spec); err != nil {
				t.Fatalf("vegaSpec is not JSON: %v", err)
			}
			if s := spec["$schema"]; s != "https://vega.github.io/schema/vega-lite/v5.json" {
				t.Errorf("$schema = %v, want Vega-Lite v5", s)
			}
			if _, ok := spec["data"]; ok {
				t.Error("vegaSpec has data; the client adds it")
			}
			mark := spec["mark"]
			if m, ok := mark.(map[string]any); ok {
				mark = m["type"]
			}
			if mark != tt.mark {
				t.Errorf("mark = %v, want %s", mark, tt.mark)
			}
			enc, _ := spec["encoding"].(map[string]any)
			x, _ := enc["x"].(map[string]any)
			y, _ := enc["y"].(map[string]any)
			if x["field"] != res.Schema[0].Name || x["type"] != tt.xType {
				t.Errorf("x = %v, want field %s of type %s", x, res.Schema[0].Name, tt.xType)
			}
			if y["field"] != res.Schema[1].Name || y["type"] != "quantitative" {
				t.Errorf("y = %v, want field %s, quantitative", y, res.Schema[1].Name)
			}
		})
	}
}

func TestCancellationStopsPromptly(t *testing.T) {
	a := newAgent(t, demoagent.WithDelay(time.Hour))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var cancelled bool
	r := &recorder{onEvent: func(r *recorder, e *event) {
		if e.kind == "content" && !cancelled {
			cancelled = true
			cancel()
		}
	}}
	done := make(chan error, 1)
	go func() { done <- a.Answer(ctx, chatstream.Turn{User: staff, Input: "revenue by country"}, r) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Answer = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Answer did not return after ctx was cancelled")
	}
	if n := r.count("content"); n != 1 {
		t.Errorf("content pieces = %d, want 1: nothing after the cancel", n)
	}

	// Cancelled before the start: no SQL is run.
	r = &recorder{}
	if err := a.Answer(ctx, chatstream.Turn{User: staff, Input: "revenue by country"}, r); !errors.Is(err, context.Canceled) {
		t.Errorf("Answer with a done ctx = %v, want context.Canceled", err)
	}
	if tools := r.tools(); len(tools) > 0 {
		t.Errorf("tool calls with a done ctx: %v", toolNames(tools))
	}
}

func TestTurnOverStopsAgent(t *testing.T) {
	a := newAgent(t)
	r := &recorder{onEvent: func(r *recorder, e *event) {
		if e.kind == "tool" {
			r.end()
		}
	}}
	if err := a.Answer(t.Context(), chatstream.Turn{User: staff, Input: "revenue by country"}, r); !errors.Is(err, errTurnOver) {
		t.Errorf("Answer = %v, want the emitter's error", err)
	}
}

func TestPacing(t *testing.T) {
	const delay = 15 * time.Millisecond
	// Made outside the bubble: the database's goroutines are not the
	// bubble's. The help text below does not query it.
	a := newAgent(t, demoagent.WithDelay(delay))
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		r := ask(t, a, chatstream.Turn{User: staff, Input: "hello"})
		n := r.count("content")
		if got, want := time.Since(start), time.Duration(n-1)*delay; got != want {
			t.Errorf("%d pieces took %v, want %v: one delay between two pieces", n, got, want)
		}
	})
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	a, err := demoagent.New()
	if err != nil {
		t.Fatal(err)
	}
	ask(t, a, chatstream.Turn{User: staff, Input: "orders per month"})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if runtime.NumGoroutine() <= before {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("goroutines: %d before New, %d after Close", before, runtime.NumGoroutine())
}

func TestDeterministicAndConcurrent(t *testing.T) {
	a, b := newAgent(t), newAgent(t)
	if a.Size() != b.Size() {
		t.Fatalf("sizes differ: %+v, %+v", a.Size(), b.Size())
	}
	s := a.Size()
	if s.Customers < 500 || s.Orders < 2000 || s.OrderLines < 5000 {
		t.Errorf("data set %+v, want several thousand rows", s)
	}
	questions := []string{"revenue by country", "orders per month", "top 5 products by revenue", "hello"}
	want := map[string]*recorder{}
	for _, q := range questions {
		want[q] = ask(t, a, chatstream.Turn{User: staff, Input: q})
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			q := questions[i%len(questions)]
			r := &recorder{}
			if err := b.Answer(t.Context(), chatstream.Turn{User: staff, Input: q}, r); err != nil {
				t.Errorf("Answer(%q): %v", q, err)
				return
			}
			if !reflect.DeepEqual(withoutIDs(r.events), withoutIDs(want[q].events)) {
				t.Errorf("Answer(%q) differs between two agents", q)
			}
		})
	}
	wg.Wait()
}

// withoutIDs returns events with the results' uuids blanked: each agent's
// SQL tool keys them with a secret of its own.
func withoutIDs(events []*event) []event {
	out := make([]event, len(events))
	for i, e := range events {
		out[i] = *e
		out[i].result = resultID.ReplaceAllString(e.result, `"uuid":""`)
	}
	return out
}

var resultID = regexp.MustCompile(`"uuid":"[^"]*"`)

func TestClose(t *testing.T) {
	a, err := demoagent.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := a.Answer(t.Context(), chatstream.Turn{User: staff, Input: "revenue by country"}, &recorder{}); !errors.Is(err, demoagent.ErrClosed) {
		t.Errorf("Answer after Close = %v, want ErrClosed", err)
	}
}

// BenchmarkAnswer answers "revenue by country" without pauses, over all
// rows and for a user limited to two countries.
func BenchmarkAnswer(b *testing.B) {
	a := newAgent(b)
	for _, bb := range []struct {
		name string
		user chatstream.User
	}{
		{"all rows", staff},
		{"row filter", chatstream.User{ExternalID: "u", Attributes: map[string]any{"country": []string{"Germany", "France"}}}},
	} {
		b.Run(bb.name, func(b *testing.B) {
			turn := chatstream.Turn{Input: "revenue by country", User: bb.user}
			b.ReportAllocs()
			start := cpuTime()
			for b.Loop() {
				if err := a.Answer(b.Context(), turn, &recorder{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the CPU time the process has used (user and system), which
// on a shared machine says more about cost than the wall clock does.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkAnswerParallel(b *testing.B) {
	a := newAgent(b)
	turn := chatstream.Turn{User: staff, Input: "top 5 products by revenue"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := a.Answer(context.Background(), turn, &recorder{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkNew(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		a, err := demoagent.New()
		if err != nil {
			b.Fatal(err)
		}
		a.Close()
	}
}

// BenchmarkSQLWithoutCache runs the SQL of "revenue by country" through a
// svcSqlApi executor without the agent's result cache: what a question
// costs the first time it is asked.
func BenchmarkSQLWithoutCache(b *testing.B) {
	a := newAgent(b)
	tool, err := analytics.NewSQLTool(demoagent.DBOf(a), demoagent.Model())
	if err != nil {
		b.Fatal(err)
	}
	in := analytics.SQLInput{SQLQuery: "SELECT country, ROUND(SUM(quantity * price), 2) AS revenue FROM orders GROUP BY 1 ORDER BY 2 DESC"}
	for _, bb := range []struct {
		name string
		user chatstream.User
	}{
		{"all rows", staff},
		{"row filter", chatstream.User{ExternalID: "u", Attributes: map[string]any{"country": "Germany"}}},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			start := cpuTime()
			for b.Loop() {
				if _, err := tool.Run(b.Context(), chatstream.Turn{User: bb.user}, in); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}
