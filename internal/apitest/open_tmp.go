package apitest

// Temporary store opener until internal/testdb lands.

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore"
)

var schemaSeq atomic.Int64

func backends() []string {
	b := []string{"sqlite"}
	if os.Getenv("EMBEDKIT_TEST_POSTGRES_DSN") != "" {
		b = append(b, "postgres")
	}
	return b
}

func openStore(t testing.TB, backend string, opts ...gormstore.Option) store.Store {
	t.Helper()
	var dsn string
	switch backend {
	case "sqlite":
		dsn = filepath.Join(t.TempDir(), "embed.db")
	case "postgres":
		base := os.Getenv("EMBEDKIT_TEST_POSTGRES_DSN")
		db, err := sql.Open("pgx", base)
		if err != nil {
			t.Fatal(err)
		}
		schema := fmt.Sprintf("apitest_%d_%d", time.Now().UnixNano(), schemaSeq.Add(1))
		if _, err := db.Exec("CREATE SCHEMA " + schema); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = db.Exec("DROP SCHEMA " + schema + " CASCADE"); db.Close() })
		sep := "?"
		if containsQ(base) {
			sep = "&"
		}
		dsn = base + sep + "search_path=" + schema
	}
	st, err := gormstore.Open(dsn, opts...)
	if err != nil {
		t.Fatalf("apitest: open %s: %v", backend, err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func containsQ(s string) bool {
	for _, c := range s {
		if c == '?' {
			return true
		}
	}
	return false
}
