package chatstream_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
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
