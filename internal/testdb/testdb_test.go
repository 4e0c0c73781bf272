package testdb_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
)

func TestOpen(t *testing.T) {
	for _, backend := range append(testdb.Backends(), testdb.Memory) {
		t.Run(backend, func(t *testing.T) {
			a := testdb.Open(t, backend)
			b := testdb.Open(t, backend)
			if _, err := a.SaveAccount(t.Context(), store.Account{Name: "acme"}); err != nil {
				t.Fatal(err)
			}
			if _, err := b.AccountByName(t.Context(), "acme"); err == nil {
				t.Error("two stores of one test share data")
			}
		})
	}
}

// TestSchemaDropped checks that a PostgreSQL schema is gone after its test.
func TestSchemaDropped(t *testing.T) {
	base := os.Getenv(testdb.EnvPostgresDSN)
	if base == "" {
		t.Skip(testdb.EnvPostgresDSN + " not set; skipping PostgreSQL tests")
	}
	var dsn string
	t.Run("inner", func(t *testing.T) {
		dsn = testdb.OpenDSN(t, testdb.Postgres)
	})
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := cfg.RuntimeParams["search_path"]
	conn, err := pgx.Connect(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if schema == "" || n != 0 {
		t.Errorf("schema %q still exists (%d) after its test", schema, n)
	}
}
