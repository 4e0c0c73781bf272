package demoagent

import (
	"slices"
	"strings"
)

// Tool names, as they appear in toolCall.name.
const (
	ToolMeta = "svcMeta"
	ToolSQL  = "svcSqlApi"
)

// MetaInput is the input of the svcMeta tool.
type MetaInput struct {
	SearchQuery string `json:"searchQuery"`
}

// MetaResult is the result of the svcMeta tool: the views of the data model
// that match the search, with their matching members.
type MetaResult struct {
	Cubes       []Cube `json:"cubes"`
	SearchQuery string `json:"searchQuery"`
}

// Cube is a view of the data model.
type Cube struct {
	Name    string   `json:"name"`
	Type    string   `json:"type"` // always "view"
	Title   string   `json:"title"`
	Members []Member `json:"members"`
}

// Member is a measure or dimension of a [Cube]. Name has the form
// <entity>.<member>.
type Member struct {
	Name        string `json:"name"`
	Title       string `json:"title"`
	Description string `json:"description"`
	// Type is string, number, time or boolean.
	Type string `json:"type"`
	// AggType is set on measures: count, sum, avg or countDistinct.
	AggType string `json:"aggType,omitempty"`
}

// dataModel returns the views over the sample data set. It builds a new
// slice on every call, so callers may keep or change what they get.
func dataModel() []Cube {
	return []Cube{
		{Name: "orders", Type: "view", Title: "Orders", Members: []Member{
			{Name: "orders.count", Title: "Orders", Description: "Number of orders placed.", Type: "number", AggType: "count"},
			{Name: "orders.revenue", Title: "Revenue", Description: "Sales amount: quantity times the price paid, summed over order lines.", Type: "number", AggType: "sum"},
			{Name: "orders.quantity", Title: "Quantity", Description: "Units sold: quantity summed over order lines.", Type: "number", AggType: "sum"},
			{Name: "orders.average_order_value", Title: "Average order value", Description: "Revenue divided by the number of orders.", Type: "number", AggType: "avg"},
			{Name: "orders.customers", Title: "Ordering customers", Description: "Number of distinct customers who ordered.", Type: "number", AggType: "countDistinct"},
			{Name: "orders.created_at", Title: "Order date", Description: "When the order was placed (2024-01-01 to 2025-12-31).", Type: "time"},
			{Name: "orders.country", Title: "Country", Description: "Country of the ordering customer.", Type: "string"},
			{Name: "orders.category", Title: "Product category", Description: "Category of the product ordered.", Type: "string"},
			{Name: "orders.product", Title: "Product", Description: "Name of the product ordered.", Type: "string"},
			{Name: "orders.customer", Title: "Customer", Description: "Name of the ordering customer.", Type: "string"},
		}},
		{Name: "products", Type: "view", Title: "Products", Members: []Member{
			{Name: "products.count", Title: "Products", Description: "Number of products in the catalog.", Type: "number", AggType: "count"},
			{Name: "products.name", Title: "Product name", Description: "Name of the product.", Type: "string"},
			{Name: "products.category", Title: "Category", Description: "Product category, such as Electronics or Books.", Type: "string"},
			{Name: "products.price", Title: "List price", Description: "Catalog price of the product.", Type: "number"},
		}},
		{Name: "customers", Type: "view", Title: "Customers", Members: []Member{
			{Name: "customers.count", Title: "Customers", Description: "Number of customers.", Type: "number", AggType: "count"},
			{Name: "customers.name", Title: "Customer name", Description: "Full name of the customer.", Type: "string"},
			{Name: "customers.country", Title: "Country", Description: "Country the customer lives in.", Type: "string"},
			{Name: "customers.created_at", Title: "Signup date", Description: "When the customer signed up.", Type: "time"},
		}},
	}
}

// searchStopWords are words that match too much to narrow a search.
var searchStopWords = map[string]bool{
	"a": true, "an": true, "and": true, "by": true, "for": true, "in": true, "of": true,
	"on": true, "per": true, "the": true, "to": true, "top": true, "what": true, "which": true,
	"how": true, "many": true, "much": true, "is": true, "are": true, "me": true, "show": true,
}

// searchModel answers svcMeta: the views and members whose name, title or
// description contain a word of q. A view that matches by name or title
// keeps all its members. When nothing matches, every view is returned.
func searchModel(q string) MetaResult {
	var words []string
	for _, w := range strings.FieldsFunc(strings.ToLower(q), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_')
	}) {
		if searchStopWords[w] || len(w) < 2 {
			continue
		}
		words = append(words, singular(w))
	}
	matches := func(s string) bool {
		s = strings.ToLower(s)
		return slices.ContainsFunc(words, func(w string) bool { return strings.Contains(s, w) })
	}

	var cubes []Cube
	for _, c := range dataModel() {
		if matches(c.Name) || matches(c.Title) {
			cubes = append(cubes, c)
			continue
		}
		var ms []Member
		for _, m := range c.Members {
			if matches(m.Name) || matches(m.Title) || matches(m.Description) {
				ms = append(ms, m)
			}
		}
		if len(ms) > 0 {
			c.Members = ms
			cubes = append(cubes, c)
		}
	}
	if len(cubes) == 0 {
		cubes = dataModel()
	}
	return MetaResult{Cubes: cubes, SearchQuery: q}
}

// singular strips a plural ending so that "countries" finds "country".
func singular(w string) string {
	switch {
	case strings.HasSuffix(w, "ies") && len(w) > 4:
		return w[:len(w)-3] + "y"
	case strings.HasSuffix(w, "ss"):
		return w
	case strings.HasSuffix(w, "s") && len(w) > 3:
		return w[:len(w)-1]
	}
	return w
}
