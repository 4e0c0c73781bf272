package demoagent

import (
	"slices"
	"strconv"
	"strings"
)

// metric is a measure the agent can compute over the order lines.
type metric struct {
	key    string // column name in the result
	title  string // "Revenue"
	member string // data model member
	expr   string // SQL aggregate
	// decimals is how many decimals the answer text shows.
	decimals int
	// additive metrics can be summed over the rows of a breakdown.
	additive bool
	words    string // what it is, for descriptions
}

var (
	metricRevenue = &metric{key: "revenue", title: "Revenue", member: "orders.revenue",
		expr: "ROUND(SUM(ol.quantity * ol.price), 2)", decimals: 2, additive: true, words: "revenue (quantity times price paid)"}
	metricOrders = &metric{key: "orders", title: "Orders", member: "orders.count",
		expr: "COUNT(DISTINCT o.id)", words: "number of orders"}
	metricQuantity = &metric{key: "quantity", title: "Quantity", member: "orders.quantity",
		expr: "SUM(ol.quantity)", additive: true, words: "units sold"}
	metricAOV = &metric{key: "average_order_value", title: "Average order value", member: "orders.average_order_value",
		expr: "ROUND(SUM(ol.quantity * ol.price) / COUNT(DISTINCT o.id), 2)", decimals: 2, words: "average order value (revenue per order)"}
	metricCustomers = &metric{key: "customers", title: "Customers", member: "orders.customers",
		expr: "COUNT(DISTINCT c.id)", words: "number of ordering customers"}
	metricProducts = &metric{key: "products", title: "Products sold", member: "products.count",
		expr: "COUNT(DISTINCT p.id)", words: "number of distinct products sold"}
)

// dimension is a breakdown of a metric.
type dimension struct {
	key     string // column name in the result
	title   string // singular noun: "country"
	plural  string // "countries"
	member  string // data model member
	expr    string // SQL expression
	colType string // schema column type: string or time
	// timeUnit is the Vega-Lite time unit of a time dimension ("" for
	// categorical ones; quarters are ordinal).
	timeUnit string
	// chronological dimensions list rows in time order by default.
	chronological bool
}

var (
	dimCountry  = &dimension{key: "country", title: "country", plural: "countries", member: "orders.country", expr: "c.country", colType: "string"}
	dimCategory = &dimension{key: "category", title: "category", plural: "categories", member: "orders.category", expr: "p.category", colType: "string"}
	dimProduct  = &dimension{key: "product", title: "product", plural: "products", member: "orders.product", expr: "p.name", colType: "string"}
	dimCustomer = &dimension{key: "customer", title: "customer", plural: "customers", member: "orders.customer", expr: "c.name", colType: "string"}
	dimMonth    = &dimension{key: "month", title: "month", plural: "months", member: "orders.created_at", expr: "strftime('%Y-%m', o.created_at)", colType: "time", timeUnit: "yearmonth", chronological: true}
	dimDay      = &dimension{key: "day", title: "day", plural: "days", member: "orders.created_at", expr: "date(o.created_at)", colType: "time", timeUnit: "yearmonthdate", chronological: true}
	dimQuarter  = &dimension{key: "quarter", title: "quarter", plural: "quarters", member: "orders.created_at", expr: "strftime('%Y', o.created_at) || '-Q' || ((CAST(strftime('%m', o.created_at) AS INTEGER) + 2) / 3)", colType: "string", chronological: true}
	dimYear     = &dimension{key: "year", title: "year", plural: "years", member: "orders.created_at", expr: "strftime('%Y', o.created_at)", colType: "time", timeUnit: "year", chronological: true}
)

// dimWords maps the words of a question to the dimension they name.
var dimWords = map[string]*dimension{
	"country": dimCountry, "countries": dimCountry, "nation": dimCountry, "nations": dimCountry, "market": dimCountry, "markets": dimCountry,
	"region": dimCountry, "regions": dimCountry, "location": dimCountry, "locations": dimCountry, "geography": dimCountry,
	"category": dimCategory, "categories": dimCategory,
	"product": dimProduct, "products": dimProduct,
	"customer": dimCustomer, "customers": dimCustomer, "client": dimCustomer, "clients": dimCustomer, "buyer": dimCustomer, "buyers": dimCustomer,
	"month": dimMonth, "months": dimMonth, "monthly": dimMonth,
	"day": dimDay, "days": dimDay, "daily": dimDay, "date": dimDay, "dates": dimDay,
	"quarter": dimQuarter, "quarters": dimQuarter, "quarterly": dimQuarter,
	"year": dimYear, "years": dimYear, "yearly": dimYear, "annual": dimYear, "annually": dimYear,
}

// metricWords maps the words of a question to the metric they name.
var metricWords = map[string]*metric{
	"revenue": metricRevenue, "revenues": metricRevenue, "sales": metricRevenue, "turnover": metricRevenue,
	"income": metricRevenue, "earnings": metricRevenue, "gmv": metricRevenue, "money": metricRevenue,
	"orders": metricOrders, "order": metricOrders, "purchases": metricOrders,
	"quantity": metricQuantity, "quantities": metricQuantity, "units": metricQuantity, "volume": metricQuantity, "items": metricQuantity,
	"aov": metricAOV,
}

// numberWords are spelled-out counts for "top five products".
var numberWords = map[string]int{
	"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
	"nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20,
}

// plan is a question understood as a query.
type plan struct {
	metric *metric
	dim    *dimension // nil for a single total
	// top limits the result to the first top rows by metric (0: all rows).
	top int
	// ranked orders rows by metric even for a chronological dimension.
	ranked    bool
	ascending bool // lowest first
	countries []string
	category  string
	years     []string
}

// filtered reports whether the question itself narrows the data.
func (p plan) filtered() bool {
	return len(p.countries) > 0 || p.category != "" || len(p.years) > 0
}

// tokenize lower-cases s and splits it into words of letters and digits.
func tokenize(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	})
}

// parsed is what one message says on its own.
type parsed struct {
	plan
	hasMetric, hasDim, followUp bool
}

// parse reads one message. It never fails: what it does not recognize it
// leaves out.
func parse(s string) parsed {
	toks := tokenize(s)
	joined := " " + strings.Join(toks, " ") + " "
	has := func(phrase string) bool { return strings.Contains(joined, " "+phrase+" ") }
	at := func(i int) string {
		if i >= 0 && i < len(toks) {
			return toks[i]
		}
		return ""
	}

	var p parsed
	dimAt := -1
	// dimAfter finds a dimension word among the two tokens after i,
	// skipping articles; "product category" means category.
	dimAfter := func(i int) (*dimension, int) {
		for j := i + 1; j <= i+3 && j < len(toks); j++ {
			switch t := toks[j]; t {
			case "the", "a", "each", "every", "selling", "performing", "sold", "best", "most", "top":
				continue
			default:
				if _, isNum := parseCount(t); isNum {
					continue
				}
				d := dimWords[t]
				if d == dimProduct && dimWords[at(j+1)] == dimCategory {
					return dimCategory, j + 1
				}
				return d, j
			}
		}
		return nil, -1
	}

	// 1. "by country", "per month", "for each category", "across products".
	for i, t := range toks {
		if t == "by" || t == "per" || t == "each" || t == "across" || t == "every" {
			if d, j := dimAfter(i); d != nil {
				p.dim, dimAt = d, j
				break
			}
		}
	}

	// Ranking: "top 5", "bottom three", "best selling", "least".
	for i, t := range toks {
		switch t {
		case "top", "best", "largest", "biggest", "highest", "most":
			if n, ok := parseCount(at(i + 1)); ok {
				p.top = n
			} else if t == "top" {
				p.top = 10
			}
			p.ranked = true
		case "bottom", "worst", "lowest", "smallest", "least", "fewest":
			if n, ok := parseCount(at(i + 1)); ok {
				p.top = n
			} else if t == "bottom" {
				p.top = 10
			}
			p.ranked, p.ascending = true, true
		default:
			continue
		}
		// 2. "top 5 products", "worst selling categories".
		if p.dim == nil {
			if d, j := dimAfter(i); d != nil {
				p.dim, dimAt = d, j
			}
		}
		break
	}

	// 3. "which country", "what product category".
	if p.dim == nil {
		for i, t := range toks {
			if t == "which" || t == "what" {
				if d, j := dimAfter(i); d != nil {
					p.dim, dimAt = d, j
					break
				}
			}
		}
	}
	// 4. "monthly revenue", "over time", "trend".
	if p.dim == nil && slices.ContainsFunc([]string{"over time", "trend", "trends", "develop", "developed", "evolution", "evolve", "evolved", "growth", "grow", "grew"}, has) {
		p.dim = dimMonth
	}
	// 5. Any dimension word, except "how many customers" (a count) and
	// "this year" (a period).
	if p.dim == nil {
		for i, t := range toks {
			d := dimWords[t]
			if d == nil || counted(toks, i) || at(i-1) == "this" || at(i-1) == "last" {
				continue
			}
			p.dim, dimAt = d, i
			break
		}
	}
	p.hasDim = p.dim != nil

	// Metric: the first metric word that is not the dimension.
	switch {
	case has("average order value") || has("avg order value") || has("order value") || has("average order") || has("basket size"):
		p.metric = metricAOV
	default:
		for i, t := range toks {
			if i == dimAt {
				continue
			}
			if m := metricWords[t]; m != nil {
				p.metric = m
				break
			}
			if counted(toks, i) {
				switch dimWords[t] {
				case dimCustomer:
					p.metric = metricCustomers
				case dimProduct:
					p.metric = metricProducts
				}
				if p.metric != nil {
					break
				}
			}
		}
	}
	if p.metric == nil && slices.ContainsFunc([]string{"sold", "sell", "sells", "selling", "bestselling", "bestsellers"}, has) {
		p.metric = metricQuantity
	}
	p.hasMetric = p.metric != nil

	// Filters: countries, a category, years.
	for _, c := range countries {
		if has(strings.ToLower(c.name)) || slices.ContainsFunc(c.aliases, has) {
			p.countries = append(p.countries, c.name)
		}
	}
	for _, c := range categories {
		if has(strings.ToLower(c.name)) || slices.ContainsFunc(c.aliases, has) {
			p.category = c.name
			break
		}
	}
	for _, t := range toks {
		if len(t) == 4 && strings.HasPrefix(t, "20") && t[2] >= '0' && t[2] <= '9' && t[3] >= '0' && t[3] <= '9' && !slices.Contains(p.years, t) {
			p.years = append(p.years, t)
		}
	}

	switch at(0) {
	case "and", "also", "now", "same", "then", "ok", "okay":
		p.followUp = true
	}
	p.followUp = p.followUp || has("what about") || has("how about") || has("instead")
	return p
}

// counted reports whether toks[i] follows "how many", "number of" or
// "count of".
func counted(toks []string, i int) bool {
	if i < 2 {
		return false
	}
	pair := toks[i-2] + " " + toks[i-1]
	return pair == "how many" || pair == "number of" || pair == "count of" || pair == "count the"
}

// parseCount reads "5" or "five" as a positive count up to 1000.
func parseCount(s string) (int, bool) {
	if n, ok := numberWords[s]; ok {
		return n, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 1000 {
		return 0, false
	}
	return n, true
}

// understand turns the turn's input into a plan, reading the user messages
// of history first so that a follow-up ("and by month?") reuses what the
// previous question asked for. ok is false when the input names neither a
// metric nor a breakdown the agent knows.
func understand(input string, history []string) (plan, bool) {
	var prev *plan
	for _, h := range history {
		if p, ok := resolve(parse(h), prev); ok {
			prev = &p
		}
	}
	return resolve(parse(input), prev)
}

// resolve completes a parsed message with the previous plan, if any.
func resolve(q parsed, prev *plan) (plan, bool) {
	p := q.plan
	onlyFilters := !q.hasMetric && !q.hasDim && q.filtered()
	switch {
	case !q.hasMetric && !q.hasDim && !(onlyFilters && q.followUp && prev != nil):
		return plan{}, false
	case onlyFilters:
		// "what about France?": the previous question for other data.
		next := *prev
		next.countries, next.category, next.years = p.countries, p.category, p.years
		return next, true
	case !q.hasMetric:
		// "and by month?", or a breakdown alone: previous metric, else revenue.
		p.metric = metricRevenue
		if prev != nil {
			p.metric = prev.metric
			if !p.filtered() {
				p.countries, p.category, p.years = prev.countries, prev.category, prev.years
			}
		}
	case !q.hasDim && q.followUp && prev != nil:
		// "what about orders?": the previous breakdown for another metric.
		p.dim, p.top, p.ranked, p.ascending = prev.dim, prev.top, prev.ranked, prev.ascending
		if !p.filtered() {
			p.countries, p.category, p.years = prev.countries, prev.category, prev.years
		}
	}
	if p.dim == nil {
		p.top, p.ranked, p.ascending = 0, false, false
	}
	return p, true
}
