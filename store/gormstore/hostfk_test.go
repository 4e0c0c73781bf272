package gormstore_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	gormsqlite "gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore"
)

// TestHostMigrationSettingsKeepForeignKeys opens the store on a host's
// handle whose GORM config skips foreign keys when migrating (common for
// hosts on Vitess/PlanetScale or that manage constraints themselves).
// embedkit's deletions rely on its ON DELETE CASCADE foreign keys: a
// deleted API key must end the sessions and tokens it minted, a deleted
// user its tokens and threads.
func TestHostMigrationSettingsKeepForeignKeys(t *testing.T) {
	for _, backend := range testdb.Backends() {
		for name, cfg := range map[string]func() *gorm.Config{
			"DisableForeignKeyConstraintWhenMigrating": func() *gorm.Config {
				return &gorm.Config{Logger: logger.Discard, DisableForeignKeyConstraintWhenMigrating: true}
			},
			"IgnoreRelationshipsWhenMigrating": func() *gorm.Config {
				return &gorm.Config{Logger: logger.Discard, IgnoreRelationshipsWhenMigrating: true}
			},
		} {
			t.Run(backend+"/"+name, func(t *testing.T) {
				db := testdb.OpenGorm(t, backend, cfg())
				st := openOn(t, db)
				if !db.Config.DisableForeignKeyConstraintWhenMigrating && !db.Config.IgnoreRelationshipsWhenMigrating {
					t.Error("the host's own GORM config was changed")
				}
				user := revokeMintingKey(t, st)
				ctx := t.Context()
				if err := st.DeleteUser(ctx, user.ID); err != nil {
					t.Fatal(err)
				}
				var left int64
				db.Raw("SELECT COUNT(*) FROM embedkit_tokens").Scan(&left)
				if left != 0 {
					t.Errorf("%d tokens left after deleting their key and their user", left)
				}
			})
		}
	}
}

// TestRevokedKeyWithoutForeignKeys: a host that turns SQLite's foreign keys
// on with an Exec (one connection of the pool) passes OpenDB's check, and
// the pool's other connections delete without ON DELETE CASCADE; a revoked
// key's sessions and tokens still stop working, since they are read only
// while their key exists.
func TestRevokedKeyWithoutForeignKeys(t *testing.T) {
	db, err := gorm.Open(gormsqlite.Open(filepath.Join(t.TempDir(), "h.db")), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("PRAGMA foreign_keys = ON").Error; err != nil {
		t.Fatal(err)
	}
	st, err := gormstore.OpenDB(db)
	if err != nil {
		t.Fatalf("OpenDB refused: %v", err)
	}
	defer st.Close()
	sqlDB, _ := db.DB()
	held, err := sqlDB.Conn(t.Context()) // the host uses the FK-on connection meanwhile
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	revokeMintingKey(t, st)
}

// revokeMintingKey stores an API key, a user with a session minted with
// it, exchanges the session for a token, deletes the key and checks that
// the token no longer resolves. It returns the user.
func revokeMintingKey(t *testing.T, st *gormstore.Store) store.User {
	t.Helper()
	ctx := t.Context()
	now := time.Now()
	acct, err := st.SaveAccount(ctx, store.Account{Name: "acme", Plan: store.PlanEnterprise})
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("sha-256 of the key")
	if err := st.SaveAPIKey(ctx, store.APIKey{Hash: key, AccountID: acct.ID, Admin: true}); err != nil {
		t.Fatal(err)
	}
	var user store.User
	err = st.InTx(ctx, func(tx store.Tx) error {
		u, err := tx.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: acct.ID, ExternalID: "jane"},
			Persistent: true, MaxUsers: acct.ExternalUserLimit(), Now: now})
		if err != nil {
			return err
		}
		user = u
		return tx.CreateSession(ctx, []byte("session"), store.Session{AccountID: acct.ID, UserID: u.ID, DeploymentID: 1,
			CreatedAt: now, ExpiresAt: now.Add(time.Minute), KeyHash: key})
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ExchangeSession(ctx, []byte("session"), []byte("token"), now.Add(time.Hour), now); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteAPIKey(ctx, acct.ID, key); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SessionByToken(ctx, []byte("token"), now); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the token minted with a deleted API key: %v, want ErrNotFound", err)
	}
	return user
}
