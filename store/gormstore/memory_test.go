package gormstore_test

import (
	"context"
	"testing"

	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore/sqlite"
)

// TestMemoryDatabaseOutlivesCancelledTransactions: database/sql closes the
// connection of a transaction whose context ends, and an in-memory SQLite
// database lives only while one of its connections is open.
func TestMemoryDatabaseOutlivesCancelledTransactions(t *testing.T) {
	st, err := sqlite.Open(":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	look := store.Lookup{Scope: store.TenantWide(1), DeploymentID: 1}
	for range 10 {
		ctx, cancel := context.WithCancel(context.Background())
		_ = st.InTx(ctx, func(tx store.Tx) error {
			_, err := tx.Lookup(ctx, look)
			cancel()
			_, _ = tx.Lookup(ctx, look)
			return err
		})
	}
	if _, err := st.Lookup(context.Background(), look); err != nil {
		t.Fatalf("after cancelled transactions: %v", err)
	}
}
