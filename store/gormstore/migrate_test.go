package gormstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
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

// The tokens that the release before versioned migrations handed to
// "alice" and "bob" in the databases of testdata (see testdata/README.md).
var releaseTokens = map[string]map[string]string{
	testdb.SQLite: {
		"alice": "R7yTnOaxDHmkYh6hsR8g_R7ZsxCsPGVaicAQhpPW8FA",
		"bob":   "K9agXoAOTVRBtuX4yVovpfkI2E54DabxC5UOLE0m9Ug",
	},
	testdb.Postgres: {
		"alice": "MHwRDgK9oR2qfvHFwzIjWZDZzjm7c-ozte4QWNhygcw",
		"bob":   "27mldiKuslVJdLSC68iAHPk22sPNQxFbWJKmOC4D7hk",
	},
}

// TestMigrateFromRelease opens databases written by the release before this
// schema was created by GORM's migrator (hand-written DDL) and checks that
// every row is still there and usable, that the migration is recorded once,
// and that it left the host's other tables alone.
func TestMigrateFromRelease(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			dsn := testdb.OpenDSN(t, backend)
			if backend == testdb.SQLite {
				copyFile(t, "testdata/release-b8b8fcb.db", dsn)
			} else {
				loadDump(t, dsn, "testdata/release-b8b8fcb-postgres.sql")
			}
			ctx := t.Context()
			for open := range 2 { // the second open finds nothing to do
				st, err := testdb.OpenStore(dsn)
				if err != nil {
					t.Fatalf("open %d: %v", open, err)
				}
				checkReleaseData(t, st, releaseTokens[backend])
				checkReleaseKeys(t, st)
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
			}
			db := testdb.OpenGormDSN(t, dsn, nil)
			var versions []gormstore.SchemaVersion
			if err := db.WithContext(ctx).Find(&versions).Error; err != nil {
				t.Fatal(err)
			}
			// Version 1 is the release's schema; version 2 adds the API
			// keys' origin, name and creation time, version 3 the account
			// limits, version 4 the embedkit_ prefix, version 5 the key of
			// sessions and tokens, version 6 the users' JSON columns.
			if !versionsOnce(versions, 6) {
				t.Errorf("schema versions = %+v, want versions 1 to 6 once each", versions)
			}
			// Counts through the exported models, as a host would query.
			counts := map[any]int64{&gormstore.User{}: 26, &gormstore.Session{}: 38, &gormstore.Token{}: 2,
				&gormstore.Thread{}: 4, &gormstore.ThreadMessage{}: 16}
			members, values := 40, 60
			if backend == testdb.Postgres {
				counts = map[any]int64{&gormstore.User{}: 14, &gormstore.Session{}: 10, &gormstore.Token{}: 2,
					&gormstore.Thread{}: 3, &gormstore.ThreadMessage{}: 12}
				members, values = 16, 24
			}
			// Every membership and value of the release's tables is in
			// the users' JSON columns.
			if m, v := foldedUserData(t, db); m != members || v != values {
				t.Errorf("users' JSON columns hold %d memberships and %d values, want %d and %d", m, v, members, values)
			}
			for model, want := range counts {
				var n int64
				if err := db.WithContext(ctx).Model(model).Count(&n).Error; err != nil {
					t.Fatal(err)
				}
				if n != want {
					t.Errorf("%T: %d rows, want %d", model, n, want)
				}
			}
			if backend == testdb.Postgres {
				// pgcluster's tables of the same database are untouched.
				for _, table := range []string{"embedkit_turns", "embedkit_turn_lines"} {
					if !db.Migrator().HasTable(table) {
						t.Errorf("the migration dropped the host's table %s", table)
					}
				}
			}
		})
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

// TestConcurrentMigrations opens several stores on one empty PostgreSQL
// database at once, as replicas starting together would: the advisory lock
// makes them migrate one after the other, and each ends up usable.
func TestConcurrentMigrations(t *testing.T) {
	dsn := testdb.OpenDSN(t, testdb.Postgres)
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

// foldedUserData counts the group IDs and attribute values held by the
// users' JSON columns, read through the exported model as a host would.
func foldedUserData(t *testing.T, db *gorm.DB) (members, values int) {
	t.Helper()
	var users []gormstore.User
	if err := db.WithContext(t.Context()).Find(&users).Error; err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		var groups map[string][]int64
		var vals map[string]json.RawMessage
		if err := json.Unmarshal([]byte(u.GroupIDs), &groups); err != nil {
			t.Fatalf("group_ids of user %d: %v", u.ID, err)
		}
		if err := json.Unmarshal([]byte(u.AttributeValues), &vals); err != nil {
			t.Fatalf("attribute_values of user %d: %v", u.ID, err)
		}
		for _, ids := range groups {
			members += len(ids)
		}
		values += len(vals)
	}
	return members, values
}
