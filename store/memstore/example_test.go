package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/memstore"
)

// A store for a test harness: provision a user in one transaction, then read
// it back. A failing transaction leaves nothing behind.
func ExampleNew() {
	ctx := context.Background()
	st := memstore.New()
	defer st.Close()

	acme, _ := st.SaveAccount(ctx, store.Account{Name: "acme", Plan: store.PlanEnterprise})
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	err := st.InTx(ctx, func(tx store.Tx) error {
		if err := tx.UpsertDefinitions(ctx, store.TenantWide(acme.ID), []store.GroupDef{{Name: "sales"}}, nil); err != nil {
			return err
		}
		found, err := tx.Lookup(ctx, store.Lookup{Scope: store.TenantWide(acme.ID), GroupNames: []string{"sales"}})
		if err != nil {
			return err
		}
		name := "Ann"
		_, err = tx.UpsertUser(ctx, store.UserUpsert{
			UserKey:     store.UserKey{AccountID: acme.ID, ExternalID: "ann"},
			DisplayName: &name, Persistent: true, MaxUsers: 10, Now: now,
			SetGroups: true, GroupScope: store.TenantWide(acme.ID), Groups: []int64{found.Groups[0].ID},
		})
		return err
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	u, _ := st.UserByKey(ctx, store.UserKey{AccountID: acme.ID, ExternalID: "ann"}, now)
	data, _ := st.UserData(ctx, u.ID, store.TenantWide(acme.ID))
	groups := data.Groups
	fmt.Println(u.ID, u.DisplayName, groups[0].Name)

	err = st.InTx(ctx, func(tx store.Tx) error {
		tx.DeleteUser(ctx, u.ID)
		return errors.New("changed my mind")
	})
	_, lookup := st.UserByID(ctx, u.ID, now)
	fmt.Println(err, lookup == nil)
	// Output:
	// 1 Ann sales
	// changed my mind true
}
