package gormstore_test

import (
	"os"
	"slices"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/embedkit/embedkit/internal/secret"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore"
)

// TestMigrateFromPreviousRelease opens databases of the previous release
// (schema version 3, unprefixed tables; testdata/release-b908add-*.sql
// were dumped from databases that release created and filled through its
// store) and checks that version 4 renamed every table, index, sequence and
// foreign key to what a fresh start creates, that every row is still there
// and usable, and that a host's own table was left alone.
func TestMigrateFromPreviousRelease(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			dsn := testdb.OpenDSN(t, backend)
			if backend == testdb.SQLite {
				db := testdb.OpenGormDSN(t, dsn, nil)
				dump, err := os.ReadFile("testdata/release-b908add-sqlite.sql")
				if err != nil {
					t.Fatal(err)
				}
				if err := db.Exec(string(dump)).Error; err != nil {
					t.Fatal(err)
				}
			} else {
				loadDump(t, dsn, "testdata/release-b908add-postgres.sql")
			}
			host := testdb.OpenGormDSN(t, dsn, nil)
			if err := host.Exec("CREATE TABLE orders (id BIGINT PRIMARY KEY, total BIGINT NOT NULL)").Error; err != nil {
				t.Fatal(err)
			}
			if err := host.Exec("INSERT INTO orders VALUES (1, 100), (2, 250)").Error; err != nil {
				t.Fatal(err)
			}
			for open := range 2 { // the second open finds nothing to do
				st, err := testdb.OpenStore(dsn)
				if err != nil {
					t.Fatalf("open %d: %v", open, err)
				}
				checkReleaseData(t, st, map[string]string{"alice": "v3-token-alice", "bob": "v3-token-bob"})
				checkPreviousReleaseRows(t, st)
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
			}
			var versions []gormstore.SchemaVersion
			if err := host.Find(&versions).Error; err != nil {
				t.Fatal(err)
			}
			if !versionsOnce(versions, 6) {
				t.Errorf("schema versions = %+v, want versions 1 to 6 once each", versions)
			}
			var total int64
			if err := host.Raw("SELECT SUM(total) FROM orders").Scan(&total).Error; err != nil || total != 350 {
				t.Errorf("the host's orders: total %d, %v", total, err)
			}
			fresh := testdb.OpenGormDSN(t, testdb.OpenDSN(t, backend), nil)
			if err := gormstore.Migrate(t.Context(), fresh); err != nil {
				t.Fatal(err)
			}
			got, want := schemaNames(t, host), schemaNames(t, fresh)
			got = slices.DeleteFunc(got, func(n string) bool { return n == "table orders" || n == "index orders_pkey" })
			if !slices.Equal(got, want) {
				t.Errorf("migrated schema:\n%q\nfresh schema:\n%q", got, want)
			}
		})
	}
}

// checkPreviousReleaseRows checks the rows of the previous release's
// database that checkReleaseData does not: API keys, attribute values,
// memberships, messages and a quota counter.
func checkPreviousReleaseRows(t *testing.T, st *gormstore.Store) {
	t.Helper()
	ctx := t.Context()
	now := time.Date(2026, 11, 24, 13, 0, 0, 0, time.UTC)
	a, err := st.AccountByName(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if k, ka, err := st.APIKeyByHash(ctx, secret.Hash("v3-admin-key")); err != nil || !k.Admin || k.AccountID != a.ID || ka.ID != a.ID {
		t.Errorf("admin key: %+v %v", k, err)
	}
	if keys, err := st.APIKeys(ctx, a.ID); err != nil || len(keys) != 2 {
		t.Errorf("keys: %+v %v", keys, err)
	}
	u, err := st.UserByKey(ctx, store.UserKey{AccountID: a.ID, ExternalID: "user-05"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := st.UserData(ctx, u.ID, store.TenantWide(a.ID)); err != nil || len(d.Attributes) != 3 || len(d.Groups) != 2 {
		t.Errorf("attributes and groups of user-05: %+v %v", d, err)
	}
	if ms, err := st.Messages(ctx, a.ID, "chat-alice"); err != nil || len(ms) != 2 {
		t.Errorf("messages of alice's thread: %+v %v", ms, err)
	}
	// A new user takes a new id from the renamed sequence.
	n, err := st.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: "new-" + u.ExternalID}, Persistent: true, Now: now})
	if err != nil || n.ID <= u.ID {
		t.Errorf("new user: %+v %v", n, err)
	}
	if err := st.DeleteUser(ctx, n.ID); err != nil {
		t.Fatal(err)
	}
}

// TestFreshStartBesideHostTables opens a store on a database that already
// holds a host's own users and sessions tables (with an index each): the
// store creates its embedkit_ tables beside them, works, and leaves the
// host's tables and rows as they were.
func TestFreshStartBesideHostTables(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			dsn := testdb.OpenDSN(t, backend)
			host := testdb.OpenGormDSN(t, dsn, nil)
			for _, stmt := range []string{
				"CREATE TABLE users (id BIGINT PRIMARY KEY, email TEXT NOT NULL)",
				"CREATE UNIQUE INDEX users_email ON users (email)",
				"CREATE TABLE sessions (id TEXT PRIMARY KEY, user_id BIGINT NOT NULL REFERENCES users (id), data TEXT)",
				"CREATE INDEX sessions_user ON sessions (user_id)",
				"INSERT INTO users VALUES (1, 'ann@example.com'), (2, 'ben@example.com')",
				"INSERT INTO sessions VALUES ('s1', 1, 'x')",
			} {
				if err := host.Exec(stmt).Error; err != nil {
					t.Fatal(err)
				}
			}
			before := schemaNames(t, host)
			st, err := testdb.OpenStore(dsn)
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			now := time.Now()
			a, err := st.SaveAccount(ctx, store.Account{Name: "acme"})
			if err != nil {
				t.Fatal(err)
			}
			u, err := st.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: "ann"}, Persistent: true, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.CreateSession(ctx, secret.Hash("sid"), store.Session{AccountID: a.ID, UserID: u.ID, DeploymentID: 1, CreatedAt: now, ExpiresAt: now.Add(time.Minute)}); err != nil {
				t.Fatal(err)
			}
			if err := st.DeleteUser(ctx, u.ID); err != nil {
				t.Fatal(err)
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			// Reopening finds nothing to migrate.
			st, err = testdb.OpenStore(dsn)
			if err != nil {
				t.Fatal(err)
			}
			_ = st.Close()
			var users, sessions int64
			if err := host.Raw("SELECT COUNT(*) FROM users").Scan(&users).Error; err != nil || users != 2 {
				t.Errorf("host's users: %d %v", users, err)
			}
			if err := host.Raw("SELECT COUNT(*) FROM sessions").Scan(&sessions).Error; err != nil || sessions != 1 {
				t.Errorf("host's sessions: %d %v", sessions, err)
			}
			after := schemaNames(t, host)
			for _, n := range before {
				if !slices.Contains(after, n) {
					t.Errorf("the host's %s is gone", n)
				}
			}
			for _, n := range after {
				if !slices.Contains(before, n) && !embedkitName(n) {
					t.Errorf("created %s, which lacks the embedkit_ prefix", n)
				}
			}
		})
	}
}

// embedkitName reports whether a schemaNames entry is named as embedkit
// names its objects: embedkit_<name>, or fk_embedkit_<table>_<field> for
// a foreign key (GORM's naming).
func embedkitName(n string) bool {
	for _, p := range []string{"table embedkit_", "index embedkit_", "sequence embedkit_", "constraint fk_embedkit_"} {
		if len(n) >= len(p) && n[:len(p)] == p {
			return true
		}
	}
	return false
}

// schemaNames lists the tables, indexes, sequences and foreign keys of the
// database's current schema (SQLite: tables and named indexes), sorted.
func schemaNames(t *testing.T, db *gorm.DB) []string {
	t.Helper()
	var names []string
	q := `SELECT type || ' ' || name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'`
	if db.Dialector.Name() == "postgres" {
		q = `SELECT CASE c.relkind WHEN 'r' THEN 'table ' WHEN 'i' THEN 'index ' WHEN 'S' THEN 'sequence ' END || c.relname
			FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'i', 'S')
			UNION ALL
			SELECT 'constraint ' || conname FROM pg_constraint WHERE connamespace = current_schema()::regnamespace AND contype = 'f'`
	}
	if err := db.Raw(q).Scan(&names).Error; err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

func versionsOnce(vs []gormstore.SchemaVersion, n int) bool {
	if len(vs) != n {
		return false
	}
	for i, v := range vs {
		if v.Version != int64(i+1) {
			return false
		}
	}
	return true
}
