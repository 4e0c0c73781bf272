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
	st := openOn(t, db)
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

// TestUserDataOrderBesideLinguisticCollation checks that UserData orders
// names by their bytes, as on SQLite and in memstore, also in a PostgreSQL
// database whose text sorts by a language's rules (a host's en_US.UTF-8
// default, simulated by the ICU root collation on the name columns).
func TestUserDataOrderBesideLinguisticCollation(t *testing.T) {
	dsn := testdb.OpenDSN(t, testdb.Postgres)
	st, err := testdb.OpenStore(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	db := testdb.OpenGormDSN(t, dsn, nil)
	for _, table := range []string{"embedkit_catalog_groups", "embedkit_catalog_attributes"} {
		if err := db.Exec(`ALTER TABLE ` + table + ` ALTER COLUMN name TYPE text COLLATE "und-x-icu"`).Error; err != nil {
			t.Skipf("no ICU collation: %v", err)
		}
	}
	ctx := t.Context()
	a, err := st.SaveAccount(ctx, store.Account{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	s := store.TenantWide(a.ID)
	names := []string{"Zeta", "alpha", "beta"} // byte order
	if err := st.UpsertDefinitions(ctx, s, []store.GroupDef{{Name: "beta"}, {Name: "Zeta"}, {Name: "alpha"}},
		[]store.AttributeDef{{Name: "beta", Type: store.TypeString}, {Name: "Zeta", Type: store.TypeString}, {Name: "alpha", Type: store.TypeString}}); err != nil {
		t.Fatal(err)
	}
	res, err := st.Lookup(ctx, store.Lookup{Scope: s, AttrNames: names, GroupNames: names})
	if err != nil {
		t.Fatal(err)
	}
	up := store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: "u"}, Persistent: true, SetGroups: true, GroupScope: s}
	for _, g := range res.Groups {
		up.Groups = append(up.Groups, g.ID)
	}
	for _, at := range res.Attributes {
		up.Attributes = append(up.Attributes, store.AttributeValue{AttributeID: at.ID, Value: []byte(`"v"`)})
	}
	u, err := st.UpsertUser(ctx, up)
	if err != nil {
		t.Fatal(err)
	}
	d, err := st.UserData(ctx, u.ID, s)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		if len(d.Attributes) != 3 || len(d.Groups) != 3 || d.Attributes[i].Name != n || d.Groups[i].Name != n {
			t.Fatalf("UserData = %+v, want attributes and groups in the order %q", d, names)
		}
	}
}
