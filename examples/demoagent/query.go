package demoagent

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
)

// SQLInput is the input of the svcSqlApi tool.
type SQLInput struct {
	SQLQuery    string `json:"sqlQuery"`
	QueryTitle  string `json:"queryTitle"`
	Description string `json:"description"`
	UserRequest string `json:"userRequest"`
	// MemoryID refers to the result of an earlier query in the thread that
	// this one follows up on ("" when there is none).
	MemoryID string `json:"memoryId"`
	// VegaSpec is a Vega-Lite v5 spec without data, encoded as JSON; empty
	// for a single total.
	VegaSpec string `json:"vegaSpec,omitempty"`
}

// SQLResult is the result of the svcSqlApi tool.
type SQLResult struct {
	SQLQuery    string   `json:"sqlQuery"`
	QueryTitle  string   `json:"queryTitle"`
	Description string   `json:"description"`
	UserRequest string   `json:"userRequest"`
	Schema      []Column `json:"schema"`
	// Data holds at most the row limit of rows (100 by default), each a
	// slice of values in Schema order: string, int64, float64 or nil.
	Data [][]any `json:"data"`
	// TotalRows is how many rows the query yields, before the row limit.
	TotalRows int `json:"totalRows"`
	// UUID identifies this result. It is derived from the query and the
	// user's row filter, so the same question by the same user gets the
	// same id.
	UUID     string `json:"uuid"`
	VegaSpec string `json:"vegaSpec,omitempty"`
}

// Column describes one column of [SQLResult.Data].
type Column struct {
	Name string `json:"name"`
	// ColumnType is string, number or time.
	ColumnType string `json:"column_type"`
}

// fromClause joins the order lines with their orders and customers (which
// row-level security filters), and with the products when p uses them.
func (p plan) fromClause() string {
	from := "FROM order_lines AS ol\nJOIN orders AS o ON o.id = ol.order_id\nJOIN customers AS c ON c.id = o.customer_id"
	if p.dim == dimProduct || p.dim == dimCategory || p.category != "" || p.metric == metricProducts {
		from += "\nJOIN products AS p ON p.id = ol.product_id"
	}
	return from
}

// sqlText renders p as the SQL query shown to the user. Filters named in
// the question are inlined: they are constants of the data set chosen by
// matching, never text copied from the question. Row-level security is not
// part of it; see [rowFilter.wrap].
func (p plan) sqlText() string {
	var b strings.Builder
	b.WriteString("SELECT ")
	if p.dim != nil {
		fmt.Fprintf(&b, "%s AS %s, %s AS %s\n", p.dim.expr, p.dim.key, p.metric.expr, p.metric.key)
	} else {
		fmt.Fprintf(&b, "COALESCE(%s, 0) AS %s\n", p.metric.expr, p.metric.key)
	}
	b.WriteString(p.fromClause())
	var where []string
	if len(p.countries) > 0 {
		where = append(where, "c.country IN ("+quoteList(p.countries)+")")
	}
	if p.category != "" {
		where = append(where, "p.category = "+quote(p.category))
	}
	if len(p.years) > 0 {
		where = append(where, "strftime('%Y', o.created_at) IN ("+quoteList(p.years)+")")
	}
	if len(where) > 0 {
		b.WriteString("\nWHERE " + strings.Join(where, "\n  AND "))
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
	if p.category != "" {
		parts = append(parts, p.category)
	}
	if len(p.years) > 0 {
		parts = append(parts, joinAnd(p.years))
	}
	if len(parts) == 0 {
		return ""
	}
	return " in " + strings.Join(parts, ", ")
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

// schema is the result's columns.
func (p plan) schema() []Column {
	m := Column{Name: p.metric.key, ColumnType: "number"}
	if p.dim == nil {
		return []Column{m}
	}
	return []Column{{Name: p.dim.key, ColumnType: p.dim.colType}, m}
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

// rowFilter is the row-level security of one user: the countries whose
// customers they may see. A nil *rowFilter sees everything.
type rowFilter struct {
	countries []string
}

// userFilter reads the "country" attribute: a string or a list of strings.
// Values are matched to the data set's country names by name, alias or ISO
// code, ignoring case; other values are kept as given and match nothing.
// An attribute of another type denies every row.
func userFilter(attrs map[string]any) *rowFilter {
	v, ok := attrs["country"]
	if !ok || v == nil {
		return nil
	}
	var vals []string
	switch v := v.(type) {
	case string:
		vals = []string{v}
	case []string:
		vals = v
	case []any:
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return &rowFilter{}
			}
			vals = append(vals, s)
		}
	default:
		return &rowFilter{}
	}
	f := &rowFilter{countries: make([]string, 0, len(vals))}
	for _, s := range vals {
		f.countries = append(f.countries, canonicalCountry(s))
	}
	return f
}

// canonicalCountry maps "de", "germany" or "German" to "Germany".
func canonicalCountry(s string) string {
	l := strings.ToLower(strings.TrimSpace(s))
	for _, c := range countries {
		if l == strings.ToLower(c.name) || l == strings.ToLower(c.code) {
			return c.name
		}
		for _, a := range c.aliases {
			if l == a {
				return c.name
			}
		}
	}
	return s
}

// wrap returns the statement to run for query q and its arguments. It
// shadows the customers table with a common table expression holding only
// the allowed customers, so every join through customers is filtered. The
// countries are bound parameters.
func (f *rowFilter) wrap(q string) (string, []any) {
	if f == nil {
		return q, nil
	}
	if len(f.countries) == 0 {
		return "WITH customers AS (SELECT * FROM main.customers WHERE 0)\n" + q, nil
	}
	args := make([]any, len(f.countries))
	for i, c := range f.countries {
		args[i] = c
	}
	marks := strings.TrimSuffix(strings.Repeat("?, ", len(args)), ", ")
	return "WITH customers AS (SELECT * FROM main.customers WHERE country IN (" + marks + "))\n" + q, args
}

// run executes p for a user with filter f and returns at most limit rows.
func run(ctx context.Context, db *sql.DB, p plan, f *rowFilter, limit int) (SQLResult, error) {
	text := p.sqlText()
	stmt, args := f.wrap(text)
	res := SQLResult{
		SQLQuery:    text,
		QueryTitle:  p.title(),
		Description: p.description(),
		Schema:      p.schema(),
		Data:        [][]any{},
		VegaSpec:    p.vega(),
	}
	rows, err := db.QueryContext(ctx, stmt, args...)
	if err != nil {
		return SQLResult{}, fmt.Errorf("demoagent: query: %w", err)
	}
	defer rows.Close()
	n := len(res.Schema)
	for rows.Next() {
		res.TotalRows++
		if len(res.Data) >= limit {
			continue
		}
		row := make([]any, n)
		ptrs := make([]any, n)
		for i := range row {
			ptrs[i] = &row[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return SQLResult{}, fmt.Errorf("demoagent: scan: %w", err)
		}
		for i, v := range row {
			if b, ok := v.([]byte); ok {
				row[i] = string(b)
			}
		}
		res.Data = append(res.Data, row)
	}
	if err := rows.Err(); err != nil {
		return SQLResult{}, fmt.Errorf("demoagent: query: %w", err)
	}

	h := sha256.New()
	h.Write([]byte(stmt))
	for _, a := range args {
		fmt.Fprintf(h, "\x00%v", a)
	}
	fmt.Fprintf(h, "\x00%d", limit)
	res.UUID = uuidFrom(h.Sum(nil))
	return res, nil
}

// uuidFrom formats the first 16 bytes of sum as a version 8 UUID.
func uuidFrom(sum []byte) string {
	var u [16]byte
	copy(u[:], sum)
	u[6] = u[6]&0x0f | 0x80
	u[8] = u[8]&0x3f | 0x80
	s := hex.EncodeToString(u[:])
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}
