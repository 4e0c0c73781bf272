package testdb

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"
)

// DropAnalytics drops what analytics.SetupPostgres made on admin's
// database for a schema, an owner and a reader role: the schema with its
// views, and the three roles (the owner's "<owner>_functions" too) with
// what they own. What does not exist is skipped; any other failure is a
// test error. It does not close admin.
func DropAnalytics(t testing.TB, admin *sql.DB, schema, owner, reader string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	functions := owner + "_functions"
	for _, q := range []string{"DROP SCHEMA IF EXISTS " + schema + " CASCADE", "DROP OWNED BY " + owner + ", " + reader + ", " + functions,
		"DROP ROLE IF EXISTS " + owner, "DROP ROLE IF EXISTS " + reader, "DROP ROLE IF EXISTS " + functions} {
		if _, err := admin.ExecContext(ctx, q); err != nil && !strings.Contains(err.Error(), "does not exist") {
			t.Errorf("%s: %v", q, err)
		}
	}
}
