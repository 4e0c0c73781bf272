package demoagent

import (
	"strings"

	"github.com/embedkit/embedkit/chatstream/analytics"
)

// Tool names, as they appear in toolCall.name.
const (
	ToolMeta = analytics.MetaToolName
	ToolSQL  = analytics.SQLToolName
)

// countryFilter is the row-level security of the sample data: an external
// user sees the rows of the customers of the countries in their "country"
// attribute.
func countryFilter() []analytics.RowFilter {
	return []analytics.RowFilter{{Attribute: "country", Column: "country", Normalize: canonicalCountry}}
}

// Model returns the data model of the sample data set in SQLite: the
// views the tools let queries read, with their members and the row filter
// on "country". It returns a new Model on every call.
func Model() *analytics.Model { return modelOver("main") }

// PostgresModel returns the data model of the sample data set in
// PostgreSQL, in the schema [PostgresSchema]: the views of [Model] over
// the tables there. It returns a new Model on every call.
func PostgresModel() *analytics.Model { return modelOver(PostgresSchema) }

// modelOver returns the data model over the tables of schema.
func modelOver(schema string) *analytics.Model {
	return &analytics.Model{Views: []analytics.View{
		{
			Name: "orders", Title: "Orders",
			Description: "One row per order line (a product in an order), with its order, customer and product. " +
				"Count orders with COUNT(DISTINCT order_id). Orders run from 2024-01-01 to 2025-12-31. " +
				"Columns: line_id, order_id, created_at, customer_id, customer, country, product_id, product, category, quantity, price.",
			SQL: `SELECT ol.id AS line_id, o.id AS order_id, o.created_at, c.id AS customer_id, c.name AS customer,
       c.country, p.id AS product_id, p.name AS product, p.category, ol.quantity, ol.price
FROM ` + schema + `.order_lines AS ol
JOIN ` + schema + `.orders AS o ON o.id = ol.order_id
JOIN ` + schema + `.customers AS c ON c.id = o.customer_id
JOIN ` + schema + `.products AS p ON p.id = ol.product_id`,
			Filters: countryFilter(),
			Members: []analytics.Member{
				{Name: "orders.count", Title: "Orders", Description: "Number of orders placed: COUNT(DISTINCT order_id).", Type: "number", AggType: "count"},
				{Name: "orders.revenue", Title: "Revenue", Description: "Sales amount: SUM(quantity * price), the price paid per unit.", Type: "number", AggType: "sum"},
				{Name: "orders.quantity", Title: "Quantity", Description: "Units sold: SUM(quantity).", Type: "number", AggType: "sum"},
				{Name: "orders.average_order_value", Title: "Average order value", Description: "Revenue per order: SUM(quantity * price) / COUNT(DISTINCT order_id).", Type: "number", AggType: "avg"},
				{Name: "orders.customers", Title: "Ordering customers", Description: "Number of distinct customers who ordered: COUNT(DISTINCT customer_id).", Type: "number", AggType: "countDistinct"},
				{Name: "orders.created_at", Title: "Order date", Description: "When the order was placed, as 'YYYY-MM-DD hh:mm:ss' text (2024-01-01 to 2025-12-31).", Type: "time"},
				{Name: "orders.country", Title: "Country", Description: "Country of the ordering customer.", Type: "string"},
				{Name: "orders.category", Title: "Product category", Description: "Category of the product ordered.", Type: "string"},
				{Name: "orders.product", Title: "Product", Description: "Name of the product ordered.", Type: "string"},
				{Name: "orders.customer", Title: "Customer", Description: "Name of the ordering customer.", Type: "string"},
				{Name: "orders.price", Title: "Unit price paid", Description: "Price paid per unit on the order line, after any discount.", Type: "number"},
			},
		},
		{
			Name: "products", Title: "Products",
			Description: "One row per product of the catalog. Columns: id, name, category, price.",
			SQL:         "SELECT id, name, category, price FROM " + schema + ".products",
			Members: []analytics.Member{
				{Name: "products.count", Title: "Products", Description: "Number of products in the catalog.", Type: "number", AggType: "count"},
				{Name: "products.name", Title: "Product name", Description: "Name of the product.", Type: "string"},
				{Name: "products.category", Title: "Category", Description: "Product category, such as Electronics or Books.", Type: "string"},
				{Name: "products.price", Title: "List price", Description: "Catalog price of the product.", Type: "number"},
			},
		},
		{
			Name: "customers", Title: "Customers",
			Description: "One row per customer. Columns: id, name, country, created_at.",
			SQL:         "SELECT id, name, country, created_at FROM " + schema + ".customers",
			Filters:     countryFilter(),
			Members: []analytics.Member{
				{Name: "customers.count", Title: "Customers", Description: "Number of customers.", Type: "number", AggType: "count"},
				{Name: "customers.name", Title: "Customer name", Description: "Full name of the customer.", Type: "string"},
				{Name: "customers.country", Title: "Country", Description: "Country the customer lives in.", Type: "string"},
				{Name: "customers.created_at", Title: "Signup date", Description: "When the customer signed up.", Type: "time"},
			},
		},
	}}
}

// canonicalCountry maps "de", "germany" or "German" to "Germany". A value
// naming no country of the data set is kept as given: it matches no row.
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
