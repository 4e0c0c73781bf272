package demoagent

import (
	"fmt"
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

// reasoning is the thinking text for plan p.
func reasoning(p plan, f *rowFilter) string {
	var b strings.Builder
	fmt.Fprintf(&b, "The question asks for %s", p.metric.words)
	if p.dim != nil {
		fmt.Fprintf(&b, " per %s", p.dim.title)
	}
	b.WriteString(p.filterText())
	fmt.Fprintf(&b, ". I will search the data model for %s, then query the orders view", strings.ToLower(searchText(p)))
	if f != nil {
		b.WriteString(", limited to the customers of the countries this user may see")
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
	if len(p.countries) > 0 {
		words = append(words, "country")
	}
	if p.category != "" && p.dim != dimCategory {
		words = append(words, "category")
	}
	if len(p.years) > 0 && (p.dim == nil || !p.dim.chronological) {
		words = append(words, "date")
	}
	return strings.Join(words, " ")
}

// summary is the answer text for the result of plan p.
func summary(p plan, res SQLResult, f *rowFilter) string {
	var b strings.Builder
	m := p.metric
	val := func(row []any) string { return formatNumber(row[len(row)-1], m.decimals) }
	label := func(row []any) string { return fmt.Sprint(row[0]) }

	switch {
	case len(res.Data) == 0:
		fmt.Fprintf(&b, "%s: the query returned no rows", res.QueryTitle)
		if f != nil {
			b.WriteString(" for the countries you can see")
		}
		b.WriteString(".")
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
		if len(res.Data) > 1 {
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
	if f != nil {
		if len(f.countries) == 0 {
			b.WriteString("\n\nYour access does not include any country, so no orders are visible to you.")
		} else {
			noun := "countries"
			if len(f.countries) == 1 {
				noun = "country"
			}
			fmt.Fprintf(&b, "\n\nResults are limited to your %s: %s.", noun, joinAnd(f.countries))
		}
	}
	return b.String()
}

// toFloat converts a scanned number to float64 (0 for anything else).
func toFloat(v any) float64 {
	switch v := v.(type) {
	case int64:
		return float64(v)
	case float64:
		return v
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
