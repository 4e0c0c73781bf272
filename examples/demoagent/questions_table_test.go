package demoagent_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/analytics"
)

// TestQuestionTable asks realistic questions, including the ones the
// agent used to answer with a different question's answer, and checks
// that every part of each question is either honoured (in the SQL) or
// named in the answer as ignored or impossible.
func TestQuestionTable(t *testing.T) {
	a := newAgent(t)
	meta, sqlTool := []string{"svcMeta"}, []string{"svcSqlApi"}
	both := []string{"svcMeta", "svcSqlApi"}
	german := chatstream.User{ExternalID: "hans", Attributes: map[string]any{"country": "DE"}}
	nobody := chatstream.User{ExternalID: "nina"}

	tests := []struct {
		q    string
		user *chatstream.User // staff when nil
		// tools are the tool calls made, in order.
		tools []string
		// failed: the svcSqlApi call ends with an error result.
		failed bool
		// sqlHas and sqlNot are checked against the svcSqlApi input.
		sqlHas, sqlNot []string
		// rows is the expected totalRows (-1: not checked).
		rows int
		// says and notSays are checked against the answer text.
		says, notSays []string
	}{
		// The five questions of the issue.
		{q: "how many orders per week", tools: both, rows: 105,
			sqlHas: []string{"date(created_at, 'weekday 0', '-6 days') AS week", "COUNT(DISTINCT order_id)"},
			says:   []string{"Orders by week", "first 100"}, notSays: []string{"Total orders"}},
		{q: "top 5 products last month", tools: both, rows: 5,
			sqlHas: []string{"created_at >= '2025-11-01' AND created_at < '2025-12-01'", "LIMIT 5"},
			says:   []string{"Top 5 products by revenue in November 2025", "“last month” as November 2025"}},
		{q: "what is our profit margin by product?", tools: meta, rows: -1,
			says: []string{"cannot answer", "no profit and margin"}, notSays: []string{"Revenue by product", "leads with"}},
		{q: "which customers churned in 2025?", tools: meta, rows: -1,
			says: []string{"cannot answer", "no churn"}, notSays: []string{"Revenue by customer", "leads with"}},
		{q: "DROP TABLE orders; --", tools: sqlTool, failed: true, rows: -1,
			says: []string{"SQL statement", "did not run it", "only a single read-only SELECT"}, notSays: []string{"Total orders", "4,000"}},

		// Questions it answers in full.
		{q: "Revenue by country", tools: both, rows: 12, says: []string{"Revenue by country", "Total over all 12 countries"}, notSays: []string{"did not understand"}},
		{q: "Top 5 products by revenue", tools: both, rows: 5, sqlHas: []string{"LIMIT 5", "ORDER BY 2 DESC"}, notSays: []string{"did not understand"}},
		{q: "Average order value by category in 2025", tools: both, rows: 8,
			sqlHas: []string{"substr(created_at, 1, 4) IN ('2025')"}, notSays: []string{"did not understand"}},
		{q: "Total revenue in Germany", tools: both, rows: 1, sqlHas: []string{"country IN ('Germany')"}, notSays: []string{"did not understand"}},
		{q: "how many customers do we have?", tools: both, rows: 1,
			sqlHas: []string{"COUNT(DISTINCT customer_id)"}, says: []string{"Total ordering customers"}, notSays: []string{"did not understand"}},
		{q: "What were sales in December 2025 in the UK?", tools: both, rows: 1,
			sqlHas: []string{"country IN ('United Kingdom')", "created_at >= '2025-12-01' AND created_at < '2026-01-01'"}, notSays: []string{"did not understand"}},
		{q: "top 3 countries by revenue in electronics", tools: both, rows: 3,
			sqlHas: []string{"category IN ('Electronics')", "LIMIT 3"}, notSays: []string{"did not understand"}},
		{q: "how many orders per week in 2025", tools: both, rows: 53,
			sqlHas: []string{"'weekday 0'", "IN ('2025')"}, notSays: []string{"did not understand", "first 100"}},
		{q: "Which category sold the most units in Germany last quarter?", tools: both, rows: 8,
			sqlHas: []string{"SUM(quantity)", "country IN ('Germany')", "created_at >= '2025-07-01' AND created_at < '2025-10-01'"},
			says:   []string{"Q3 2025"}, notSays: []string{"did not understand"}},

		// Time windows: honoured, and said how they were read.
		{q: "revenue in Q3 2025", tools: both, rows: 1, sqlHas: []string{"created_at >= '2025-07-01' AND created_at < '2025-10-01'"}, says: []string{"Q3 2025"}},
		{q: "orders in March", tools: both, rows: 1, sqlHas: []string{"substr(created_at, 6, 2) IN ('03')"}, says: []string{"March (of every year)"}},
		{q: "sales last 30 days", tools: both, rows: 1, sqlHas: []string{"created_at >= '2025-12-02' AND created_at < '2026-01-01'"}, says: []string{"“last 30 days”"}},
		{q: "revenue yesterday", tools: both, rows: 1, sqlHas: []string{"created_at >= '2025-12-30' AND created_at < '2025-12-31'"}, says: []string{"“yesterday” as 30 December 2025"}},
		{q: "revenue this year vs last year", tools: both, rows: 2,
			sqlHas: []string{"substr(created_at, 1, 4) AS year", "IN ('2025', '2024')"}, says: []string{"“this year” as 2025", "“last year” as 2024"}},
		{q: "revenue in 2023", tools: both, rows: 0, sqlHas: []string{"IN ('2023')"}, says: []string{"no orders match", "1 January 2024 to 31 December 2025 only"}},

		// Filters, exclusions and breakdowns.
		{q: "revenue by country excluding Germany", tools: both, rows: 11, sqlHas: []string{"country NOT IN ('Germany')"}, notSays: []string{"Germany leads", "did not understand"}},
		{q: "revenue by category except books", tools: both, rows: 7, sqlHas: []string{"category NOT IN ('Books')"}, notSays: []string{"did not understand"}},
		{q: "revenue by country and month", tools: both, rows: 12, says: []string{"one thing at a time", "not by month"}},
		{q: "top 5 products in each category", tools: both, rows: 5, says: []string{"one thing at a time", "not by product"}},

		{q: "What's the revenue for Germany vs France?", tools: both, rows: 2,
			sqlHas: []string{"country AS country", "country IN ('Germany', 'France')"}, notSays: []string{"did not understand"}},
		{q: "revenue in Q1 and Q2 2025", tools: both, rows: 1,
			sqlHas: []string{"created_at >= '2025-04-01' AND created_at < '2025-07-01'"}, sqlNot: []string{"substr(created_at, 6, 2)"},
			says: []string{"one period at a time, so I used Q2 2025 and not January, February and March"}},

		// Parts it cannot honour are named.
		{q: "median order value by country", tools: both, rows: 12, says: []string{"cannot compute medians", "average order value"}},
		{q: "average price of products", tools: meta, rows: -1, says: []string{"do not compute prices"}, notSays: []string{"leads with"}},
		{q: "revenue in paris", tools: both, rows: 1, sqlNot: []string{"WHERE"}, says: []string{"did not understand “paris”", "ignores it"}},
		{q: "average order value for new customers", tools: both, rows: 789, says: []string{"“new”"}},
		{q: "which products have more than 100 units sold", tools: both, rows: 160, says: []string{"“more”", "“100”"}},
		{q: "revenue and profit by category", tools: both, rows: 8, says: []string{"no profit, so that part of your question is not answered"}},
		{q: "orders per hour", tools: meta, rows: -1, says: []string{"cannot break results down by hour"}, notSays: []string{"Total orders"}},
		{q: "orders by weekday", tools: meta, rows: -1, says: []string{"cannot break results down by weekday"}},
		{q: "what's the weather like?", rows: -1, says: []string{"For example"}},
		{q: "hello", rows: -1, says: []string{"For example"}},

		// SQL typed into the chat goes to svcSqlApi unchanged.
		{q: "select country, count(*) from orders group by 1", tools: sqlTool, rows: 12, says: []string{"returned 12 rows", "| country | count(*) |"}},
		{q: "SELECT * FROM main.customers", tools: sqlTool, failed: true, rows: -1, says: []string{"did not run it", "only the views of the data model"}},
		{q: "revenue by country'; DROP TABLE orders; --", tools: sqlTool, failed: true, rows: -1, says: []string{"did not run it"}, notSays: []string{"Revenue by country:"}},

		// Row-level security: fails closed, and says why.
		{q: "revenue by country", user: &german, tools: both, rows: 1, says: []string{"limited to your country: Germany"}},
		{q: "revenue by country", user: &nobody, tools: both, rows: 0, says: []string{"no rows", "no country assigned"}},
		{q: "total revenue", user: &nobody, tools: both, rows: 0, says: []string{"no orders match", "no country assigned"}},
	}
	if len(tests) < 30 {
		t.Fatalf("the table has %d questions, want at least 30", len(tests))
	}
	for _, tt := range tests {
		user := staff
		if tt.user != nil {
			user = *tt.user
		}
		name := tt.q
		if tt.user != nil {
			name += " as " + user.ExternalID
		}
		t.Run(name, func(t *testing.T) {
			r := ask(t, a, chatstream.Turn{Input: tt.q, User: user})
			tools := r.tools()
			if got := toolNames(tools); !slices.Equal(got, tt.tools) {
				t.Fatalf("tool calls = %v, want %v", got, tt.tools)
			}
			answer := r.content()
			for _, s := range tt.says {
				if !strings.Contains(answer, s) {
					t.Errorf("answer lacks %q:\n%s", s, answer)
				}
			}
			for _, s := range tt.notSays {
				if strings.Contains(answer, s) {
					t.Errorf("answer has %q:\n%s", s, answer)
				}
			}
			i := slices.IndexFunc(tools, func(e *event) bool { return e.tool == "svcSqlApi" })
			if i < 0 {
				return
			}
			call := tools[i]
			if call.failed != tt.failed {
				t.Fatalf("svcSqlApi failed = %v, want %v: %s", call.failed, tt.failed, call.result)
			}
			var in analytics.SQLInput
			if err := json.Unmarshal([]byte(call.input), &in); err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.sqlHas {
				if !strings.Contains(in.SQLQuery, s) {
					t.Errorf("SQL lacks %q:\n%s", s, in.SQLQuery)
				}
			}
			for _, s := range tt.sqlNot {
				if strings.Contains(in.SQLQuery, s) {
					t.Errorf("SQL has %q:\n%s", s, in.SQLQuery)
				}
			}
			if tt.failed || tt.rows < 0 {
				return
			}
			var res analytics.SQLResult
			if err := json.Unmarshal([]byte(call.result), &res); err != nil {
				t.Fatal(err)
			}
			if res.TotalRows != tt.rows {
				t.Errorf("totalRows = %d, want %d", res.TotalRows, tt.rows)
			}
		})
	}

	// The data is intact after the DROP TABLE attempts.
	r := ask(t, a, chatstream.Turn{Input: "total orders", User: staff})
	if c := r.content(); !strings.Contains(c, "Total orders: 4,000") {
		t.Errorf("after the DROP attempts: %q, want 4,000 orders", c)
	}
}
