package gormstore_test

import (
	"context"
	"fmt"
	"time"

	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore"
)

// ExampleOpenDB opens a store on the host's own *gorm.DB (here an in-memory
// SQLite database) and provisions a user in one transaction, as
// generate-session does.
func ExampleOpenDB() {
	db, err := gorm.Open(sqlite.Open("file:example?mode=memory&cache=shared&_foreign_keys=on"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		fmt.Println(err)
		return
	}
	st, err := gormstore.OpenDB(db)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()

	ctx := context.Background()
	acct, err := st.SaveAccount(ctx, store.Account{Name: "acme", Plan: store.PlanEnterprise})
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	name := "Jane Doe"
	err = st.InTx(ctx, func(tx store.Tx) error {
		u, err := tx.UpsertUser(ctx, store.UserUpsert{
			UserKey:     store.UserKey{AccountID: acct.ID, ExternalID: "jane"},
			DisplayName: &name, Persistent: true, MaxUsers: acct.ExternalUserLimit(), Now: now,
		})
		if err != nil {
			return err
		}
		return tx.CreateSession(ctx, []byte("sha-256 of the session id"), store.Session{
			AccountID: acct.ID, UserID: u.ID, DeploymentID: 1, CreatedAt: now, ExpiresAt: now.Add(5 * time.Minute),
		})
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	grant, err := st.ExchangeSession(ctx, []byte("sha-256 of the session id"), []byte("sha-256 of the token"), now.Add(24*time.Hour), now)
	if err != nil {
		fmt.Println(err)
		return
	}
	u, _ := st.UserByID(ctx, grant.UserID, now)
	fmt.Println(u.ExternalID, u.DisplayName, grant.ExpiresAt.Format(time.RFC3339))

	_, err = st.ExchangeSession(ctx, []byte("sha-256 of the session id"), []byte("another token"), now.Add(24*time.Hour), now)
	fmt.Println(err)
	// Output:
	// jane Jane Doe 2026-03-02T12:00:00Z
	// gormstore: exchange session: store: not found
}
