package gormstore_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore"
)

// TestMigrateFromVersion5 opens a database of schema version 5 (commit
// dc03053, testdata/README.md) whose users have attribute values and
// memberships in two scopes in the tables of that version, and checks that
// version 6 moved them into the users' JSON columns (read through
// UserData), that a deleted group stays absent, that the persistent-user
// count survived, and that the schema is the one a fresh start creates.
func TestMigrateFromVersion5(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			dsn := testdb.OpenDSN(t, backend)
			if backend == testdb.SQLite {
				dump, err := os.ReadFile("testdata/release-dc03053-sqlite.sql")
				if err != nil {
					t.Fatal(err)
				}
				if err := testdb.OpenGormDSN(t, dsn, nil).Exec(string(dump)).Error; err != nil {
					t.Fatal(err)
				}
			} else {
				loadDump(t, dsn, "testdata/release-dc03053-postgres.sql")
			}
			for open := range 2 { // the second open finds nothing to do
				st, err := testdb.OpenStore(dsn)
				if err != nil {
					t.Fatalf("open %d: %v", open, err)
				}
				checkVersion5Data(t, st)
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
			}
			host := testdb.OpenGormDSN(t, dsn, nil)
			var versions []gormstore.SchemaVersion
			if err := host.Find(&versions).Error; err != nil {
				t.Fatal(err)
			}
			if !versionsOnce(versions, 6) {
				t.Errorf("schema versions = %+v, want versions 1 to 6 once each", versions)
			}
			fresh := testdb.OpenGormDSN(t, testdb.OpenDSN(t, backend), nil)
			if err := gormstore.Migrate(t.Context(), fresh); err != nil {
				t.Fatal(err)
			}
			if got, want := schemaNames(t, host), schemaNames(t, fresh); !slices.Equal(got, want) {
				t.Errorf("migrated schema:\n%q\nfresh schema:\n%q", got, want)
			}
		})
	}
}

func checkVersion5Data(t *testing.T, st *gormstore.Store) {
	t.Helper()
	ctx := t.Context()
	now := time.Date(2026, 11, 24, 13, 0, 0, 0, time.UTC)
	a, err := st.AccountByName(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	et, err := st.EmbedTenantByName(ctx, a.ID, "t1")
	if err != nil {
		t.Fatal(err)
	}
	tw, ts := store.TenantWide(a.ID), store.Scope{AccountID: a.ID, EmbedTenantID: et.ID}
	for i := range 4 {
		u, err := st.UserByKey(ctx, store.UserKey{AccountID: a.ID, ExternalID: fmt.Sprint("user-", i)}, now)
		if err != nil {
			t.Fatal(err)
		}
		d, err := st.UserData(ctx, u.ID, tw)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(d.Attributes); got != `[{country string [34 68 69 34]} {level number [51 46 53 48]} {tags string_array [91 34 97 34 44 34 98 34 93]}]` {
			t.Errorf("user-%d's tenant-wide attributes = %s", i, got)
		}
		if len(d.Groups) != 2 || d.Groups[0].Name != "ops" || d.Groups[1].Name != "sales" {
			t.Errorf("user-%d's tenant-wide groups = %+v, want ops and sales", i, d.Groups)
		}
		d, err = st.UserData(ctx, u.ID, ts)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Attributes) != 1 || string(d.Attributes[0].Value) != fmt.Sprintf(`"role-%d"`, i) ||
			len(d.Groups) != 1 || d.Groups[0].Name != "t1-team" {
			t.Errorf("user-%d's data in t1 = %+v", i, d)
		}
	}
	// Three persistent users: a limit of 3 is full.
	_, err = st.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: "one-more"}, Persistent: true, MaxUsers: 3, Now: now})
	if !errors.Is(err, store.ErrLimit) {
		t.Errorf("a fourth persistent user under a limit of 3: err = %v, want ErrLimit", err)
	}
}
