package demoagent

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// The sample data set. Everything below is generated from a fixed seed, so
// every Agent in every process holds the same rows.
const (
	dataSeed1 = 0x5eed_da7a
	dataSeed2 = 0xe3bed_c17

	numCustomers = 800
	numOrders    = 4000
	// firstOrderDay is the first day orders are placed on; orders span
	// orderDays days from there (2024-01-01 to 2025-12-31).
	orderDays = 731
)

var firstOrderDay = time.Date(2024, time.January, 1, 0, 0, 0, 0, time.UTC)

// country is a customer country and its share of customers in percent.
type country struct {
	name    string
	code    string   // ISO 3166-1 alpha-2
	aliases []string // lower-case extra words that name it in a question
	weight  int
}

var countries = []country{
	{"United States", "US", []string{"usa", "america", "united states"}, 22},
	{"Germany", "DE", []string{"german"}, 14},
	{"United Kingdom", "GB", []string{"uk", "britain", "united kingdom", "england"}, 12},
	{"France", "FR", []string{"french"}, 10},
	{"Japan", "JP", []string{"japanese"}, 8},
	{"Canada", "CA", []string{"canadian"}, 7},
	{"Spain", "ES", []string{"spanish"}, 6},
	{"Italy", "IT", []string{"italian"}, 6},
	{"Netherlands", "NL", []string{"dutch", "holland"}, 5},
	{"Australia", "AU", []string{"australian"}, 4},
	{"Brazil", "BR", []string{"brazilian"}, 4},
	{"Sweden", "SE", []string{"swedish"}, 2},
}

// category is a product category with its products' nouns and price range
// in cents.
type category struct {
	name           string
	aliases        []string
	nouns          []string
	minCents, span int
}

var categories = []category{
	{"Electronics", []string{"electronics", "electronic"}, []string{"Headphones", "Speaker", "Charger", "Keyboard", "Mouse", "Monitor", "Webcam", "Tablet Stand", "Power Bank", "Earbuds"}, 1999, 23000},
	{"Books", []string{"books", "book"}, []string{"Novel", "Cookbook", "Atlas", "Field Guide", "Biography", "Poetry Collection", "Travel Guide", "Comic", "Workbook", "Journal"}, 799, 3200},
	{"Clothing", []string{"clothing", "clothes", "apparel"}, []string{"T-Shirt", "Hoodie", "Jacket", "Jeans", "Sneakers", "Scarf", "Cap", "Socks", "Raincoat", "Sweater"}, 999, 11000},
	{"Home & Garden", []string{"home", "garden"}, []string{"Lamp", "Planter", "Cushion", "Rug", "Kettle", "Watering Can", "Candle", "Throw Blanket", "Cutting Board", "Mug"}, 899, 9000},
	{"Sports", []string{"sports", "sport"}, []string{"Yoga Mat", "Dumbbell Set", "Water Bottle", "Tennis Racket", "Football", "Running Belt", "Jump Rope", "Cycling Gloves", "Resistance Bands", "Climbing Chalk"}, 599, 12000},
	{"Toys", []string{"toys", "toy"}, []string{"Puzzle", "Building Blocks", "Plush Bear", "Kite", "Board Game", "Toy Car", "Marble Run", "Dollhouse", "Yo-Yo", "Card Game"}, 499, 6000},
	{"Beauty", []string{"beauty", "cosmetics"}, []string{"Face Cream", "Shampoo", "Lip Balm", "Perfume", "Hand Soap", "Sunscreen", "Hair Brush", "Nail Kit", "Body Lotion", "Face Mask"}, 399, 7000},
	{"Grocery", []string{"grocery", "groceries", "food"}, []string{"Coffee Beans", "Green Tea", "Olive Oil", "Dark Chocolate", "Honey", "Pasta", "Granola", "Hot Sauce", "Maple Syrup", "Spice Mix"}, 299, 2500},
}

// productsPerNoun is how many products (brands) each noun has.
const productsPerNoun = 2

var brands = []string{"Aurora", "Nimbus", "Summit", "Harbor", "Cedar", "Lumen", "Pioneer", "Willow", "Vertex", "Maple", "Orbit", "Juniper"}

var firstNames = []string{"Ada", "Ben", "Chloe", "David", "Elena", "Felix", "Grace", "Hugo", "Iris", "Jonas", "Kira", "Liam", "Mia", "Noah", "Olivia", "Paul", "Quinn", "Rosa", "Sam", "Tara", "Umar", "Vera", "Wen", "Xavier", "Yara", "Zoe", "Aiko", "Bruno", "Carla", "Diego", "Emma", "Finn", "Gina", "Hanna", "Ivan", "Julia", "Kenji", "Lena", "Marco", "Nora"}

var lastNames = []string{"Fischer", "Martin", "Smith", "Tanaka", "Garcia", "Rossi", "de Vries", "Silva", "Andersson", "Brown", "Dubois", "Schmidt", "Jones", "Sato", "Lopez", "Bianchi", "Jansen", "Costa", "Lindberg", "Wilson", "Moreau", "Weber", "Taylor", "Suzuki", "Fernandez", "Romano", "Bakker", "Pereira", "Nilsson", "Clark", "Laurent", "Wagner", "Evans", "Kato", "Ruiz", "Greco", "Visser", "Santos", "Berg", "Walker"}

// DataSize reports how many rows each table of the sample data set holds.
type DataSize struct {
	Customers, Products, Orders, OrderLines int
}

// schemaSQL creates the tables of the sample data set.
const schemaSQL = `
CREATE TABLE customers (
	id         INTEGER PRIMARY KEY,
	name       TEXT NOT NULL,
	country    TEXT NOT NULL,
	created_at TEXT NOT NULL
);
CREATE TABLE products (
	id       INTEGER PRIMARY KEY,
	name     TEXT NOT NULL UNIQUE,
	category TEXT NOT NULL,
	price    REAL NOT NULL
);
CREATE TABLE orders (
	id          INTEGER PRIMARY KEY,
	customer_id INTEGER NOT NULL REFERENCES customers(id),
	created_at  TEXT NOT NULL
);
CREATE TABLE order_lines (
	id         INTEGER PRIMARY KEY,
	order_id   INTEGER NOT NULL REFERENCES orders(id),
	product_id INTEGER NOT NULL REFERENCES products(id),
	quantity   INTEGER NOT NULL,
	price      REAL NOT NULL
);
CREATE INDEX order_lines_order_id ON order_lines(order_id);
CREATE INDEX orders_customer_id ON orders(customer_id);
`

// table is the rows of one table, ready to insert.
type table struct {
	name    string
	columns []string
	rows    [][]any
}

// generate builds the sample data set deterministically.
func generate() []table {
	r := rand.New(rand.NewPCG(dataSeed1, dataSeed2))
	const timeLayout = "2006-01-02 15:04:05"

	// Customers: unique names, countries by weight, sign-up in the year
	// before their first possible order.
	combos := r.Perm(len(firstNames) * len(lastNames))
	totalWeight := 0
	for _, c := range countries {
		totalWeight += c.weight
	}
	customers := table{name: "customers", columns: []string{"id", "name", "country", "created_at"}}
	for i := range numCustomers {
		k := combos[i]
		name := firstNames[k%len(firstNames)] + " " + lastNames[k/len(firstNames)]
		w := r.IntN(totalWeight)
		var ctry string
		for _, c := range countries {
			if w < c.weight {
				ctry = c.name
				break
			}
			w -= c.weight
		}
		signup := firstOrderDay.Add(-time.Duration(r.IntN(365*24*3600)) * time.Second)
		customers.rows = append(customers.rows, []any{i + 1, name, ctry, signup.Format(timeLayout)})
	}

	// Products: productsPerNoun brands per noun, prices in the category's
	// range, in cents.
	products := table{name: "products", columns: []string{"id", "name", "category", "price"}}
	var priceCents []int
	for ci, c := range categories {
		for ni, noun := range c.nouns {
			for b := range productsPerNoun {
				brand := brands[(ci*3+ni+b*5)%len(brands)]
				cents := c.minCents + r.IntN(c.span/100+1)*100
				priceCents = append(priceCents, cents)
				products.rows = append(products.rows, []any{len(products.rows) + 1, brand + " " + noun, c.name, float64(cents) / 100})
			}
		}
	}

	// Popularity: a random order of products, with the first ones picked
	// far more often.
	popular := r.Perm(len(products.rows))

	orders := table{name: "orders", columns: []string{"id", "customer_id", "created_at"}}
	lines := table{name: "order_lines", columns: []string{"id", "order_id", "product_id", "quantity", "price"}}
	for i := range numOrders {
		// Day: growing over time, with a peak in November and December.
		var day time.Time
		for {
			d := r.IntN(orderDays)
			day = firstOrderDay.AddDate(0, 0, d)
			w := (1 + float64(d)/orderDays) / 2
			if m := day.Month(); m == time.November || m == time.December {
				w *= 1.4
			}
			if r.Float64()*1.4 < w {
				break
			}
		}
		at := day.Add(time.Duration(8*3600+r.IntN(14*3600)) * time.Second)
		cust := int(float64(numCustomers)*math.Pow(r.Float64(), 1.4)) + 1
		orderID := i + 1
		orders.rows = append(orders.rows, []any{orderID, cust, at.Format(timeLayout)})

		n := 1 + int(math.Pow(r.Float64(), 1.8)*4)
		for range n {
			p := popular[int(float64(len(popular))*math.Pow(r.Float64(), 1.6))]
			qty := 1 + int(math.Pow(r.Float64(), 2.5)*5)
			cents := priceCents[p]
			if r.IntN(5) == 0 { // a 10% discount on one line in five
				cents = int(math.Round(float64(cents) * 0.9))
			}
			lines.rows = append(lines.rows, []any{len(lines.rows) + 1, orderID, p + 1, qty, float64(cents) / 100})
		}
	}
	return []table{customers, products, orders, lines}
}

// load creates the schema on conn and inserts the tables in one
// transaction, several rows per statement.
func load(ctx context.Context, conn *sql.Conn, tables []table) error {
	if _, err := conn.ExecContext(ctx, schemaSQL); err != nil {
		return fmt.Errorf("demoagent: create schema: %w", err)
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("demoagent: begin load: %w", err)
	}
	defer tx.Rollback() // a no-op after Commit
	const rowsPerInsert = 400
	for _, t := range tables {
		row := "(" + strings.TrimSuffix(strings.Repeat("?,", len(t.columns)), ",") + ")"
		for start := 0; start < len(t.rows); start += rowsPerInsert {
			chunk := t.rows[start:min(start+rowsPerInsert, len(t.rows))]
			var q strings.Builder
			q.WriteString("INSERT INTO " + t.name + " (" + strings.Join(t.columns, ", ") + ") VALUES ")
			args := make([]any, 0, len(chunk)*len(t.columns))
			for i, r := range chunk {
				if i > 0 {
					q.WriteByte(',')
				}
				q.WriteString(row)
				args = append(args, r...)
			}
			if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
				return fmt.Errorf("demoagent: load %s: %w", t.name, err)
			}
		}
	}
	if _, err := tx.ExecContext(ctx, "ANALYZE"); err != nil {
		return fmt.Errorf("demoagent: analyze: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("demoagent: commit load: %w", err)
	}
	return nil
}
