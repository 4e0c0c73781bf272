package gormstore_test

import (
	"errors"
	"testing"

	"gorm.io/gorm/schema"

	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore"
	"github.com/embedkit/embedkit/store/gormstore/sqlite"
)

// TestOwnNamingStrategy checks that a host's naming strategy (table prefix,
// singular names) changes nothing embedkit reads and writes: the models pin
// their table and column names.
func TestOwnNamingStrategy(t *testing.T) {
	db := testdb.OpenGorm(t, testdb.SQLite, nil)
	db.Config.NamingStrategy = prefixNamer{}
	st, err := gormstore.OpenDB(db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, err := st.SaveAccount(t.Context(), store.Account{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	var acct gormstore.Account
	if err := db.First(&acct, a.ID).Error; err != nil {
		t.Fatalf("host reads the accounts model: %v", err)
	}
	if acct.Name != "acme" {
		t.Errorf("account = %+v", acct)
	}
	if db.Migrator().HasTable("host_accounts") {
		t.Error("the table prefix was applied to embedkit's table")
	}
}

type prefixNamer struct{ schema.NamingStrategy }

func (prefixNamer) TableName(table string) string      { return "host_" + table }
func (prefixNamer) ColumnName(_, column string) string { return "Host" + column }

// TestMemoryStoreOneConnection covers an in-memory database, whose pool
// has one connection for everything.
func TestMemoryStoreOneConnection(t *testing.T) {
	st, err := sqlite.Open(":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, err := st.SaveAccount(t.Context(), store.Account{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AccountByID(t.Context(), a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AccountByID(t.Context(), a.ID+1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("missing account: %v", err)
	}
}
