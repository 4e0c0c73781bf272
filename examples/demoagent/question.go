package demoagent

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
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
		expr: "ROUND(SUM(quantity * price), 2)", decimals: 2, additive: true, words: "revenue (quantity times price paid)"}
	metricOrders = &metric{key: "orders", title: "Orders", member: "orders.count",
		expr: "COUNT(DISTINCT order_id)", words: "number of orders"}
	metricQuantity = &metric{key: "quantity", title: "Quantity", member: "orders.quantity",
		expr: "SUM(quantity)", additive: true, words: "units sold"}
	metricAOV = &metric{key: "average_order_value", title: "Average order value", member: "orders.average_order_value",
		expr: "ROUND(SUM(quantity * price) / COUNT(DISTINCT order_id), 2)", decimals: 2, words: "average order value (revenue per order)"}
	metricCustomers = &metric{key: "customers", title: "Ordering customers", member: "orders.customers",
		expr: "COUNT(DISTINCT customer_id)", words: "number of ordering customers"}
	metricProducts = &metric{key: "products", title: "Products sold", member: "products.count",
		expr: "COUNT(DISTINCT product_id)", words: "number of distinct products sold"}
)

// dimension is a breakdown of a metric.
type dimension struct {
	key    string // column name in the result
	title  string // singular noun: "country"
	plural string // "countries"
	member string // data model member
	// expr is the SQL expression, the same for SQLite and PostgreSQL
	// unless pgExpr is set.
	expr    string
	pgExpr  string
	colType string // schema column type: string or time
	// timeUnit is the Vega-Lite time unit of a time dimension ("" for
	// categorical ones; quarters are ordinal).
	timeUnit string
	// chronological dimensions list rows in time order by default.
	chronological bool
}

var (
	dimCountry  = &dimension{key: "country", title: "country", plural: "countries", member: "orders.country", expr: "country", colType: "string"}
	dimCategory = &dimension{key: "category", title: "category", plural: "categories", member: "orders.category", expr: "category", colType: "string"}
	dimProduct  = &dimension{key: "product", title: "product", plural: "products", member: "orders.product", expr: "product", colType: "string"}
	dimCustomer = &dimension{key: "customer", title: "customer", plural: "customers", member: "orders.customer", expr: "customer", colType: "string"}
	dimMonth    = &dimension{key: "month", title: "month", plural: "months", member: "orders.created_at", expr: "substr(created_at, 1, 7)", colType: "time", timeUnit: "yearmonth", chronological: true}
	dimDay      = &dimension{key: "day", title: "day", plural: "days", member: "orders.created_at", expr: "substr(created_at, 1, 10)", colType: "time", timeUnit: "yearmonthdate", chronological: true}
	dimQuarter  = &dimension{key: "quarter", title: "quarter", plural: "quarters", member: "orders.created_at", expr: "substr(created_at, 1, 4) || '-Q' || ((CAST(substr(created_at, 6, 2) AS INTEGER) + 2) / 3)", colType: "string", chronological: true}
	dimWeek     = &dimension{key: "week", title: "week", plural: "weeks", member: "orders.created_at", expr: "date(created_at, 'weekday 0', '-6 days')", pgExpr: "to_char(date_trunc('week', CAST(created_at AS timestamp)), 'YYYY-MM-DD')", colType: "time", timeUnit: "yearmonthdate", chronological: true}
	dimYear     = &dimension{key: "year", title: "year", plural: "years", member: "orders.created_at", expr: "substr(created_at, 1, 4)", colType: "time", timeUnit: "year", chronological: true}
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
	"week": dimWeek, "weeks": dimWeek, "weekly": dimWeek,
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
	filters
}

// filters narrow the data a plan reads.
type filters struct {
	countries, notCountries   []string
	categories, notCategories []string
	years                     []string
	// months are months of the year ("03") in any year.
	months []string
	// from and to bound the order date: from <= created_at < to
	// ("2025-12-01", "2026-01-01"); window names the period.
	from, to, window string
}

// filtered reports whether the question itself narrows the data.
func (f filters) filtered() bool {
	return len(f.countries)+len(f.notCountries)+len(f.categories)+len(f.notCategories)+len(f.years)+len(f.months) > 0 || f.from != ""
}

// timed reports whether the filters restrict the order date.
func (f filters) timed() bool { return len(f.years) > 0 || len(f.months) > 0 || f.from != "" }

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
	// notes are sentences the answer must include: how a part of the
	// question was read ("last month" as December 2025) or what could not
	// be done with it (a second breakdown).
	notes []string
	// ignored are the phrases of the question that were not understood.
	ignored []string
	// lacking are the measures asked for that the data does not have.
	lacking []string
	// badGrain is a breakdown asked for that the data cannot give ("hour").
	badGrain string
	// badStats are calculations the agent cannot do ("medians").
	badStats []string
}

// The data set's period.
var (
	dataStart = time.Date(2024, time.January, 1, 0, 0, 0, 0, time.UTC)
	dataEnd   = time.Date(2025, time.December, 31, 0, 0, 0, 0, time.UTC) // last day
)

const dayLayout = "2006-01-02"

// lackingWords name measures the sample data does not hold, with what to
// call them in the answer.
var lackingWords = map[string]string{
	"profit": "profit", "profits": "profit", "profitable": "profit", "profitability": "profit",
	"margin": "margin", "margins": "margin", "cost": "cost", "costs": "cost", "cogs": "cost",
	"churn": "churn", "churned": "churn", "churning": "churn", "retention": "retention", "retained": "retention",
	"refund": "refunds", "refunds": "refunds", "refunded": "refunds", "return": "returns", "returns": "returns", "returned": "returns",
	"discount": "discounts", "discounts": "discounts", "shipping": "shipping", "delivery": "delivery",
	"inventory": "inventory", "stock": "stock", "traffic": "web traffic", "visits": "web traffic", "visitors": "web traffic",
	"sessions": "web traffic", "conversion": "conversion", "clicks": "clicks", "rating": "ratings", "ratings": "ratings",
	"review": "reviews", "reviews": "reviews", "satisfaction": "satisfaction", "nps": "NPS", "employees": "employees",
	"salary": "salaries", "salaries": "salaries", "tax": "taxes", "taxes": "taxes", "forecast": "forecasts",
	"predict": "forecasts", "prediction": "forecasts", "budget": "budgets", "spend": "spend", "ltv": "lifetime value",
	"lifetime": "lifetime value", "age": "customer age", "gender": "gender", "city": "cities", "cities": "cities",
	"supplier": "suppliers", "suppliers": "suppliers", "payment": "payment methods", "channel": "sales channels",
}

// statWords name calculations the agent does not make, although the data
// would allow them.
var statWords = map[string]string{
	"median": "medians", "medians": "medians", "percentile": "percentiles", "percentiles": "percentiles",
	"p90": "percentiles", "p95": "percentiles", "p99": "percentiles", "variance": "variances",
	"deviation": "standard deviations", "stddev": "standard deviations", "price": "prices", "prices": "prices",
	"correlation": "correlations", "share": "shares of a total", "percentage": "percentages", "percent": "percentages",
	"ratio": "ratios", "rate": "rates",
}

// badGrainWords are breakdowns of time the agent does not offer.
var badGrainWords = map[string]string{
	"hour": "hour", "hours": "hour", "hourly": "hour", "minute": "minute", "minutes": "minute",
	"weekday": "weekday", "weekdays": "weekday", "weekend": "weekday", "weekends": "weekday",
	"season": "season", "seasons": "season", "seasonal": "season",
}

var monthNames = map[string]time.Month{
	"january": 1, "jan": 1, "february": 2, "feb": 2, "march": 3, "mar": 3, "april": 4, "apr": 4,
	"may": 5, "june": 6, "jun": 6, "july": 7, "jul": 7, "august": 8, "aug": 8, "september": 9, "sep": 9, "sept": 9,
	"october": 10, "oct": 10, "november": 11, "nov": 11, "december": 12, "dec": 12,
}

// fillerWords carry no meaning for the agent; everything else that it
// does not use is reported as ignored.
var fillerWords = wordSet(`a an the of in on at for to from with by per and or our my me i we us you your it its
is are was were be been being do does did has have had can could would should will please pls
what whats which who how many much show give tell list get got find display see let lets compare
total overall all each every sum number count amount value values data there that this these those
as than so far ever any some just only also now then ok okay same instead again about like look
breakdown break down split grouped group distribution chart graph plot table performance perform performed
performing doing did compared summary overview stats statistics numbers figures report analysis
top bottom best worst largest biggest highest most lowest smallest least fewest selling sold sell sells
bestselling bestsellers seller sellers over time trend trends develop developed evolution evolve evolved growth
grow grew across during in year years month months day days week weeks quarter quarters last this past
previous current latest recent recently so far ytd today yesterday since until q1 q2 q3 q4 value
average avg basket size where were generated made make across vs versus per shop store sample
s t m im id ive been whole entire full did during when into up they them their his her
each every one two three four five six seven eight nine ten eleven twelve fifteen twenty
excluding except without not other but besides apart outside`)

func wordSet(s string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(s) {
		m[w] = true
	}
	return m
}

// negations mark the filter right after them as excluded: "excluding
// Germany", "except books", "outside the US".
var negations = wordSet("excluding exclude excluded except without not outside besides")

// parse reads one message. It never fails: what it does not recognize it
// leaves out, and reports in ignored.
func parse(s string) parsed {
	toks := tokenize(s)
	used := make([]bool, len(toks))
	joined := " " + strings.Join(toks, " ") + " "
	has := func(phrase string) bool { return strings.Contains(joined, " "+phrase+" ") }
	at := func(i int) string {
		if i >= 0 && i < len(toks) {
			return toks[i]
		}
		return ""
	}
	// use marks the tokens of phrase, wherever it occurs, as understood.
	use := func(phrase string) {
		ws := strings.Fields(phrase)
		for i := 0; i+len(ws) <= len(toks); i++ {
			if slices.Equal(toks[i:i+len(ws)], ws) {
				for j := range ws {
					used[i+j] = true
				}
			}
		}
	}

	var p parsed
	dimAt := -1
	// dimAfter finds a dimension word among the tokens after i, skipping
	// articles; "product category" means category.
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
				used[i+1] = true
			} else if t == "top" {
				p.top = 10
			}
			p.ranked = true
		case "bottom", "worst", "lowest", "smallest", "least", "fewest":
			if n, ok := parseCount(at(i + 1)); ok {
				p.top = n
				used[i+1] = true
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
	isPeriod := func(i int) bool {
		switch at(i - 1) {
		case "this", "last", "past", "previous", "current", "latest", "recent":
			return true
		}
		_, n := parseCount(at(i - 1))
		return n && (at(i-2) == "last" || at(i-2) == "past")
	}
	if p.dim == nil {
		for i, t := range toks {
			d := dimWords[t]
			if d == nil || counted(toks, i) || isPeriod(i) {
				continue
			}
			p.dim, dimAt = d, i
			break
		}
	}
	p.hasDim = p.dim != nil
	// A second breakdown is more than the agent can chart.
	if p.dim != nil {
		for i, t := range toks {
			d := dimWords[t]
			if d == nil || d == p.dim || counted(toks, i) || isPeriod(i) || d == dimProduct && dimWords[at(i+1)] == dimCategory {
				continue
			}
			if at(i+1) == "sold" || at(i+1) == "ordered" {
				continue
			}
			p.notes = append(p.notes, fmt.Sprintf("I can break a result down by one thing at a time, so I broke it down by %s and not by %s.", p.dim.title, d.title))
			break
		}
	}

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

	// negated reports whether the phrase at token i follows a negation
	// within three words ("excluding the UK and France").
	negated := func(phrase string) bool {
		ws := strings.Fields(phrase)
		for i := 0; i+len(ws) <= len(toks); i++ {
			if slices.Equal(toks[i:i+len(ws)], ws) {
				for j := max(0, i-4); j < i; j++ {
					if negations[toks[j]] || toks[j] == "other" && at(j+1) == "than" {
						return true
					}
				}
			}
		}
		return false
	}
	// Filters: countries, categories, periods.
	for _, c := range countries {
		for _, name := range append([]string{strings.ToLower(c.name), strings.ToLower(c.code)}, c.aliases...) {
			if len(name) == 2 && name != "uk" && name != "us" {
				continue // ISO codes other than UK and US are too often plain words
			}
			if !has(name) {
				continue
			}
			use(name)
			if negated(name) {
				p.notCountries = appendNew(p.notCountries, c.name)
			} else {
				p.countries = appendNew(p.countries, c.name)
			}
		}
	}
	for _, c := range categories {
		for _, name := range append([]string{strings.ToLower(c.name)}, c.aliases...) {
			if !has(name) {
				continue
			}
			use(name)
			if negated(name) {
				p.notCategories = appendNew(p.notCategories, c.name)
			} else {
				p.categories = appendNew(p.categories, c.name)
			}
		}
	}
	p.readPeriod(toks, used)
	// "Germany vs France", "books and toys": one row each.
	switch {
	case p.dim == nil && len(p.countries) > 1:
		p.dim, p.hasDim = dimCountry, true
	case p.dim == nil && len(p.categories) > 1:
		p.dim, p.hasDim = dimCategory, true
	}

	for i, t := range toks {
		if w, ok := lackingWords[t]; ok && !slices.Contains(p.lacking, w) {
			p.lacking = append(p.lacking, w)
			used[i] = true
		}
		if w, ok := statWords[t]; ok && !slices.Contains(p.badStats, w) {
			p.badStats = append(p.badStats, w)
			used[i] = true
		}
		if g, ok := badGrainWords[t]; ok && p.badGrain == "" {
			p.badGrain = g
			used[i] = true
		}
	}

	switch at(0) {
	case "and", "also", "now", "same", "then", "ok", "okay":
		p.followUp = true
	}
	p.followUp = p.followUp || has("what about") || has("how about") || has("instead")

	// Whatever is left is reported as ignored, phrase by phrase.
	for i, t := range toks {
		if used[i] || fillerWords[t] || dimWords[t] != nil || metricWords[t] != nil {
			used[i] = true
		}
	}
	for i := 0; i < len(toks); i++ {
		if used[i] {
			continue
		}
		j := i
		for j < len(toks) && !used[j] {
			j++
		}
		p.ignored = append(p.ignored, strings.Join(toks[i:j], " "))
		i = j
	}
	return p
}

func appendNew(ss []string, s string) []string {
	if slices.Contains(ss, s) {
		return ss
	}
	return append(ss, s)
}

// readPeriod reads the time window of a question: years ("in 2024"),
// months ("in March", "March 2025"), quarters ("Q3 2025") and periods
// relative to the end of the data ("last month", "this year", "last 30
// days", "yesterday"). The data ends on 31 December 2025, so "last" and
// "this" mean its latest period; the answer says so.
func (p *parsed) readPeriod(toks []string, used []bool) {
	at := func(i int) string {
		if i >= 0 && i < len(toks) {
			return toks[i]
		}
		return ""
	}
	isYear := func(t string) bool {
		return len(t) == 4 && t[0] == '2' && t[1] == '0' && t[2] >= '0' && t[2] <= '9' && t[3] >= '0' && t[3] <= '9'
	}
	var years []string
	for i, t := range toks {
		if isYear(t) {
			used[i] = true
			years = appendNew(years, t)
		}
	}
	setWindow := func(from, to time.Time, name, asked string) {
		if p.window != "" {
			p.notes = append(p.notes, fmt.Sprintf("I can use one period at a time, so I used %s and not %s.", p.window, name))
			return
		}
		p.from, p.to, p.window = from.Format(dayLayout), to.Format(dayLayout), name
		if asked != "" {
			p.notes = append(p.notes, fmt.Sprintf("The sample data ends on 31 December 2025; taking that as today, I read “%s” as %s.", asked, name))
		}
	}
	monthEnd := dataEnd.AddDate(0, 0, 1) // 2026-01-01, first day after the data

	// "this" is the data's latest period, "last" the one before: the
	// data's last day stands for today.
	for i, t := range toks {
		this := t == "this" || t == "current" || t == "latest"
		last := t == "last" || t == "previous" || t == "past"
		if !this && !last {
			goto other
		}
		switch at(i + 1) {
		case "month":
			used[i], used[i+1] = true, true
			from := time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC)
			if last {
				from = from.AddDate(0, -1, 0)
			}
			setWindow(from, from.AddDate(0, 1, 0), from.Format("January 2006"), t+" month")
			continue
		case "quarter":
			used[i], used[i+1] = true, true
			from, name := time.Date(2025, 10, 1, 0, 0, 0, 0, time.UTC), "Q4 2025"
			if last {
				from, name = from.AddDate(0, -3, 0), "Q3 2025"
			}
			setWindow(from, from.AddDate(0, 3, 0), name, t+" quarter")
			continue
		case "year":
			used[i], used[i+1] = true, true
			y := "2025"
			if last {
				y = "2024"
			}
			years = appendNew(years, y)
			p.notes = append(p.notes, fmt.Sprintf("The sample data ends on 31 December 2025; taking that as today, I read “%s year” as %s.", t, y))
			continue
		case "week":
			used[i], used[i+1] = true, true
			from := dataEnd.AddDate(0, 0, -6)
			if last {
				from = from.AddDate(0, 0, -7)
			}
			to := from.AddDate(0, 0, 7)
			setWindow(from, to, fmt.Sprintf("the week of %s to %s", from.Format("2 January 2006"), to.AddDate(0, 0, -1).Format("2 January 2006")), t+" week")
			continue
		}
	other:
		switch {
		case (t == "last" || t == "past") && at(i+2) != "":
			n, ok := parseCount(at(i + 1))
			unit := strings.TrimSuffix(at(i+2), "s")
			if !ok || (unit != "day" && unit != "week" && unit != "month" && unit != "year") {
				continue
			}
			used[i], used[i+1], used[i+2] = true, true, true
			var from time.Time
			switch unit {
			case "day":
				from = dataEnd.AddDate(0, 0, 1-n)
			case "week":
				from = dataEnd.AddDate(0, 0, 1-7*n)
			case "month":
				from = monthEnd.AddDate(0, -n, 0)
			case "year":
				from = monthEnd.AddDate(-n, 0, 0)
			}
			setWindow(from, monthEnd, fmt.Sprintf("%s to 31 December 2025", from.Format("2 January 2006")), strings.Join(toks[i:i+3], " "))
		case t == "today" || t == "yesterday":
			used[i] = true
			d := dataEnd
			if t == "yesterday" {
				d = d.AddDate(0, 0, -1)
			}
			setWindow(d, d.AddDate(0, 0, 1), d.Format("2 January 2006"), t)
		case len(t) == 2 && t[0] == 'q' && t[1] >= '1' && t[1] <= '4':
			used[i] = true
			q := int(t[1] - '0')
			if y := at(i + 1); isYear(y) || isYear(at(i-1)) {
				if !isYear(y) {
					y = at(i - 1)
				}
				yr, _ := strconv.Atoi(y)
				from := time.Date(yr, time.Month(3*q-2), 1, 0, 0, 0, 0, time.UTC)
				setWindow(from, from.AddDate(0, 3, 0), fmt.Sprintf("Q%d %d", q, yr), "")
				years = slices.DeleteFunc(years, func(s string) bool { return s == y })
			} else {
				for m := 3*q - 2; m <= 3*q; m++ {
					p.months = appendNew(p.months, fmt.Sprintf("%02d", m))
				}
			}
		default:
			m, ok := monthNames[t]
			if !ok || t == "may" && !isYear(at(i+1)) && at(i-1) != "in" {
				continue
			}
			used[i] = true
			if y := at(i + 1); isYear(y) {
				yr, _ := strconv.Atoi(y)
				from := time.Date(yr, m, 1, 0, 0, 0, 0, time.UTC)
				setWindow(from, from.AddDate(0, 1, 0), from.Format("January 2006"), "")
				years = slices.DeleteFunc(years, func(s string) bool { return s == y })
			} else {
				p.months = appendNew(p.months, fmt.Sprintf("%02d", int(m)))
			}
		}
	}
	// A window ("March 2025") and other periods ("2024", "in June") would
	// leave no rows: keep the window, and say so.
	if p.window != "" && len(years)+len(p.months) > 0 {
		var other []string
		other = append(other, years...)
		for _, m := range p.months {
			n, _ := strconv.Atoi(m)
			other = append(other, time.Month(n).String())
		}
		p.notes = append(p.notes, fmt.Sprintf("I can use one period at a time, so I used %s and not %s.", p.window, joinAnd(other)))
		years, p.months = nil, nil
	}
	p.years = years
	// "2024 vs 2025", "this year and last year": one row per year.
	if len(years) > 1 && p.dim == nil {
		p.dim, p.hasDim = dimYear, true
	}
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
func understand(input string, history []string) (parsed, bool) {
	var prev *plan
	for _, h := range history {
		if looksLikeSQL(h) {
			continue
		}
		if q, ok := resolve(parse(h), prev); ok && !q.cannot() {
			prev = &q.plan
		}
	}
	return resolve(parse(input), prev)
}

// cannot reports whether the question asks only for what the agent cannot
// give: a measure the data lacks, a calculation it does not make, or a
// breakdown it does not offer.
func (q parsed) cannot() bool {
	return (len(q.lacking) > 0 || len(q.badStats) > 0) && !q.hasMetric || q.badGrain != "" && !q.hasDim
}

// resolve completes a parsed message with the previous plan, if any.
func resolve(q parsed, prev *plan) (parsed, bool) {
	p := &q.plan
	onlyFilters := !q.hasMetric && !q.hasDim && q.filtered()
	switch {
	case !q.hasMetric && !q.hasDim && !(onlyFilters && q.followUp && prev != nil):
		return q, false
	case onlyFilters:
		// "what about France?": the previous question for other data.
		f := p.filters
		*p = *prev
		p.filters = f
	case !q.hasMetric:
		// "and by month?", or a breakdown alone: previous metric, else revenue.
		p.metric = metricRevenue
		if prev != nil {
			p.metric = prev.metric
			if !p.filtered() {
				p.filters = prev.filters
			}
		}
	case !q.hasDim && q.followUp && prev != nil:
		// "what about orders?": the previous breakdown for another metric.
		p.dim, p.top, p.ranked, p.ascending = prev.dim, prev.top, prev.ranked, prev.ascending
		if !p.filtered() {
			p.filters = prev.filters
		}
	}
	if p.dim == nil {
		p.top, p.ranked, p.ascending = 0, false, false
	}
	return q, true
}

// looksLikeSQL reports whether a message is an SQL statement rather than a
// question: it starts with a statement keyword, or it holds a semicolon
// next to a keyword that changes data.
func looksLikeSQL(s string) bool {
	toks := tokenize(s)
	if len(toks) == 0 {
		return false
	}
	lower := strings.ToLower(s)
	switch toks[0] {
	case "select":
		return strings.Contains(lower, " from ") || strings.Contains(lower, ";") || len(toks) == 1 ||
			len(toks) >= 2 && (toks[1] == "1" || strings.HasPrefix(strings.TrimSpace(lower[6:]), "*"))
	case "drop", "delete", "insert", "update", "alter", "create", "pragma", "attach", "detach", "truncate",
		"vacuum", "replace", "begin", "commit", "rollback", "explain", "with", "grant", "revoke":
		return len(toks) > 1 && !strings.HasSuffix(strings.TrimSpace(lower), "?")
	}
	if strings.Contains(lower, ";") || strings.Contains(lower, "--") {
		for _, t := range toks {
			switch t {
			case "drop", "delete", "insert", "update", "alter", "attach", "pragma", "select", "union", "truncate":
				return true
			}
		}
	}
	return false
}
