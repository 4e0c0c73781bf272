package demoagent

import (
	"reflect"
	"strings"
	"testing"
)

func TestUnderstand(t *testing.T) {
	tests := []struct {
		question   string
		metric     string // "" when not understood
		dim        string
		top        int
		ascending  bool
		countries  []string
		categories []string
		years      []string
	}{
		{question: "Revenue by country", metric: "revenue", dim: "country"},
		{question: "sales per category", metric: "revenue", dim: "category"},
		{question: "revenue by product category", metric: "revenue", dim: "category"},
		{question: "Orders per month", metric: "orders", dim: "month"},
		{question: "monthly orders", metric: "orders", dim: "month"},
		{question: "revenue over time", metric: "revenue", dim: "month"},
		{question: "Top 5 products by revenue", metric: "revenue", dim: "product", top: 5},
		{question: "top 3 categories by quantity", metric: "quantity", dim: "category", top: 3},
		{question: "top customers", metric: "revenue", dim: "customer", top: 10},
		{question: "worst 4 products by units", metric: "quantity", dim: "product", top: 4, ascending: true},
		{question: "best selling products", metric: "quantity", dim: "product"},
		{question: "which country has the most orders", metric: "orders", dim: "country"},
		{question: "how many customers per country", metric: "customers", dim: "country"},
		{question: "number of products sold per category", metric: "products", dim: "category"},
		{question: "average order value by category in 2025", metric: "average_order_value", dim: "category", years: []string{"2025"}},
		{question: "Total revenue in Germany", metric: "revenue", countries: []string{"Germany"}},
		{question: "orders in the UK and the USA in 2024", metric: "orders", dim: "country", countries: []string{"United States", "United Kingdom"}, years: []string{"2024"}},
		{question: "quarterly revenue for electronics", metric: "revenue", dim: "quarter", categories: []string{"Electronics"}},
		{question: "revenue this year", metric: "revenue", years: []string{"2025"}},
		{question: "daily orders", metric: "orders", dim: "day"},
		{question: "by country", metric: "revenue", dim: "country"},
		{question: "Show me sales by region", metric: "revenue", dim: "country"},
		{question: "How did orders develop?", metric: "orders", dim: "month"},
		{question: "Which product category sells best?", metric: "quantity", dim: "category"},
		{question: "What are our top selling products?", metric: "quantity", dim: "product", top: 10},
		{question: "hello there"},
		{question: "what can you do?"},
		{question: "tell me about 2024"},
	}
	for _, tt := range tests {
		t.Run(tt.question, func(t *testing.T) {
			p, ok := understand(tt.question, nil)
			if ok != (tt.metric != "") {
				t.Fatalf("understood = %v, want %v", ok, tt.metric != "")
			}
			if !ok {
				return
			}
			dim := ""
			if p.dim != nil {
				dim = p.dim.key
			}
			if p.metric.key != tt.metric || dim != tt.dim || p.top != tt.top || p.ascending != tt.ascending {
				t.Errorf("plan = %s by %q top %d asc %v, want %s by %q top %d asc %v",
					p.metric.key, dim, p.top, p.ascending, tt.metric, tt.dim, tt.top, tt.ascending)
			}
			if !reflect.DeepEqual(p.countries, tt.countries) || !reflect.DeepEqual(p.categories, tt.categories) || !reflect.DeepEqual(p.years, tt.years) {
				t.Errorf("filters = %v %q %v, want %v %q %v", p.countries, p.categories, p.years, tt.countries, tt.categories, tt.years)
			}
		})
	}
}

// A follow-up does not build on a message the agent could not answer or
// on an SQL statement.
func TestFollowUpSkipsUnanswered(t *testing.T) {
	for _, history := range [][]string{
		{"revenue in France by category", "which customers churned in 2025?"},
		{"revenue in France by category", "DROP TABLE customers; --"},
		{"revenue in France by category", "orders per hour"},
	} {
		q, ok := understand("and by month?", history)
		if !ok || q.metric != metricRevenue || q.dim != dimMonth || !reflect.DeepEqual(q.countries, []string{"France"}) || len(q.years) > 0 {
			t.Errorf("after %q: %s by %v in %v %v, want revenue by month in France", history, q.metric.key, q.dim, q.countries, q.years)
		}
	}
}

func TestUnderstandFollowUps(t *testing.T) {
	history := []string{"hello", "revenue in France by category"}
	tests := []struct {
		question, metric, dim string
		countries             []string
	}{
		{"and by month?", "revenue", "month", []string{"France"}},
		{"what about orders?", "orders", "category", []string{"France"}},
		{"and Germany?", "revenue", "category", []string{"Germany"}},
		{"orders", "orders", "", nil},
	}
	for _, tt := range tests {
		p, ok := understand(tt.question, history)
		if !ok {
			t.Errorf("%q not understood", tt.question)
			continue
		}
		dim := ""
		if p.dim != nil {
			dim = p.dim.key
		}
		if p.metric.key != tt.metric || dim != tt.dim || !reflect.DeepEqual(p.countries, tt.countries) {
			t.Errorf("%q = %s by %q in %v, want %s by %q in %v", tt.question, p.metric.key, dim, p.countries, tt.metric, tt.dim, tt.countries)
		}
	}
}

func TestSearchModel(t *testing.T) {
	res := Model().Search("Revenue country")
	names := map[string]bool{}
	for _, c := range res.Cubes {
		for _, m := range c.Members {
			names[m.Name] = true
		}
	}
	for _, want := range []string{"orders.revenue", "orders.country", "customers.country"} {
		if !names[want] {
			t.Errorf("search %q misses %s; got %v", res.SearchQuery, want, names)
		}
	}
	if names["products.price"] {
		t.Errorf("search %q matched products.price", res.SearchQuery)
	}
	if all := Model().Search("xyzzy"); len(all.Cubes) != len(Model().Views) || all.SearchQuery != "xyzzy" {
		t.Errorf("search with no match = %d cubes, want all %d", len(all.Cubes), len(Model().Views))
	}
	if c := Model().Search("products").Cubes; len(c) == 0 || c[0].Name != "orders" && c[0].Name != "products" {
		t.Errorf("search products = %v", c)
	}
}

func TestFormatNumber(t *testing.T) {
	tests := []struct {
		v        any
		decimals int
		want     string
	}{
		{12345.678, 2, "12,345.68"},
		{int64(1234567), 0, "1,234,567"},
		{int64(12), 0, "12"},
		{999.999, 2, "1,000.00"},
		{-1234.5, 2, "-1,234.50"},
		{-0.001, 2, "0.00"},
		{nil, 2, "no value"},
	}
	for _, tt := range tests {
		if got := formatNumber(tt.v, tt.decimals); got != tt.want {
			t.Errorf("formatNumber(%v, %d) = %q, want %q", tt.v, tt.decimals, got, tt.want)
		}
	}
}

func TestPieces(t *testing.T) {
	for _, s := range []string{"", "one", "Revenue by country:  Germany leads.\n\n1. A: 2", " lead", "trail  "} {
		var ps []string
		for rest := s; rest != ""; {
			var p string
			p, rest = nextPiece(rest)
			ps = append(ps, p)
		}
		if got := strings.Join(ps, ""); got != s {
			t.Errorf("nextPiece pieces of %q joined = %q", s, got)
		}
		for _, p := range ps {
			if p == "" {
				t.Errorf("nextPiece of %q gave an empty piece", s)
			}
		}
	}
}
