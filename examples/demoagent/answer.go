package demoagent

import (
	"encoding/json"
	"fmt"

	"github.com/embedkit/embedkit/chatstream/analytics"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ExampleQuestions returns questions the agent answers, as listed in its
// help text.
func ExampleQuestions() []string { return slices.Clone(exampleQuestions) }

var exampleQuestions = []string{
	"Revenue by country",
	"Orders per month",
	"Top 5 products by revenue",
	"Top 3 categories by quantity",
	"Average order value by category in 2025",
	"How many customers per country?",
	"Total revenue in Germany",
}

// helpText is the answer to a question the agent does not understand.
func helpText() string {
	var b strings.Builder
	b.WriteString("I can answer questions about the sample shop's revenue, orders, units sold, average order value and customers, ")
	b.WriteString("broken down by country, category, product, customer, day, month, quarter or year, and filtered by country, category or year (2024 and 2025). ")
	b.WriteString("For example:\n")
	for _, q := range exampleQuestions {
		b.WriteString("\n- " + q)
	}
	b.WriteString("\n\nYou can follow up with a new breakdown, such as \"and by month?\".")
	return b.String()
}

// reasoning is the thinking text for question q.
func reasoning(q parsed, a analytics.Access) string {
	var b strings.Builder
	fmt.Fprintf(&b, "The question asks for %s", q.metric.words)
	if q.dim != nil {
		fmt.Fprintf(&b, " per %s", q.dim.title)
	}
	b.WriteString(q.filterText())
	fmt.Fprintf(&b, ". I will search the data model for %s, then query the orders view", strings.ToLower(searchText(q.plan)))
	if !a.All() {
		b.WriteString(", which shows only the rows this user may see")
	}
	b.WriteString(".")
	return b.String()
}

// searchText is the svcMeta search for p: its key words.
func searchText(p plan) string {
	words := []string{p.metric.title}
	if p.dim != nil {
		words = append(words, p.dim.title)
	}
	if len(p.countries)+len(p.notCountries) > 0 && p.dim != dimCountry {
		words = append(words, "country")
	}
	if len(p.categories)+len(p.notCategories) > 0 && p.dim != dimCategory {
		words = append(words, "category")
	}
	if p.timed() && (p.dim == nil || !p.dim.chronological) {
		words = append(words, "date")
	}
	return strings.Join(words, " ")
}

// summary is the answer text for the result of question q.
func summary(q parsed, res *analytics.SQLResult, a analytics.Access) string {
	var b strings.Builder
	p := q.plan
	m := p.metric
	val := func(row []any) string { return formatNumber(row[len(row)-1], m.decimals) }
	label := func(row []any) string { return fmt.Sprint(row[0]) }

	switch {
	case len(res.Data) == 0:
		fmt.Fprintf(&b, "%s: the query returned no rows; no orders match.", res.QueryTitle)
	case p.dim == nil:
		fmt.Fprintf(&b, "%s: %s.", res.QueryTitle, val(res.Data[0]))
	case p.dim.chronological && !p.ranked:
		hi, lo := res.Data[0], res.Data[0]
		for _, r := range res.Data {
			if toFloat(r[1]) > toFloat(hi[1]) {
				hi = r
			}
			if toFloat(r[1]) < toFloat(lo[1]) {
				lo = r
			}
		}
		first, last := res.Data[0], res.Data[len(res.Data)-1]
		fmt.Fprintf(&b, "%s, from %s to %s (%d %s): the highest was %s with %s, the lowest %s with %s.",
			res.QueryTitle, label(first), label(last), len(res.Data), plural(len(res.Data), p.dim),
			label(hi), val(hi), label(lo), val(lo))
		switch {
		case len(res.Data) > 1 && res.TotalRows > len(res.Data):
			fmt.Fprintf(&b, " The last %s in the result, %s, had %s.", p.dim.title, label(last), val(last))
		case len(res.Data) > 1:
			fmt.Fprintf(&b, " The latest %s, %s, had %s.", p.dim.title, label(last), val(last))
		}
	default:
		lead := "leads with"
		if p.ascending {
			lead = "is lowest with"
		}
		fmt.Fprintf(&b, "%s: %s %s %s", res.QueryTitle, label(res.Data[0]), lead, val(res.Data[0]))
		var next []string
		for _, r := range res.Data[1:min(3, len(res.Data))] {
			next = append(next, fmt.Sprintf("%s (%s)", label(r), val(r)))
		}
		if len(next) > 0 {
			b.WriteString(", followed by " + joinAnd(next))
		}
		b.WriteString(".")
		if len(res.Data) > 3 {
			b.WriteString("\n")
			for i, r := range res.Data[:min(5, len(res.Data))] {
				fmt.Fprintf(&b, "\n%d. %s: %s", i+1, label(r), val(r))
			}
		}
	}

	if m.additive && p.dim != nil && p.top == 0 && len(res.Data) > 1 && res.TotalRows == len(res.Data) {
		total := 0.0
		for _, r := range res.Data {
			total += toFloat(r[1])
		}
		fmt.Fprintf(&b, "\n\nTotal over all %d %s: %s.", len(res.Data), p.dim.plural, formatNumber(total, m.decimals))
	}
	if res.TotalRows > len(res.Data) {
		fmt.Fprintf(&b, "\n\nThe query yields %s rows; the result holds the first %d. Run the SQL query through the data query API to load them all.",
			formatNumber(int64(res.TotalRows), 0), len(res.Data))
	}
	if p.top > 0 && res.TotalRows < p.top && res.TotalRows > 0 {
		fmt.Fprintf(&b, "\n\nYou asked for %d; only %d %s match.", p.top, res.TotalRows, plural(res.TotalRows, p.dim))
	}
	if p.timed() && len(res.Data) == 0 && outOfRange(p.filters) {
		b.WriteString("\n\nThe sample data covers orders from 1 January 2024 to 31 December 2025 only.")
	}
	for _, n := range q.notes {
		b.WriteString("\n\n" + n)
	}
	b.WriteString(notUnderstood(q))
	b.WriteString(accessNote(a))
	return b.String()
}

// outOfRange reports whether the period of f lies outside the data.
func outOfRange(f filters) bool {
	for _, y := range f.years {
		if y != "2024" && y != "2025" {
			return true
		}
	}
	return f.from != "" && (f.from > dataEnd.Format(dayLayout) || f.to <= dataStart.Format(dayLayout))
}

// notUnderstood says which parts of the question the answer did not use.
func notUnderstood(q parsed) string {
	var b strings.Builder
	if len(q.lacking) > 0 {
		fmt.Fprintf(&b, "\n\nThe sample data has no %s, so that part of your question is not answered.", joinAnd(q.lacking))
	}
	if q.badGrain != "" {
		fmt.Fprintf(&b, "\n\nI cannot break results down by %s; the finest time breakdown is by day.", q.badGrain)
	}
	if len(q.badStats) > 0 {
		fmt.Fprintf(&b, "\n\nI cannot compute %s; the answer shows %s instead.", joinAnd(q.badStats), q.metric.words)
	}
	if len(q.ignored) > 0 {
		quoted := make([]string, len(q.ignored))
		for i, w := range q.ignored {
			quoted[i] = "“" + w + "”"
		}
		it := "it"
		if len(quoted) > 1 {
			it = "them"
		}
		fmt.Fprintf(&b, "\n\nI did not understand %s in your question, so the answer ignores %s.", joinAnd(quoted), it)
	}
	return b.String()
}

// accessNote says how row-level security limited the rows.
func accessNote(a analytics.Access) string {
	if a.All() {
		return ""
	}
	vals := a.Values("country")
	if len(vals) == 0 {
		return "\n\nYour account has no country assigned, and row-level security shows only the orders of your countries, so no orders are visible to you."
	}
	names := make([]string, len(vals))
	for i, v := range vals {
		names[i] = fmt.Sprint(v)
	}
	noun := "countries"
	if len(names) == 1 {
		noun = "country"
	}
	return fmt.Sprintf("\n\nResults are limited to your %s: %s.", noun, joinAnd(names))
}

// cannotText answers a question whose measure or breakdown the data does
// not have, after svcMeta found nothing for it.
func cannotText(q parsed) string {
	var b strings.Builder
	switch {
	case len(q.lacking) > 0:
		fmt.Fprintf(&b, "I cannot answer that: the sample data has no %s. ", joinAnd(q.lacking))
		b.WriteString("It records orders (date, customer, country, product, category, quantity and the price paid), without costs, returns, subscriptions or web traffic.")
	case len(q.badStats) > 0:
		fmt.Fprintf(&b, "I cannot answer that: I do not compute %s.", joinAnd(q.badStats))
	default:
		fmt.Fprintf(&b, "I cannot break results down by %s: the finest time breakdown the sample data offers is by day.", q.badGrain)
	}
	b.WriteString(" I can answer questions about revenue, orders, units sold, average order value and ordering customers, ")
	b.WriteString("by country, category, product, customer, day, week, month, quarter or year.")
	if q.hasDim && q.dim != nil {
		fmt.Fprintf(&b, " For example: “revenue by %s”.", q.dim.title)
	}
	return b.String()
}

// sqlText answers a message that is an SQL statement, after svcSqlApi ran
// it (res) or refused it (msg).
func sqlAnswer(res *analytics.SQLResult, msg string, a analytics.Access) string {
	if res == nil {
		return "I did not run it: " + msg + ". Ask me a question in words instead, for example “" + exampleQuestions[0] + "”."
	}
	var b strings.Builder
	fmt.Fprintf(&b, "The query returned %s %s", formatNumber(int64(res.TotalRows), 0), map[bool]string{true: "row", false: "rows"}[res.TotalRows == 1])
	if len(res.Data) == 0 {
		b.WriteString(".")
	} else {
		b.WriteString(":\n\n|")
		for _, c := range res.Schema {
			b.WriteString(" " + mdCell(c.Name) + " |")
		}
		b.WriteString("\n|")
		for range res.Schema {
			b.WriteString(" --- |")
		}
		for _, row := range res.Data[:min(5, len(res.Data))] {
			b.WriteString("\n|")
			for _, v := range row {
				b.WriteString(" " + mdCell(cellText(v)) + " |")
			}
		}
		if res.TotalRows > 5 {
			fmt.Fprintf(&b, "\n\nThe first 5 of %s rows are shown; the tool result holds up to %d.", formatNumber(int64(res.TotalRows), 0), len(res.Data))
		}
	}
	b.WriteString(accessNote(a))
	return b.String()
}

// cellText renders one value of a result.
func cellText(v any) string {
	switch v := v.(type) {
	case int64:
		return formatNumber(v, 0)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case json.Number: // PostgreSQL's numeric, exact: 64188.60 reads 64188.6 as on SQLite
		n := string(v)
		if strings.Contains(n, ".") && !strings.ContainsAny(n, "eE") {
			n = strings.TrimSuffix(strings.TrimRight(n, "0"), ".")
		}
		return n
	case nil:
		return "null"
	}
	return fmt.Sprint(v)
}

// mdCell makes s safe in a Markdown table cell.
func mdCell(s string) string {
	return strings.NewReplacer("|", "\\|", "\n", " ", "\r", " ").Replace(s)
}

// toFloat converts a scanned number to float64 (0 for anything else).
func toFloat(v any) float64 {
	switch v := v.(type) {
	case int64:
		return float64(v)
	case float64:
		return v
	case json.Number:
		f, _ := v.Float64()
		return f
	}
	return 0
}

// formatNumber renders v with thousands separators and the given decimals:
// formatNumber(12345.678, 2) is "12,345.68".
func formatNumber(v any, decimals int) string {
	var f float64
	switch v := v.(type) {
	case int64:
		f = float64(v)
	case float64:
		f = v
	case json.Number:
		f, _ = v.Float64()
	case nil:
		return "no value"
	default:
		return fmt.Sprint(v)
	}
	s := strconv.FormatFloat(math.Abs(f), 'f', decimals, 64)
	intPart, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	if f < 0 && s != strconv.FormatFloat(0, 'f', decimals, 64) {
		b.WriteByte('-')
	}
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if frac != "" {
		b.WriteString("." + frac)
	}
	return b.String()
}
