package demoagent

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// sqlText renders p as the SQL query over the data model's views, for
// PostgreSQL when pg is true, else for SQLite (the text differs only for
// weeks). Filters named in the question are inlined: they are constants of
// the data set chosen by matching, never text copied from the question.
// Row-level security is not part of it: the views apply it underneath,
// whatever the query says.
func (p plan) sqlText(pg bool) string {
	var b strings.Builder
	b.WriteString("SELECT ")
	if p.dim != nil {
		expr := p.dim.expr
		if pg && p.dim.pgExpr != "" {
			expr = p.dim.pgExpr
		}
		fmt.Fprintf(&b, "%s AS %s, %s AS %s\n", expr, p.dim.key, p.metric.expr, p.metric.key)
	} else {
		fmt.Fprintf(&b, "%s AS %s\n", p.metric.expr, p.metric.key)
	}
	b.WriteString("FROM orders")
	var where []string
	if len(p.countries) > 0 {
		where = append(where, "country IN ("+quoteList(p.countries)+")")
	}
	if len(p.notCountries) > 0 {
		where = append(where, "country NOT IN ("+quoteList(p.notCountries)+")")
	}
	if len(p.categories) > 0 {
		where = append(where, "category IN ("+quoteList(p.categories)+")")
	}
	if len(p.notCategories) > 0 {
		where = append(where, "category NOT IN ("+quoteList(p.notCategories)+")")
	}
	if len(p.years) > 0 {
		where = append(where, "substr(created_at, 1, 4) IN ("+quoteList(p.years)+")")
	}
	if len(p.months) > 0 {
		where = append(where, "substr(created_at, 6, 2) IN ("+quoteList(p.months)+")")
	}
	if p.from != "" {
		where = append(where, "created_at >= "+quote(p.from)+" AND created_at < "+quote(p.to))
	}
	if len(where) > 0 {
		b.WriteString("\nWHERE " + strings.Join(where, "\n  AND "))
	}
	if p.dim == nil {
		// No orders, no row: a total over nothing is not a zero.
		b.WriteString("\nHAVING COUNT(*) > 0")
	}
	if p.dim != nil {
		b.WriteString("\nGROUP BY 1\nORDER BY ")
		switch {
		case p.dim.chronological && !p.ranked:
			b.WriteString("1")
		case p.ascending:
			b.WriteString("2 ASC, 1")
		default:
			b.WriteString("2 DESC, 1")
		}
		if p.top > 0 {
			fmt.Fprintf(&b, "\nLIMIT %d", p.top)
		}
	}
	return b.String()
}

// quote renders s as an SQL string literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quote(s)
	}
	return strings.Join(q, ", ")
}

// title names the result: "Top 5 products by revenue in Germany, 2025".
func (p plan) title() string {
	var t string
	switch {
	case p.dim == nil:
		t = "Total " + strings.ToLower(p.metric.title)
		if p.metric == metricAOV {
			t = p.metric.title
		}
	case p.top > 0 && p.ascending:
		t = fmt.Sprintf("Bottom %d %s by %s", p.top, plural(p.top, p.dim), strings.ToLower(p.metric.title))
	case p.top > 0:
		t = fmt.Sprintf("Top %d %s by %s", p.top, plural(p.top, p.dim), strings.ToLower(p.metric.title))
	default:
		t = p.metric.title + " by " + p.dim.title
	}
	return t + p.filterText()
}

// filterText describes the question's filters: " in Germany, Books, 2025".
func (p plan) filterText() string {
	var parts []string
	if len(p.countries) > 0 {
		parts = append(parts, joinAnd(p.countries))
	}
	if len(p.categories) > 0 {
		parts = append(parts, joinAnd(p.categories))
	}
	if len(p.years) > 0 {
		parts = append(parts, joinAnd(p.years))
	}
	if len(p.months) > 0 {
		var names []string
		for _, m := range p.months {
			n, _ := strconv.Atoi(m)
			names = append(names, time.Month(n).String())
		}
		parts = append(parts, joinAnd(names)+" (of every year)")
	}
	if p.window != "" {
		parts = append(parts, p.window)
	}
	var out string
	if len(parts) > 0 {
		out = " in " + strings.Join(parts, ", ")
	}
	var not []string
	not = append(not, p.notCountries...)
	not = append(not, p.notCategories...)
	if len(not) > 0 {
		out += " excluding " + joinAnd(not)
	}
	return out
}

func plural(n int, d *dimension) string {
	if n == 1 {
		return d.title
	}
	return d.plural
}

// joinAnd joins "a", "b", "c" as "a, b and c".
func joinAnd(ss []string) string {
	if len(ss) < 2 {
		return strings.Join(ss, "")
	}
	return strings.Join(ss[:len(ss)-1], ", ") + " and " + ss[len(ss)-1]
}

// description says in a sentence what the query computes.
func (p plan) description() string {
	var b strings.Builder
	b.WriteString(upperFirst(p.metric.words))
	if p.dim != nil {
		b.WriteString(" per " + p.dim.title)
	}
	b.WriteString(" over all orders")
	if p.filtered() {
		b.WriteString(p.filterText())
	}
	switch {
	case p.dim == nil:
	case p.dim.chronological && !p.ranked:
		b.WriteString(", in time order")
	case p.ascending:
		b.WriteString(", lowest first")
	default:
		b.WriteString(", highest first")
	}
	if p.top > 0 {
		fmt.Fprintf(&b, ", first %d", p.top)
	}
	b.WriteString(".")
	return b.String()
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// vegaSpec is a Vega-Lite v5 spec without data.
type vegaSpec struct {
	Schema      string       `json:"$schema"`
	Title       string       `json:"title"`
	Description string       `json:"description,omitempty"`
	Mark        vegaMark     `json:"mark"`
	Encoding    vegaEncoding `json:"encoding"`
}

type vegaMark struct {
	Type    string `json:"type"`
	Point   bool   `json:"point,omitempty"`
	Tooltip bool   `json:"tooltip"`
}

type vegaEncoding struct {
	X vegaChannel `json:"x"`
	Y vegaChannel `json:"y"`
}

type vegaChannel struct {
	Field    string `json:"field"`
	Type     string `json:"type"`
	Title    string `json:"title,omitempty"`
	TimeUnit string `json:"timeUnit,omitempty"`
	Sort     any    `json:"sort,omitempty"`
}

// vega renders the chart of p: a line over time for a chronological
// breakdown listed in time order, bars otherwise, nothing for a total.
func (p plan) vega() string {
	if p.dim == nil {
		return ""
	}
	spec := vegaSpec{
		Schema:      "https://vega.github.io/schema/vega-lite/v5.json",
		Title:       p.title(),
		Description: p.description(),
		Mark:        vegaMark{Type: "bar", Tooltip: true},
		Encoding: vegaEncoding{
			X: vegaChannel{Field: p.dim.key, Type: "nominal", Title: upperFirst(p.dim.title)},
			Y: vegaChannel{Field: p.metric.key, Type: "quantitative", Title: p.metric.title},
		},
	}
	switch {
	case p.dim.chronological && !p.ranked:
		spec.Mark = vegaMark{Type: "line", Point: true, Tooltip: true}
		if p.dim.timeUnit != "" {
			spec.Encoding.X.Type, spec.Encoding.X.TimeUnit = "temporal", p.dim.timeUnit
		} else {
			spec.Encoding.X.Type = "ordinal"
		}
	case p.ascending:
		spec.Encoding.X.Sort = "y"
	default:
		spec.Encoding.X.Sort = "-y"
	}
	b, err := json.Marshal(spec)
	if err != nil { // cannot happen: the spec holds only strings and bools
		return ""
	}
	return string(b)
}
