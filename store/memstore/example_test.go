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
		name := "Ann"
		u, err := tx.UpsertExternalUser(ctx, store.ExternalUserUpsert{
			AccountID: acme.ID, ExternalID: "ann", DisplayName: &name, Persistent: true, MaxUsers: 10, Now: now,
		})
		if err != nil {
			return err
		}
		if err := tx.UpsertGroups(ctx, store.TenantWide(acme.ID), []store.GroupDef{{Name: "sales"}}); err != nil {
			return err
		}
		gs, err := tx.GroupsByName(ctx, store.TenantWide(acme.ID), []string{"sales"})
		if err != nil {
			return err
		}
		return tx.ReplaceMemberships(ctx, u.ID, store.TenantWide(acme.ID), []int64{gs[0].ID})
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	u, _ := st.UserByExternalID(ctx, acme.ID, "ann", now)
	groups, _ := st.Memberships(ctx, u.ID, store.TenantWide(acme.ID))
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
