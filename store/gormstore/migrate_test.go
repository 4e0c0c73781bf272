package gormstore_test

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/embedkit/embedkit/internal/secret"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore"
)

// TestMigrateRefusesBeforeVersion3 opens databases older than schema
// version 3, the previous release's: one written before versioned
// migrations (commit b8b8fcb) and one that records versions 1 and 2 only.
// Both are refused with an error naming the release to upgrade through, and
// the database is left as it was.
func TestMigrateRefusesBeforeVersion3(t *testing.T) {
	for _, backend := range testdb.Backends() {
		for _, release := range []string{"b8b8fcb", "b908add"} {
			t.Run(backend+"/"+release, func(t *testing.T) {
				dsn := testdb.OpenDSN(t, backend)
				version := "1"
				switch {
				case release == "b908add":
					loadRelease(t, backend, dsn, release)
					if err := testdb.OpenGormDSN(t, dsn, nil).Exec("DELETE FROM embedkit_schema_versions WHERE version = 3").Error; err != nil {
						t.Fatal(err)
					}
					version = "2"
				case backend == testdb.SQLite:
					copyFile(t, "testdata/release-b8b8fcb.db", dsn)
				default:
					loadDump(t, dsn, "testdata/release-b8b8fcb-postgres.sql")
				}
				want := "gormstore: migrate: schema version " + version + " is older than 3: upgrade through embedkit b908add first"
				for open := range 2 { // the first refusal changed nothing
					if st, err := testdb.OpenStore(dsn); err == nil || err.Error() != want {
						if st != nil {
							st.Close()
						}
						t.Fatalf("open %d: %v, want %q", open, err, want)
					}
				}
				db := testdb.OpenGormDSN(t, dsn, nil)
				if release == "b8b8fcb" && db.Migrator().HasTable(&gormstore.SchemaVersion{}) {
					t.Error("the refused migration created embedkit_schema_versions")
				}
				var names []string
				if err := db.Table("accounts").Pluck("name", &names).Error; err != nil || !slices.Equal(names, []string{"acme"}) {
					t.Errorf("the release's accounts after the refusal: %q %v", names, err)
				}
			})
		}
	}
}

// checkReleaseData uses the data of a release database through the store:
// tokens still resolve, users keep their attributes and groups, threads
// their messages, and new writes (including cascades) work.
func checkReleaseData(t *testing.T, st *gormstore.Store, tokens map[string]string) {
	t.Helper()
	ctx := t.Context()
	now := time.Date(2026, 11, 24, 13, 0, 0, 0, time.UTC)
	a, err := st.AccountByName(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	for name, tok := range tokens {
		g, err := st.SessionByToken(ctx, secret.Hash(tok), now)
		if err != nil {
			t.Fatalf("token of %s: %v", name, err)
		}
		u, err := st.UserByID(ctx, g.UserID, now)
		if err != nil || u.ExternalID != name || u.DisplayName != name {
			t.Errorf("user of %s's token: %+v %v", name, u, err)
		}
	}
	groups, err := st.ListGroups(ctx, store.TenantWide(a.ID), 0, 100)
	if err != nil || len(groups) == 0 {
		t.Fatalf("groups: %v %v", groups, err)
	}
	// A new user with a session, then deleted: everything it owns goes.
	u, err := st.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: "after-migration"}, Persistent: true, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateThread(ctx, store.Thread{AccountID: a.ID, ChatID: "after-migration", AgentID: "7", UserID: u.ID}); err != nil {
		t.Fatal(err)
	}
	if err := st.AppendMessages(ctx, a.ID, "after-migration", 1, []store.ThreadMessage{{ID: "m1", Sort: 1, Body: []byte(`{"x":1}`)}}); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteUser(ctx, u.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Thread(ctx, a.ID, "after-migration"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("thread of a deleted user: %v, want ErrNotFound", err)
	}
	if ms, err := st.Messages(ctx, a.ID, "after-migration"); err != nil || len(ms) != 0 {
		t.Errorf("messages of a deleted thread: %v %v", ms, err)
	}
}

// TestConcurrentMigrations opens several stores at once on one database,
// empty or of an earlier schema version, as replicas starting together
// would: the advisory lock (PostgreSQL, also under a default isolation of
// REPEATABLE READ) or the write lock (SQLite) makes them migrate one after
// the other, each ends up usable, and the earlier version's data is all
// there.
// TestMigrateInHostTransaction: a host runs the migration as a step of
// its own migration transaction, after steps of its own (its own users
// table), at READ COMMITTED or, on PostgreSQL, at a stricter level the
// migration cannot change once the transaction has run a query.
func TestMigrateInHostTransaction(t *testing.T) {
	type hostUser struct {
		ID    int64 `gorm:"primaryKey"`
		Email string
	}
	levels := map[string][]sql.IsolationLevel{
		testdb.SQLite:   {sql.LevelDefault},
		testdb.Postgres: {sql.LevelDefault, sql.LevelRepeatableRead, sql.LevelSerializable},
	}
	for _, backend := range testdb.Backends() {
		for _, level := range levels[backend] {
			t.Run(backend+"/"+level.String(), func(t *testing.T) {
				db := testdb.OpenGorm(t, backend, nil)
				err := db.Transaction(func(tx *gorm.DB) error {
					if err := tx.Table("users").AutoMigrate(&hostUser{}); err != nil {
						return err
					}
					return gormstore.Migrate(t.Context(), tx)
				}, &sql.TxOptions{Isolation: level})
				if err != nil {
					t.Fatalf("Migrate in the host's transaction: %v", err)
				}
				for _, table := range []string{"users", "embedkit_users", "embedkit_schema_versions"} {
					if !db.Migrator().HasTable(table) {
						t.Errorf("table %s missing after the host's commit", table)
					}
				}
				st, err := gormstore.OpenDB(db)
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				if _, err := st.SaveAccount(t.Context(), store.Account{Name: "host"}); err != nil {
					t.Errorf("the store on the migrated tables: %v", err)
				}
			})
		}
	}
}

func TestConcurrentMigrations(t *testing.T) {
	for _, release := range []string{"", "b908add", "dc03053"} {
		for _, backend := range []string{testdb.SQLite, testdb.Postgres, "postgres-repeatable-read"} {
			t.Run(backend+"/"+cmp.Or(release, "empty"), func(t *testing.T) {
				rr := backend == "postgres-repeatable-read"
				if rr {
					backend = testdb.Postgres
				}
				dsn := testdb.OpenDSN(t, backend)
				if release != "" {
					loadRelease(t, backend, dsn, release)
				}
				if rr {
					dsn = repeatableRead(t, dsn)
				}
				var wg sync.WaitGroup
				errs := make(chan error, 6)
				for range 6 {
					wg.Go(func() {
						st, err := testdb.OpenStore(dsn)
						if err != nil {
							errs <- err
							return
						}
						defer st.Close()
						_, err = st.SaveAccount(t.Context(), store.Account{Name: "acme"})
						errs <- err
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					if err != nil {
						t.Error(err)
					}
				}
				if release == "" {
					return
				}
				st, err := testdb.OpenStore(dsn)
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				if release == "b908add" {
					checkPreviousReleaseRows(t, st)
				} else {
					checkVersion5Data(t, st)
				}
			})
		}
	}
}

// loadRelease loads the dump of a release of testdata/README.md
// (b908add, dc03053) into the empty database dsn.
func loadRelease(t *testing.T, backend, dsn, release string) {
	t.Helper()
	if backend == testdb.Postgres {
		loadDump(t, dsn, "testdata/release-"+release+"-postgres.sql")
		return
	}
	dump, err := os.ReadFile("testdata/release-" + release + "-sqlite.sql")
	if err != nil {
		t.Fatal(err)
	}
	if err := testdb.OpenGormDSN(t, dsn, nil).Exec(string(dump)).Error; err != nil {
		t.Fatal(err)
	}
}

// checkIDsNotReused deletes the group and the attribute with the highest
// IDs of the account "acme" of a migrated database and defines new ones:
// their IDs are new (SQLite's AUTOINCREMENT and PostgreSQL's sequences
// survived the renames), so no user inherits the deleted ones' values
// and memberships, which the users' JSON columns still hold.
func checkIDsNotReused(t *testing.T, st *gormstore.Store) {
	t.Helper()
	ctx := t.Context()
	a, err := st.AccountByName(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	s := store.TenantWide(a.ID)
	gs, err := st.ListGroups(ctx, s, 0, 1000)
	if err != nil || len(gs) == 0 {
		t.Fatalf("groups: %v %v", gs, err)
	}
	as, err := st.ListAttributes(ctx, s, 0, 1000)
	if err != nil || len(as) == 0 {
		t.Fatalf("attributes: %v %v", as, err)
	}
	g, at := gs[len(gs)-1], as[len(as)-1]
	if err := errors.Join(st.DeleteGroup(ctx, s, g.ID), st.DeleteAttribute(ctx, s, at.ID)); err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertDefinitions(ctx, s, []store.GroupDef{{Name: "new-group"}}, []store.AttributeDef{{Name: "new-attribute", Type: at.Type}}); err != nil {
		t.Fatal(err)
	}
	res, err := st.Lookup(ctx, store.Lookup{Scope: s, GroupNames: []string{"new-group"}, AttrNames: []string{"new-attribute"}})
	if err != nil || len(res.Groups) != 1 || len(res.Attributes) != 1 {
		t.Fatalf("new definitions: %+v %v", res, err)
	}
	if res.Groups[0].ID <= g.ID || res.Attributes[0].ID <= at.ID {
		t.Fatalf("new group %d and attribute %d after deleting group %d and attribute %d: IDs reused",
			res.Groups[0].ID, res.Attributes[0].ID, g.ID, at.ID)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// loadDump runs a pg_dump --inserts file (without psql meta-commands) in
// the schema that dsn's search_path names.
func loadDump(t *testing.T, dsn, file string) {
	t.Helper()
	sqlText, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Without arguments pgx uses the simple protocol, which runs several
	// statements in one call.
	if _, err := conn.Exec(ctx, string(sqlText)); err != nil {
		t.Fatalf("load %s: %v", file, err)
	}
}
