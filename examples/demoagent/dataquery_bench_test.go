package demoagent

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
)

// crossJoin yields 4,000 orders × 160 products: more rows than the data
// query API's cap of 100,000.
const crossJoin = "SELECT o.order_id, o.product, o.country, p.name, p.price FROM orders AS o CROSS JOIN products AS p"

// BenchmarkDataQuery streams 100,000 rows (the row cap) of a cross join
// over the demo views through the data query API over real HTTP, as
// NDJSON and as CSV, on SQLite and on PostgreSQL, reading the whole
// answer; rows/s is the figure.
func BenchmarkDataQuery(b *testing.B) {
	for _, backend := range []string{testdb.SQLite, testdb.Postgres} {
		b.Run(backend, func(b *testing.B) {
			s := dataServer(b, backend)
			for _, format := range []string{"ndjson", "csv"} {
				b.Run(format, func(b *testing.B) {
					start := time.Now()
					for b.Loop() {
						resp := s.post(b, crossJoin, format == "csv")
						n, _ := io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if format == "csv" && resp.Trailer.Get(chatstream.TrailerTotalRows) != "100000" || n == 0 {
							b.Fatalf("answer of %d bytes, trailers %v", n, resp.Trailer)
						}
					}
					b.ReportMetric(float64(b.N)*chatstream.DefaultDataRowLimit/time.Since(start).Seconds(), "rows/s")
				})
			}
		})
	}
}

// BenchmarkDataQueryFirstByte is the time to the schema line of a query
// of the chat's own ("revenue by country"), sent as the chat page sends it
// (a session token of a user with a country), the rest of the answer read
// after it.
func BenchmarkDataQueryFirstByte(b *testing.B) {
	q, _ := understand("revenue by country", nil)
	for _, backend := range []string{testdb.SQLite, testdb.Postgres} {
		b.Run(backend, func(b *testing.B) {
			s := dataServer(b, backend)
			s.token = s.Token(b, s.GenerateSession(b, map[string]any{"deploymentId": 1, "externalId": "bench-de",
				"userAttributes": []map[string]any{{"name": "country", "value": "Germany"}}}))
			sql := q.sqlText(backend == testdb.Postgres)
			var total time.Duration
			for b.Loop() {
				start := time.Now()
				resp := s.post(b, sql, false)
				line, err := bufio.NewReader(resp.Body).ReadBytes('\n')
				total += time.Since(start)
				if err != nil || !bytes.HasPrefix(line, []byte(`{"schema":`)) {
					b.Fatalf("first line %q: %v", line, err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms-to-first-line")
		})
	}
}

type dataBench struct {
	*apitest.Server
	// token, when set, authenticates instead of the admin key and the
	// internal user.
	token string
}

// dataServer serves the chat handler over the demo agent on backend (the
// store and the data set alike).
func dataServer(b *testing.B, backend string) dataBench {
	var opts []Option
	if backend == testdb.Postgres {
		reader, cfg := postgresDemo(b)
		opts = append(opts, WithPostgres(reader, cfg))
	}
	a, err := New(opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })
	s := apitest.New(b, apitest.Target{Backend: backend, Router: apitest.ServeMux}, apitest.WithRoutes(func(s *apitest.Server) []apitest.Route {
		h := chatstream.NewHandler(s.Store, a)
		b.Cleanup(func() { h.Close() })
		var rs []apitest.Route
		for _, r := range h.Routes() {
			rs = append(rs, apitest.Route(r))
		}
		return rs
	}))
	return dataBench{Server: s}
}

// post sends a data query of the internal user (every row), or of the
// token's user.
func (s dataBench) post(b *testing.B, sql string, csv bool) *http.Response {
	body := `{"sqlQuery":` + jsonString(sql) + `,"sessionSettings":{"internalId":"` + apitest.InternalUser + `"}}`
	auth := "Api-Key " + apitest.AdminKey
	if s.token != "" {
		body, auth = `{"sqlQuery":`+jsonString(sql)+`}`, "Bearer "+s.token
	}
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/api/v1/public/acme/agents/7/sql", strings.NewReader(body))
	req.Header.Set("Authorization", auth)
	if csv {
		req.Header.Set("Accept", "text/csv")
	}
	resp, err := s.Client().Do(req)
	if err != nil {
		b.Fatal(err)
	}
	if resp.StatusCode != 200 {
		msg, _ := io.ReadAll(resp.Body)
		b.Fatalf("%d %s", resp.StatusCode, msg)
	}
	return resp
}

func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
