package storetest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/embedkit/embedkit/store"
)

var txRules = []rule{
	{
		name: "a failed call aborts the transaction",
		doc:  "Commit semantics are the same on every backend: a Tx method that fails with ErrConflict aborts the transaction; when fn ignores the error and returns nil, InTx returns it and nothing of fn is committed. ErrNotFound from a read leaves the transaction usable.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			u := f.user(t, st, "u")
			th := store.Thread{AccountID: f.account.ID, ChatID: "c", AgentID: "7", UserID: u.ID, CreatedAt: t0}
			err := st.InTx(ctx(t), func(tx store.Tx) error {
				if _, err := tx.Thread(ctx(t), f.account.ID, "missing"); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("Thread of a missing chat: %v, want ErrNotFound", err)
				}
				if err := tx.CreateThread(ctx(t), th); err != nil {
					return err
				}
				if err := tx.CreateThread(ctx(t), th); !errors.Is(err, store.ErrConflict) {
					t.Errorf("duplicate CreateThread: %v, want ErrConflict", err)
				}
				if _, err := tx.Thread(ctx(t), f.account.ID, "c"); err == nil {
					t.Error("a call after the failure succeeded; want the transaction aborted")
				}
				return nil // ignores the failure
			})
			if !errors.Is(err, store.ErrConflict) {
				t.Errorf("InTx = %v, want the ignored ErrConflict", err)
			}
			if _, err := st.Thread(ctx(t), f.account.ID, "c"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("thread of the aborted transaction: %v, want ErrNotFound (nothing committed)", err)
			}
		},
	},
	{
		name: "InTx commits every write of fn",
		doc:  "When fn returns nil, every write made through its Tx is committed and visible afterwards.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			var uid int64
			err := st.InTx(ctx(t), func(tx store.Tx) error {
				u, err := tx.UpsertExternalUser(ctx(t), f.upsert("u"))
				if err != nil {
					return err
				}
				uid = u.ID
				// Reads inside the transaction see its own writes.
				if _, err := tx.UserByID(ctx(t), u.ID, t0); err != nil {
					return err
				}
				if err := tx.UpsertGroups(ctx(t), f.scope(), []store.GroupDef{{Name: "sales"}}); err != nil {
					return err
				}
				gs, err := tx.GroupsByName(ctx(t), f.scope(), []string{"sales"})
				if err != nil || len(gs) != 1 {
					return errors.Join(err, errors.New("group not visible inside the transaction"))
				}
				if err := tx.ReplaceMemberships(ctx(t), u.ID, f.scope(), []int64{gs[0].ID}); err != nil {
					return err
				}
				return tx.CreateSession(ctx(t), []byte("s"), store.Session{AccountID: f.account.ID, UserID: u.ID, DeploymentID: 1, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)})
			})
			mustNil(t, "InTx", err)
			ms, err := st.Memberships(ctx(t), uid, f.scope())
			mustNil(t, "Memberships", err)
			if len(ms) != 1 {
				t.Errorf("memberships = %v", groupNames(ms))
			}
			_, err = st.ExchangeSession(ctx(t), []byte("s"), []byte("t"), t0.Add(time.Hour), t0)
			mustNil(t, "ExchangeSession", err)
		},
	},
	{
		name: "an error from fn leaves nothing behind",
		doc:  "A request is all or nothing: when fn fails, InTx returns fn's error unchanged and none of its writes, including the persistent-user count, are kept.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			err := st.InTx(ctx(t), func(tx store.Tx) error {
				up := f.upsert("u")
				up.MaxUsers = 1
				u, err := tx.UpsertExternalUser(ctx(t), up)
				if err != nil {
					return err
				}
				if _, err := tx.EnsureEmbedTenant(ctx(t), f.account.ID, "tenant-one"); err != nil {
					return err
				}
				if err := tx.UpsertAttributes(ctx(t), f.scope(), []store.AttributeDef{{Name: "country", Type: store.TypeString}}); err != nil {
					return err
				}
				as, err := tx.AttributesByName(ctx(t), f.scope(), []string{"country"})
				if err != nil {
					return err
				}
				if err := tx.SetAttributeValues(ctx(t), u.ID, []store.AttributeValue{{AttributeID: as[0].ID, Value: json.RawMessage(`"DE"`)}}); err != nil {
					return err
				}
				if err := tx.CreateSession(ctx(t), []byte("s"), store.Session{AccountID: f.account.ID, UserID: u.ID, DeploymentID: 1, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
					return err
				}
				return errBoom
			})
			if err != errBoom {
				t.Fatalf("InTx err = %v, want fn's error unchanged", err)
			}
			_, err = st.UserByExternalID(ctx(t), f.account.ID, "u", t0)
			wantErr(t, "rolled-back user", err, store.ErrNotFound)
			_, err = st.EmbedTenantByName(ctx(t), f.account.ID, "tenant-one")
			wantErr(t, "rolled-back tenant", err, store.ErrNotFound)
			as, err := st.AttributesByName(ctx(t), f.scope(), []string{"country"})
			mustNil(t, "AttributesByName", err)
			if len(as) != 0 {
				t.Errorf("rolled-back attribute exists: %v", attrNames(as))
			}
			_, err = st.ExchangeSession(ctx(t), []byte("s"), []byte("t"), t0.Add(time.Hour), t0)
			wantErr(t, "rolled-back session", err, store.ErrNotFound)
			// The place taken by the rolled-back user is free again.
			up := f.upsert("v")
			up.MaxUsers = 1
			_, err = st.UpsertExternalUser(ctx(t), up)
			mustNil(t, "limit after rollback", err)
		},
	},
	{
		name: "a store error inside InTx aborts the transaction",
		doc:  "fn that returns a sentinel from a Tx method (here ErrLimit) gets it back from InTx, testable with errors.Is, and earlier writes of fn are rolled back.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			err := st.InTx(ctx(t), func(tx store.Tx) error {
				if err := tx.UpsertGroups(ctx(t), f.scope(), []store.GroupDef{{Name: "g"}}); err != nil {
					return err
				}
				up := f.upsert("u")
				up.MaxUsers = 1
				if _, err := tx.UpsertExternalUser(ctx(t), up); err != nil {
					return err
				}
				up = f.upsert("u2")
				up.MaxUsers = 1
				_, err := tx.UpsertExternalUser(ctx(t), up)
				return err
			})
			wantErr(t, "InTx", err, store.ErrLimit)
			gs, err := st.ListGroups(ctx(t), f.scope(), 0, 10)
			mustNil(t, "ListGroups", err)
			if len(gs) != 0 {
				t.Errorf("groups of a failed transaction: %v", groupNames(gs))
			}
		},
	},
}
