package demoagent

import (
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/analytics"
	"github.com/embedkit/embedkit/internal/testdb"
)

// TestPostgresSameAnswers loads the sample data set into PostgreSQL (two
// set-ups at once, as two replicas starting together would) and checks
// that the demo questions give the same rows there as over SQLite, for a
// user who sees everything and for one whose row filter applies.
func TestPostgresSameAnswers(t *testing.T) {
	reader, cfg := postgresDemo(t)
	pg, err := New(WithPostgres(reader, cfg), WithDelay(0))
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	lite, err := New(WithDelay(0))
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()

	questions := append(ExampleQuestions(), "orders per week", "revenue by quarter", "revenue by day last month",
		"orders in March", "revenue by year", "customers by country", "units by category excluding Germany",
		"revenue in Germany and France this year", "bottom 3 categories by average order value in 2024", "total revenue")
	users := []chatstream.User{
		{InternalID: "alice@acme.test"},
		{ExternalID: "de", Attributes: map[string]any{"country": "DE"}},
	}
	ctx := t.Context()
	for _, text := range questions {
		q, ok := understand(text, nil)
		if !ok || q.cannot() {
			t.Errorf("%q is not a question the agent answers", text)
			continue
		}
		for _, u := range users {
			tu := chatstream.Turn{User: u}
			want, err := lite.sql.Run(ctx, tu, analytics.SQLInput{SQLQuery: q.sqlText(false)})
			if err != nil {
				t.Fatalf("%q on SQLite: %v", text, err)
			}
			got, err := pg.sql.Run(ctx, tu, analytics.SQLInput{SQLQuery: q.sqlText(true)})
			if err != nil {
				t.Fatalf("%q on PostgreSQL: %v\n%s", text, err, q.sqlText(true))
			}
			if got.TotalRows != want.TotalRows || !reflect.DeepEqual(numbers(got.Data), want.Data) {
				t.Errorf("%q for %v: PostgreSQL %d rows %v\nSQLite %d rows %v", text, u, got.TotalRows, head(got.Data), want.TotalRows, head(want.Data))
			}
			// A raw statement's answer lists the rows alike.
			if g, w := sqlAnswer(got, "", analytics.Access{}), sqlAnswer(want, "", analytics.Access{}); g != w {
				t.Errorf("%q for %v: the rows as the answer shows them on PostgreSQL:\n%s\nSQLite:\n%s", text, u, g, w)
			}
			if len(want.Data) == 0 && u.InternalID != "" {
				t.Errorf("%q for %v: no rows", text, u)
			}
		}
	}
}

// numbers turns PostgreSQL's exact numerics into the float64 SQLite
// gives: the same answer is the same value (64188.60 is 64188.6).
func numbers(d [][]any) [][]any {
	out := make([][]any, len(d))
	for i, row := range d {
		out[i] = slices.Clone(row)
		for j, v := range row {
			if n, ok := v.(json.Number); ok {
				out[i][j], _ = n.Float64()
			}
		}
	}
	return out
}

func head(d [][]any) string {
	return fmt.Sprint(d[:min(len(d), 5)])
}

// postgresDemo sets the sample data set up in the PostgreSQL database of
// EMBEDKIT_TEST_POSTGRES_DSN (skipping without it), twice at once, with
// analytics objects of random names that the test drops at its end, and
// returns a reader of it. The data schema, embedkit_demo, stays: loading
// it again is a no-op.
func postgresDemo(t testing.TB) (*sql.DB, analytics.PostgresConfig) {
	t.Helper()
	dsn := os.Getenv("EMBEDKIT_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("EMBEDKIT_TEST_POSTGRES_DSN not set; skipping PostgreSQL tests")
	}
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	tag := strings.ToLower(rand.Text()[:10])
	cfg := analytics.PostgresConfig{Schema: "ek_demo_tool_" + tag, Owner: "ek_demo_owner_" + tag, Reader: "ek_demo_reader_" + tag}
	t.Cleanup(func() {
		testdb.DropAnalytics(t, admin, cfg.Schema, cfg.Owner, cfg.Reader)
		admin.Close()
	})
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() { errs[i] = SetupPostgres(t.Context(), admin, cfg) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("SetupPostgres: %v", err)
		}
	}
	var lines int
	if err := admin.QueryRow("SELECT count(*) FROM embedkit_demo.order_lines").Scan(&lines); err != nil || lines != len(generate()[3].rows) {
		t.Fatalf("embedkit_demo.order_lines holds %d rows (%v)", lines, err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(cfg.Reader)
	reader, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reader.Close() })
	return reader, cfg
}
