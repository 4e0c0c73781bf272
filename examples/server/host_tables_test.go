package main

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/embedkit/embedkit/internal/testdb"
)

// TestServerBesideHostTables starts the example server on a fresh SQLite
// database and a fresh PostgreSQL schema that already hold a host's own
// users and sessions tables: the server creates its tables beside them,
// serves a generate-session and its sessionId, and leaves the host's tables,
// indexes and rows as they were, also across a restart.
func TestServerBesideHostTables(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			db := testdb.OpenDSN(t, backend) // skips PostgreSQL without EMBEDKIT_TEST_POSTGRES_DSN
			if backend == testdb.Postgres {
				// Roles are server-wide: this test's own.
				t.Setenv(envAnalyticsSchema, "ek_host_"+strconv.FormatUint(rand.Uint64(), 36))
				t.Cleanup(func() { dropAnalytics(t, db) })
			}
			host := testdb.OpenGormDSN(t, db, nil)
			for _, stmt := range []string{
				"CREATE TABLE users (id BIGINT PRIMARY KEY, email TEXT NOT NULL)",
				"CREATE UNIQUE INDEX users_email ON users (email)",
				"CREATE TABLE sessions (id TEXT PRIMARY KEY, user_id BIGINT NOT NULL REFERENCES users (id), data TEXT)",
				"CREATE INDEX sessions_user ON sessions (user_id)",
				"INSERT INTO users VALUES (1, 'jane@example.com'), (2, 'ben@example.com')",
				"INSERT INTO sessions VALUES ('s1', 1, 'x')",
			} {
				if err := host.Exec(stmt).Error; err != nil {
					t.Fatal(err)
				}
			}
			names, rows := hostObjects(t, host), hostRows(t, host)
			if !slices.Contains(names, "table users") || !slices.Contains(names, "table sessions") || len(rows) != 3 {
				t.Fatalf("the host's tables are not where the server looks: %v %v", names, rows)
			}

			for run := range 2 { // the second start finds its tables made
				s := startServer(t, "-db", db)
				resp, b := do(t, http.DefaultClient, http.MethodPost, s.base+"/api/v1/embed/generate-session", "sk-acme-admin",
					map[string]any{"deploymentId": 1, "externalId": "jane", "email": "jane@example.com", "groups": []string{"sales"}})
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("run %d: generate-session = %d %s", run, resp.StatusCode, b)
				}
				var out struct{ SessionID string }
				if err := json.Unmarshal(b, &out); err != nil {
					t.Fatal(err)
				}
				resp, b = do(t, http.DefaultClient, http.MethodGet, s.base+"/embed/whoami?sessionId="+out.SessionID, "", nil)
				if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"jane"`) || !strings.Contains(string(b), "sales") {
					t.Fatalf("run %d: whoami = %d %s", run, resp.StatusCode, b)
				}
				s.shutdown(t)
			}

			if got := hostRows(t, host); !reflect.DeepEqual(got, rows) {
				t.Errorf("the host's rows changed:\n%v\nwant\n%v", got, rows)
			}
			after := hostObjects(t, host)
			if !slices.Contains(after, "table embedkit_users") {
				t.Fatalf("the server's tables are not beside the host's: %v", after)
			}
			for _, n := range names {
				if !slices.Contains(after, n) {
					t.Errorf("the host's %s is gone", n)
				}
			}
			for _, n := range after {
				if !slices.Contains(names, n) && !strings.HasPrefix(strings.Fields(n)[1], "embedkit_") {
					t.Errorf("the server created %s, which lacks the embedkit_ prefix", n)
				}
			}
		})
	}
}

// hostRows returns every row of the host's users and sessions tables.
func hostRows(t *testing.T, db *gorm.DB) []string {
	t.Helper()
	var out []string
	for _, q := range []string{
		"SELECT CAST(id AS TEXT) || ' ' || email FROM users ORDER BY id",
		"SELECT id || ' ' || CAST(user_id AS TEXT) || ' ' || COALESCE(data, '') FROM sessions ORDER BY id",
	} {
		var rows []string
		if err := db.Raw(q).Scan(&rows).Error; err != nil {
			t.Fatal(err)
		}
		out = append(out, rows...)
	}
	return out
}

// hostObjects lists the tables, indexes and sequences of the database's
// current schema (SQLite: its tables and named indexes) as "kind name",
// sorted.
func hostObjects(t *testing.T, db *gorm.DB) []string {
	t.Helper()
	q := `SELECT type || ' ' || name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'`
	if db.Dialector.Name() == "postgres" {
		q = `SELECT CASE c.relkind WHEN 'r' THEN 'table ' WHEN 'i' THEN 'index ' WHEN 'S' THEN 'sequence ' END || c.relname
			FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'i', 'S')`
	}
	var names []string
	if err := db.Raw(q).Scan(&names).Error; err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}
