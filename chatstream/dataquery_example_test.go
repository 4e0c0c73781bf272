package chatstream_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/store/gormstore/sqlite"
)

// shopAgent answers turns with its tools, one of which reads src (in a
// real host, an analytics.SQLTool given to the agent as its svcSqlApi).
// Its DataSource method makes it a chatstream.DataAgent: the data query
// API runs queries with the same source.
type shopAgent struct {
	chatstream.Agent
	src chatstream.DataSource
}

func (a shopAgent) DataSource(accountName, agentID string) chatstream.DataSource { return a.src }

// countries is a DataSource of one column, a row per country, whatever the
// query (a stand-in for an SQL executor).
type countries []string

func (c countries) QueryData(ctx context.Context, t chatstream.Turn, sqlQuery string, timeout time.Duration) (chatstream.DataRows, error) {
	return &countryRows{names: c, i: -1}, nil
}

type countryRows struct {
	names []string
	i     int
}

func (r *countryRows) Columns() []chatstream.DataColumn {
	return []chatstream.DataColumn{{Name: "country", ColumnType: "string"}}
}
func (r *countryRows) Next() bool    { r.i++; return r.i < len(r.names) }
func (r *countryRows) Values() []any { return []any{r.names[r.i]} }
func (r *countryRows) Err() error    { return nil }
func (r *countryRows) Close() error  { return nil }

// ExampleClient_QueryData mounts the handler of a DataAgent and reads every
// row of a query through the data query API with the Go client.
func ExampleClient_QueryData() {
	ctx := context.Background()
	st, err := sqlite.Open(":memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	if err := seed(ctx, st); err != nil {
		log.Fatal(err)
	}
	h := chatstream.NewHandler(st, shopAgent{revenueAgent, countries{"France", "Germany", "Japan"}},
		chatstream.WithDataRowLimit(2))
	defer h.Close()
	mux := http.NewServeMux()
	for _, rt := range h.Routes() {
		mux.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()

	c := chatstream.NewClient(srv.URL, chatstream.WithAPIKey("sk-acme"))
	res, err := c.QueryData(ctx, "acme", "7", chatstream.DataRequest{
		SQLQuery:        "SELECT country FROM customers",
		SessionSettings: &chatstream.SessionSettings{ExternalID: "jane"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Columns[0].Name)
	for row, err := range res.Rows() {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(row[0])
	}
	fmt.Println("rows:", res.TotalRows, "truncated:", res.Truncated)
	// Output:
	// country
	// France
	// Germany
	// rows: 2 truncated: true
}

// order is a row of a host's own data, kept in Go types.
type order struct {
	ID       int
	Customer string // the external user who placed it
	Amount   float32
	Placed   time.Time
}

// orderSource is a hand-written DataSource: it serves the user's own
// orders from a slice (a stand-in for a host's own query executor, which
// applies the row access of t.User). Its rows give the fields in their Go
// types.
type orderSource []order

func (s orderSource) QueryData(ctx context.Context, t chatstream.Turn, sqlQuery string, timeout time.Duration) (chatstream.DataRows, error) {
	if sqlQuery != "SELECT * FROM orders" {
		return nil, &chatstream.QueryError{Msg: "only SELECT * FROM orders is supported"}
	}
	var mine []order
	for _, o := range s {
		if o.Customer == t.User.ExternalID {
			mine = append(mine, o)
		}
	}
	return &orderRows{orders: mine, i: -1}, nil
}

type orderRows struct {
	orders []order
	i      int
}

func (r *orderRows) Columns() []chatstream.DataColumn {
	return []chatstream.DataColumn{
		{Name: "id", ColumnType: "number"}, {Name: "customer", ColumnType: "string"},
		{Name: "amount", ColumnType: "number"}, {Name: "placed", ColumnType: "time"},
	}
}
func (r *orderRows) Next() bool { r.i++; return r.i < len(r.orders) }
func (r *orderRows) Values() []any {
	o := r.orders[r.i]
	return []any{o.ID, o.Customer, o.Amount, o.Placed} // one value per column
}
func (r *orderRows) Err() error   { return nil }
func (r *orderRows) Close() error { return nil }

// ExampleDataSource serves a hand-written DataSource through the data
// query API: an int and a float32 arrive as JSON numbers, a time.Time as
// RFC 3339 in UTC with nine digits of nanoseconds; the source applies the
// user's row access.
func ExampleDataSource() {
	ctx := context.Background()
	st, err := sqlite.Open(":memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	if err := seed(ctx, st); err != nil {
		log.Fatal(err)
	}
	cet := time.FixedZone("CET", 3600)
	src := orderSource{
		{1, "jane", 19.99, time.Date(2024, 3, 5, 14, 7, 9, 0, cet)},
		{2, "joe", 5, time.Date(2024, 3, 6, 9, 0, 0, 0, time.UTC)},
		{3, "jane", 0.1, time.Date(2024, 3, 7, 10, 30, 0, 250_000_000, time.UTC)},
	}
	h := chatstream.NewHandler(st, shopAgent{revenueAgent, src})
	defer h.Close()
	mux := http.NewServeMux()
	for _, rt := range h.Routes() {
		mux.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()

	body := `{"sqlQuery": "SELECT * FROM orders", "sessionSettings": {"externalId": "jane"}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/api/v1/public/acme/agents/7/sql", strings.NewReader(body))
	if err != nil {
		log.Fatal(err)
	}
	req.Header.Set("Authorization", "Api-Key sk-acme")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Print(string(b))
	// Output:
	// {"schema":[{"name":"id","column_type":"number"},{"name":"customer","column_type":"string"},{"name":"amount","column_type":"number"},{"name":"placed","column_type":"time"}]}
	// {"data":[[1,"jane",19.99,"2024-03-05T13:07:09.000000000Z"],[3,"jane",0.1,"2024-03-07T10:30:00.250000000Z"]]}
	// {"totalRows":2}
}
