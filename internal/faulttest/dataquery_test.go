package faulttest_test

import (
	"crypto/rand"
	"database/sql"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/analytics"
	"github.com/embedkit/embedkit/examples/demoagent"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/faulttest"
	"github.com/embedkit/embedkit/internal/testdb"
)

// TestDataQueryAnalyticsDatabaseDown: the data query API over analytics
// on PostgreSQL answers 503 "the data source is temporarily unavailable"
// when that database refuses connections or stops answering, within about
// the data query's timeout, and not 400 "the query ran longer than ...":
// the query never ran. Once the database is back, the same query answers.
func TestDataQueryAnalyticsDatabaseDown(t *testing.T) {
	skipWithoutPostgres(t)
	dsn := os.Getenv(testdb.EnvPostgresDSN)
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	tag := strings.ToLower(rand.Text()[:10])
	cfg := analytics.PostgresConfig{Schema: "ek_fault_" + tag, Owner: "ek_fault_owner_" + tag, Reader: "ek_fault_reader_" + tag}
	t.Cleanup(func() {
		testdb.DropAnalytics(t, admin, cfg.Schema, cfg.Owner, cfg.Reader)
		admin.Close()
	})
	if err := demoagent.SetupPostgres(t.Context(), admin, cfg); err != nil {
		t.Fatal(err)
	}
	target, err := faulttest.PostgresAddr(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := faulttest.NewProxy(t, target)
	proxied, err := faulttest.ProxiedDSN(dsn, proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(proxied)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(cfg.Reader)
	reader, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reader.Close() })
	agent, err := demoagent.New(demoagent.WithPostgres(reader, cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Close() })

	const timeout = time.Second
	e := newEnv(t, envOpts{backend: testdb.SQLite, agent: agent, chatOpts: []chatstream.Option{chatstream.WithDataTimeout(timeout)}})
	query := func() (apitest.Response, time.Duration) {
		start := time.Now()
		r := e.Send(t, e.Request(t, http.MethodPost, "/api/v1/public/acme/agents/7/sql", apitest.AdminKey,
			map[string]any{"sqlQuery": "SELECT count(*) AS n FROM orders", "sessionSettings": map[string]any{"internalId": apitest.InternalUser}}))
		return r, time.Since(start)
	}
	if r, _ := query(); r.Status != http.StatusOK {
		t.Fatalf("before any fault: %d %s", r.Status, r.Raw)
	}
	for _, fault := range []struct {
		name  string
		start func()
	}{
		{"refused", proxy.Cut},
		{"black-holed", proxy.BlackHole},
	} {
		fault.start()
		r, took := query()
		if err := proxy.Restore(); err != nil {
			t.Fatal(err)
		}
		if r.Status != http.StatusServiceUnavailable || r.Body["error"] != "the data source is temporarily unavailable" || took > 3*timeout {
			t.Errorf("%s: %d %s after %v, want 503 \"the data source is temporarily unavailable\" within about %v", fault.name, r.Status, r.Raw, took, timeout)
		}
		if r, _ := query(); r.Status != http.StatusOK {
			t.Errorf("after %s and back: %d %s", fault.name, r.Status, r.Raw)
		}
	}
}
