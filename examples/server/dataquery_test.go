package main

import (
	"crypto/rand"
	"database/sql"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/testdb"
)

// TestDataQueryOnBothDatabases runs the data query API of the example
// server on SQLite and on PostgreSQL (the demo data set loaded into
// embedkit_demo): the user's row filter applies, a chat answer's sqlQuery
// gives the tool's rows and the same rows on both databases, a result
// over the row cap is cut at 100,000 rows, and a session token downloads
// CSV.
func TestDataQueryOnBothDatabases(t *testing.T) {
	results := map[string][][]any{}
	for _, backend := range []string{testdb.SQLite, testdb.Postgres} {
		t.Run(backend, func(t *testing.T) {
			db := testdb.OpenDSN(t, backend) // skips PostgreSQL without EMBEDKIT_TEST_POSTGRES_DSN
			if backend == testdb.Postgres {
				// Roles are server-wide: this test's own.
				t.Setenv(envAnalyticsSchema, "ek_srv_"+strings.ToLower(rand.Text()[:10]))
				t.Cleanup(func() { dropAnalytics(t, db) })
			}
			s := startServer(t, "-db", db)
			c := chatstream.NewClient(s.base, chatstream.WithAPIKey("sk-acme-admin"))
			ctx := t.Context()
			de := &chatstream.SessionSettings{ExternalID: "data-de", UserAttributes: []chatstream.UserAttribute{{Name: "country", Value: "Germany"}}}

			// The row filter applies.
			rows := queryAll(t, c, chatstream.DataRequest{SQLQuery: "SELECT DISTINCT country FROM orders", SessionSettings: de})
			if !reflect.DeepEqual(rows, [][]any{{"Germany"}}) {
				t.Errorf("countries seen by a German user: %v", rows)
			}

			// A chat answer's sqlQuery through the API: every row of the
			// tool's result.
			var res struct {
				SQLQuery  string  `json:"sqlQuery"`
				Data      [][]any `json:"data"`
				TotalRows int     `json:"totalRows"`
			}
			for m, err := range c.Stream(ctx, "acme", "7", chatstream.Request{Input: "revenue by product", SessionSettings: &chatstream.SessionSettings{InternalID: "alice@acme.test"}}) {
				if err != nil {
					t.Fatal(err)
				}
				if tc := m.ToolCall; tc != nil && tc.Name == "svcSqlApi" && tc.Result != nil {
					if err := jsonUnmarshal(*tc.Result, &res); err != nil {
						t.Fatal(err)
					}
				}
			}
			if res.SQLQuery == "" || res.TotalRows <= len(res.Data) {
				t.Fatalf("the chat's result: %d rows of %d", len(res.Data), res.TotalRows)
			}
			all := queryAll(t, c, chatstream.DataRequest{SQLQuery: res.SQLQuery, SessionSettings: &chatstream.SessionSettings{InternalID: "alice@acme.test"}})
			if len(all) != res.TotalRows || !reflect.DeepEqual(normalize(all[:len(res.Data)]), normalize(res.Data)) {
				t.Errorf("the API gave %d rows, the tool %d; first rows %v vs %v", len(all), res.TotalRows, all[:3], res.Data[:3])
			}
			results[backend] = all

			// Over the row cap.
			start := time.Now()
			dr, err := c.QueryData(ctx, "acme", "7", chatstream.DataRequest{
				SQLQuery:        "SELECT o.order_id, o.product, p.name, p.price FROM orders AS o CROSS JOIN products AS p",
				SessionSettings: &chatstream.SessionSettings{InternalID: "alice@acme.test"}})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, err := range dr.Rows() {
				if err != nil {
					t.Fatal(err)
				}
				n++
			}
			if n != chatstream.DefaultDataRowLimit || dr.TotalRows != n || !dr.Truncated {
				t.Errorf("cross join: %d rows, totalRows %d, truncated %v", n, dr.TotalRows, dr.Truncated)
			}
			t.Logf("%s: %d rows in %v", backend, n, time.Since(start))

			// CSV with the session token of the chat page.
			_, body := do(t, http.DefaultClient, http.MethodPost, s.base+"/api/v1/embed/generate-session", "sk-acme-admin",
				map[string]any{"deploymentId": 1, "externalId": "data-jp", "userAttributes": []map[string]any{{"name": "country", "value": "Japan"}}})
			var gs struct{ SessionID string }
			_ = jsonUnmarshal(string(body), &gs)
			_, body = do(t, http.DefaultClient, http.MethodPost, s.base+"/api/v1/embed/session/token", "", map[string]any{"sessionId": gs.SessionID})
			var tok struct{ Token string }
			_ = jsonUnmarshal(string(body), &tok)
			req, _ := http.NewRequest(http.MethodPost, s.base+"/api/v1/public/acme/agents/7/sql",
				strings.NewReader(`{"sqlQuery":"SELECT country, COUNT(*) AS lines FROM orders GROUP BY country"}`))
			req.Header.Set("Authorization", "Bearer "+tok.Token)
			req.Header.Set("Accept", "text/csv")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			recs, err := csv.NewReader(resp.Body).ReadAll()
			if err != nil || len(recs) != 2 || recs[1][0] != "Japan" || resp.Header.Get("Content-Disposition") != `attachment; filename="result.csv"` {
				t.Errorf("CSV: %v %v %v", recs, err, resp.Header)
			}
			if resp.Trailer.Get("Embedkit-Total-Rows") != "1" {
				t.Errorf("trailers %v", resp.Trailer)
			}
		})
	}
	if a, b := results[testdb.SQLite], results[testdb.Postgres]; a != nil && b != nil && !reflect.DeepEqual(normalize(a), normalize(b)) {
		t.Errorf("revenue by product differs between SQLite and PostgreSQL")
	}
}

// queryAll reads every row of a data query.
func queryAll(t *testing.T, c *chatstream.Client, req chatstream.DataRequest) [][]any {
	t.Helper()
	dr, err := c.QueryData(t.Context(), "acme", "7", req)
	if err != nil {
		t.Fatalf("%s: %v", req.SQLQuery, err)
	}
	var out [][]any
	for row, err := range dr.Rows() {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, row)
	}
	if dr.Truncated {
		t.Fatalf("%s: truncated", req.SQLQuery)
	}
	return out
}

// normalize makes whole numbers float64, as a tool result decoded from
// JSON holds them.
func normalize(rows [][]any) [][]any {
	out := make([][]any, len(rows))
	for i, r := range rows {
		out[i] = make([]any, len(r))
		for j, v := range r {
			if n, ok := v.(int64); ok {
				v = float64(n)
			}
			out[i][j] = v
		}
	}
	return out
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// dropAnalytics drops the analytics schema and roles the server set up
// under this test's EMBED_ANALYTICS_SCHEMA.
func dropAnalytics(t *testing.T, dsn string) {
	schema := envOr(envAnalyticsSchema, "")
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Error(err)
		return
	}
	defer admin.Close()
	testdb.DropAnalytics(t, admin, schema, schema+"_owner", schema+"_reader")
}

// TestLLMAgentOnPostgres runs -agent llm with -db postgres: the model's
// SQL runs on the demo data set in PostgreSQL under the user's row filter,
// and the data query API (the llm agent's svcSqlApi tool as data source)
// returns the same rows for it.
func TestLLMAgentOnPostgres(t *testing.T) {
	db := testdb.OpenDSN(t, testdb.Postgres) // skips without EMBEDKIT_TEST_POSTGRES_DSN
	t.Setenv(envAnalyticsSchema, "ek_srv_"+strings.ToLower(rand.Text()[:10]))
	t.Cleanup(func() { dropAnalytics(t, db) })
	const q = "SELECT country, COUNT(DISTINCT order_id) AS orders FROM orders GROUP BY country ORDER BY country"
	f := &fakeModel{replies: [][]string{
		{sseToolCalls([2]string{"svcSqlApi", `{"sqlQuery":"` + q + `","queryTitle":"Orders by country","description":"d","userRequest":"u"}`}),
			sseChunk(map[string]any{}, "tool_calls")},
		{sseChunk(map[string]any{"role": "assistant", "content": "Done."}, nil), sseChunk(map[string]any{}, "stop")},
	}}
	endpoint := httptest.NewServer(f)
	defer endpoint.Close()
	t.Setenv("OPENAI_BASE_URL", endpoint.URL+"/v1")
	s := startServer(t, "-db", db, "-agent", "llm", "-llm-model", "test-model")
	c := chatstream.NewClient(s.base, chatstream.WithAPIKey("sk-acme-admin"))
	de := &chatstream.SessionSettings{ExternalID: "llm-de", UserAttributes: []chatstream.UserAttribute{{Name: "country", Value: "Germany"}}}
	var res struct {
		Data [][]any `json:"data"`
	}
	for m, err := range c.Stream(t.Context(), "acme", "7", chatstream.Request{Input: "orders by country", SessionSettings: de}) {
		if err != nil {
			t.Fatal(err)
		}
		if tc := m.ToolCall; tc != nil && tc.Result != nil {
			if err := jsonUnmarshal(*tc.Result, &res); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(res.Data) != 1 || res.Data[0][0] != "Germany" {
		t.Fatalf("the model's query on PostgreSQL gave %v", res.Data)
	}
	rows := queryAll(t, c, chatstream.DataRequest{SQLQuery: q, SessionSettings: de})
	if !reflect.DeepEqual(normalize(rows), normalize(res.Data)) {
		t.Errorf("data query API: %v, the tool: %v", rows, res.Data)
	}
}
