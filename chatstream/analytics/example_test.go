package analytics_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/analytics"
)

func Example() {
	// The host's data. A real host opens its own file, read-only, for the
	// tool: sql.Open("sqlite3", "file:shop.db?mode=ro").
	db, _ := sql.Open("sqlite3", "file:/example-shop?vfs=memdb")
	defer db.Close()
	db.SetMaxIdleConns(4) // keep the in-memory database alive
	db.Exec(`CREATE TABLE sales (id INTEGER PRIMARY KEY, country TEXT, amount REAL);
		INSERT INTO sales (country, amount) VALUES ('Germany', 10), ('Germany', 5), ('France', 7);`)

	model := &analytics.Model{Views: []analytics.View{{
		Name: "sales", Title: "Sales", SQL: "SELECT country, amount FROM main.sales",
		Filters: []analytics.RowFilter{{Attribute: "country", Column: "country"}},
		Members: []analytics.Member{{Name: "sales.amount", Title: "Amount", Type: "number", AggType: "sum"}},
	}}}
	tool, err := analytics.NewSQLTool(db, model)
	if err != nil {
		fmt.Println(err)
		return
	}

	turn := chatstream.Turn{User: chatstream.User{ExternalID: "hans", Attributes: map[string]any{"country": "Germany"}}}
	for _, q := range []string{
		`{"sqlQuery": "SELECT country, SUM(amount) AS total FROM sales GROUP BY country"}`,
		`{"sqlQuery": "SELECT SUM(amount) FROM main.sales"}`,
		`{"sqlQuery": "DELETE FROM sales"}`,
	} {
		res, err := tool.Call(context.Background(), turn, json.RawMessage(q))
		if err != nil {
			fmt.Println("tool error:", err)
			continue
		}
		b, _ := json.Marshal(res.(*analytics.SQLResult).Data)
		fmt.Println("rows:", string(b))
	}
	// Output:
	// rows: [["Germany",15]]
	// tool error: the query may read only the views of the data model (sales)
	// tool error: only a single read-only SELECT statement is allowed
}

// QueryData streams every row of a query, under the same row access as
// the tool: this is what the data query API serves.
func ExampleSQLTool_QueryData() {
	db, _ := sql.Open("sqlite3", "file:/example-data?vfs=memdb")
	defer db.Close()
	db.SetMaxIdleConns(4)
	db.Exec(`CREATE TABLE sales (id INTEGER PRIMARY KEY, country TEXT, amount REAL);
		INSERT INTO sales (country, amount) VALUES ('Germany', 10), ('Germany', 5), ('France', 7);`)
	model := &analytics.Model{Views: []analytics.View{{
		Name: "sales", Title: "Sales", SQL: "SELECT country, amount FROM main.sales",
		Filters: []analytics.RowFilter{{Attribute: "country", Column: "country"}},
	}}}
	tool, err := analytics.NewSQLTool(db, model)
	if err != nil {
		fmt.Println(err)
		return
	}
	turn := chatstream.Turn{User: chatstream.User{ExternalID: "hans", Attributes: map[string]any{"country": "Germany"}}}
	rows, err := tool.QueryData(context.Background(), turn, "SELECT country, amount FROM sales ORDER BY amount", 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rows.Close()
	fmt.Println(rows.Columns())
	for rows.Next() {
		fmt.Println(rows.Values())
	}
	// Output:
	// [{country string} {amount number}]
	// [Germany 5]
	// [Germany 10]
}

// On PostgreSQL, the host sets up the views once per start (through a
// pool of a role that owns the tables) and runs queries through a pool
// that logs in as the reader role.
func ExampleNewPostgresSQLTool() {
	ctx := context.Background()
	model := &analytics.Model{Views: []analytics.View{{
		Name: "sales", Title: "Sales", SQL: "SELECT country, amount FROM shop.sales",
		Filters: []analytics.RowFilter{{Attribute: "country", Column: "country"}},
	}}}
	cfg := analytics.PostgresConfig{Schema: "shop_analytics", Owner: "shop_analytics_owner", Reader: "shop_analytics_reader"}
	admin, _ := sql.Open("pgx", "postgres://shop@127.0.0.1/shop")
	if err := analytics.SetupPostgres(ctx, admin, model, cfg); err != nil {
		fmt.Println(err)
		return
	}
	reader, _ := sql.Open("pgx", "postgres://shop_analytics_reader@127.0.0.1/shop")
	tool, err := analytics.NewPostgresSQLTool(reader, model, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := tool.Run(ctx, chatstream.Turn{User: chatstream.User{InternalID: "alice"}}, analytics.SQLInput{SQLQuery: "SELECT country, sum(amount) FROM sales GROUP BY 1"})
	fmt.Println(res, err)
}
