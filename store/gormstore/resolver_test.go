package gormstore_test

import (
	"database/sql"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gormpostgres "gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"

	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore/sqlite"
)

// TestDBResolver registers a replica source with gorm.io/plugin/dbresolver
// (a second connection pool to the same database) and records which source
// served each statement: reads outside transactions go to the replica,
// except those that must see the latest write; writes and everything inside
// transactions go to the primary.
func TestDBResolver(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			dsn := testdb.OpenDSN(t, backend)
			db := testdb.OpenGormDSN(t, dsn, nil)
			primary, err := db.DB()
			if err != nil {
				t.Fatal(err)
			}
			replica := sqlite.Dialector(dsn)
			if backend == testdb.Postgres {
				replica = gormpostgres.Open(dsn)
			}
			if err := db.Use(dbresolver.Register(dbresolver.Config{Replicas: []gorm.Dialector{replica}})); err != nil {
				t.Fatal(err)
			}
			var (
				mu     sync.Mutex
				served = map[string][]string{} // source -> statements
			)
			if err := testdb.OnStatementDB(db, func(d *gorm.DB) {
				source := "other"
				pool := d.Statement.ConnPool
				if p, ok := pool.(*gorm.PreparedStmtDB); ok {
					pool = p.ConnPool
				}
				switch p := pool.(type) {
				case gorm.TxCommitter:
					source = "transaction"
				case *sql.DB:
					if p == primary {
						source = "primary"
					} else {
						source = "replica"
					}
				}
				mu.Lock()
				served[source] = append(served[source], d.Statement.SQL.String())
				mu.Unlock()
			}); err != nil {
				t.Fatal(err)
			}
			st := openOn(t, db)
			ctx := t.Context()
			now := time.Now()
			reset := func() map[string][]string {
				mu.Lock()
				defer mu.Unlock()
				out := served
				served = map[string][]string{}
				return out
			}
			expect := func(what, want string) {
				t.Helper()
				got := reset()
				if len(got) != 1 || len(got[want]) == 0 {
					t.Errorf("%s: served by %v, want only %s", what, keys(got), want)
				}
			}

			// Opening (the migration) uses a transaction, never a replica;
			// on SQLite the primary answers whether foreign keys are on.
			if got := reset(); len(got["replica"]) > 0 || len(got["primary"]) > 0 && !slices.Equal(got["primary"], []string{"PRAGMA foreign_keys"}) {
				t.Errorf("open: served by %v", keys(got))
			}
			a, err := st.SaveAccount(ctx, store.Account{Name: "acme"})
			if err != nil {
				t.Fatal(err)
			}
			// A write of one statement runs on the primary: alone on
			// PostgreSQL, in a transaction of its own on SQLite.
			if backend == testdb.Postgres {
				expect("SaveAccount", "primary")
			} else {
				expect("SaveAccount", "transaction")
			}
			if err := st.SaveAPIKey(ctx, store.APIKey{Hash: []byte("k"), AccountID: a.ID}); err != nil {
				t.Fatal(err)
			}
			u, err := st.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: "u"}, Persistent: true, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.UpsertDefinitions(ctx, store.TenantWide(a.ID), []store.GroupDef{{Name: "sales"}}, nil); err != nil {
				t.Fatal(err)
			}
			if err := st.CreateSession(ctx, []byte("s"), store.Session{AccountID: a.ID, UserID: u.ID, DeploymentID: 1, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			if err := st.CreateThread(ctx, store.Thread{AccountID: a.ID, ChatID: "c", AgentID: "7", UserID: u.ID}); err != nil {
				t.Fatal(err)
			}
			// Writes run in transactions; UpsertDefinitions reads the primary first.
			if got := reset(); len(got["replica"]) > 0 || len(got["other"]) > 0 {
				t.Errorf("writes: served by %v, want the primary or a transaction", keys(got))
			}

			// Replica reads: the catalog, accounts.
			if _, err := st.ListGroups(ctx, store.TenantWide(a.ID), 0, 10); err != nil {
				t.Fatal(err)
			}
			if _, err := st.AccountByID(ctx, a.ID); err != nil {
				t.Fatal(err)
			}
			expect("catalog and account reads", "replica")

			// Reads that must see the latest write.
			if _, _, err := st.APIKeyByHash(ctx, []byte("k")); err != nil {
				t.Fatal(err)
			}
			if _, err := st.ExchangeSession(ctx, []byte("s"), []byte("t"), now.Add(time.Hour), now); err != nil {
				t.Fatal(err)
			}
			reset()
			if _, err := st.SessionByToken(ctx, []byte("t"), now); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Thread(ctx, a.ID, "c"); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Messages(ctx, a.ID, "c"); err != nil {
				t.Fatal(err)
			}
			if _, err := st.UserByID(ctx, u.ID, now); err != nil {
				t.Fatal(err)
			}
			// A provisioning outside a transaction writes what Lookup found.
			if _, err := st.Lookup(ctx, store.Lookup{Scope: store.TenantWide(a.ID), GroupNames: []string{"sales"}}); err != nil {
				t.Fatal(err)
			}
			expect("API key, token, turn state, user and definitions-to-use reads", "primary")

			// Reads inside a transaction stay in it.
			err = st.InTx(ctx, func(tx store.Tx) error {
				if _, err := tx.ListGroups(ctx, store.TenantWide(a.ID), 0, 10); err != nil {
					return err
				}
				_, err := tx.AccountByID(ctx, a.ID)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			expect("reads in InTx", "transaction")
		})
	}
}

func keys(m map[string][]string) string {
	var out []string
	for k, v := range m {
		out = append(out, k+" ("+strings.Join(v, "; ")+")")
	}
	return strings.Join(out, ", ")
}
