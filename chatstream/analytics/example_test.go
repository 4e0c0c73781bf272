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
