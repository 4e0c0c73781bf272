package storetest

import (
	"context"
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
		name: "a key of another account aborts the transaction",
		doc:  "SaveAPIKey of a hash stored for another account is ErrConflict, a failure like any other: when fn ignores it, InTx returns it and commits none of fn's writes.",
		fn: func(t *testing.T, st store.Store) {
			f, g := newFixture(t, st, "acme"), newFixture(t, st, "globex")
			mustNil(t, "SaveAPIKey", st.SaveAPIKey(ctx(t), store.APIKey{Hash: []byte("k"), AccountID: f.account.ID}))
			err := st.InTx(ctx(t), func(tx store.Tx) error {
				if err := tx.SaveDeployment(ctx(t), store.Deployment{AccountID: g.account.ID, ID: 2, Name: "staging"}); err != nil {
					return err
				}
				if err := tx.SaveAPIKey(ctx(t), store.APIKey{Hash: []byte("k"), AccountID: g.account.ID}); !errors.Is(err, store.ErrConflict) {
					t.Errorf("SaveAPIKey of another account's hash: %v, want ErrConflict", err)
				}
				return nil // ignores the failure
			})
			wantErr(t, "InTx", err, store.ErrConflict)
			res, err := st.Lookup(ctx(t), store.Lookup{Scope: g.scope(), DeploymentID: 2})
			mustNil(t, "Lookup", err)
			if res.DeploymentFound {
				t.Error("the deployment of the aborted transaction was committed")
			}
		},
	},
	{
		name: "ErrLimit and ErrNotFound leave the transaction usable",
		doc:  "A Tx method refused with ErrLimit (a full account, a full minute, a full set of embed tenants) or ErrNotFound changes nothing and the transaction goes on: fn may handle the refusal, write more and commit, and exactly its successful writes are kept.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			f.user(t, st, "p")
			_, err := st.EnsureEmbedTenant(ctx(t), f.account.ID, "t1", 1)
			mustNil(t, "EnsureEmbedTenant", err)
			mustNil(t, "InTx", st.InTx(ctx(t), func(tx store.Tx) error {
				up := f.upsert("q")
				up.MaxUsers = 1
				if _, err := tx.UpsertUser(ctx(t), up); !errors.Is(err, store.ErrLimit) {
					t.Errorf("persistent user over the limit: %v, want ErrLimit", err)
				}
				e := f.upsert("e1")
				e.Persistent, e.EphemeralExpiresAt, e.NewEphemeralPerMinute = false, t0.Add(time.Hour), 1
				if _, err := tx.UpsertUser(ctx(t), e); err != nil {
					return err
				}
				e.UserKey.ExternalID = "e2"
				if _, err := tx.UpsertUser(ctx(t), e); !errors.Is(err, store.ErrLimit) {
					t.Errorf("second ephemeral user of the minute: %v, want ErrLimit", err)
				}
				if _, err := tx.EnsureEmbedTenant(ctx(t), f.account.ID, "t2", 1); !errors.Is(err, store.ErrLimit) {
					t.Errorf("second embed tenant: %v, want ErrLimit", err)
				}
				if _, err := tx.UserByKey(ctx(t), store.UserKey{AccountID: f.account.ID, ExternalID: "nobody"}, t0); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("missing user: %v, want ErrNotFound", err)
				}
				up.MaxUsers = 2
				_, err := tx.UpsertUser(ctx(t), up)
				return err
			}))
			for ext, want := range map[string]bool{"q": true, "e1": true, "e2": false} {
				_, err := st.UserByKey(ctx(t), store.UserKey{AccountID: f.account.ID, ExternalID: ext}, t0)
				if want {
					mustNil(t, "user "+ext, err)
				} else {
					wantErr(t, "refused user "+ext, err, store.ErrNotFound)
				}
			}
			_, err = st.EmbedTenantByName(ctx(t), f.account.ID, "t2")
			wantErr(t, "refused tenant", err, store.ErrNotFound)
		},
	},
	{
		name: "a refused conversion or replacement changes nothing and the transaction goes on",
		doc:  "UpsertUser refused with ErrLimit while converting an ephemeral user (the account is full) or replacing an expired one (the minute is full) leaves that user as it was, profile and sessions included, and fn may go on writing and commit.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			f.user(t, st, "p")
			e := f.ephemeral(t, st, "e", t0.Add(time.Hour))
			x := f.ephemeral(t, st, "x", t0.Add(time.Minute))
			sess := store.Session{AccountID: f.account.ID, UserID: x.ID, DeploymentID: 1, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
			mustNil(t, "CreateSession", st.CreateSession(ctx(t), []byte("sx"), sess))
			later := t0.Add(2 * time.Minute)
			fill := f.upsert("fill")
			fill.Persistent, fill.EphemeralExpiresAt, fill.NewEphemeralPerMinute, fill.Now = false, later.Add(time.Hour), 1, later
			_, err := st.UpsertUser(ctx(t), fill) // the minute of later is full
			mustNil(t, "UpsertUser fill", err)
			mustNil(t, "InTx", st.InTx(ctx(t), func(tx store.Tx) error {
				conv := f.upsert("e")
				conv.MaxUsers, conv.DisplayName = 1, ptr("converted")
				if _, err := tx.UpsertUser(ctx(t), conv); !errors.Is(err, store.ErrLimit) {
					t.Errorf("conversion over the limit: %v, want ErrLimit", err)
				}
				repl := f.upsert("x")
				repl.Persistent, repl.EphemeralExpiresAt, repl.NewEphemeralPerMinute, repl.Now = false, later.Add(time.Hour), 1, later
				repl.DisplayName = ptr("replaced")
				if _, err := tx.UpsertUser(ctx(t), repl); !errors.Is(err, store.ErrLimit) {
					t.Errorf("replacement over the minute's limit: %v, want ErrLimit", err)
				}
				return tx.SaveDeployment(ctx(t), store.Deployment{AccountID: f.account.ID, ID: 2, Name: "after"})
			}))
			got, err := st.UserByID(ctx(t), e.ID, t0)
			mustNil(t, "UserByID e", err)
			if !got.Ephemeral || got.DisplayName != "" {
				t.Errorf("refused conversion changed the user: %+v", got)
			}
			// x is still the expired user it was, with its session, until
			// DeleteExpired; its key names no other user.
			_, err = st.UserByKey(ctx(t), x.Key(), later)
			wantErr(t, "expired x", err, store.ErrNotFound)
			got, err = st.UserByID(ctx(t), x.ID, t0)
			mustNil(t, "UserByID x before its expiry", err)
			if got.DisplayName != "" {
				t.Errorf("refused replacement changed the user: %+v", got)
			}
			_, err = st.ExchangeSession(ctx(t), []byte("sx"), []byte("tx"), t0.Add(time.Hour), t0)
			mustNil(t, "the session of x", err)
			res, err := st.Lookup(ctx(t), store.Lookup{Scope: f.scope(), DeploymentID: 2})
			mustNil(t, "Lookup", err)
			if !res.DeploymentFound {
				t.Error("the write after the refusals was not committed")
			}
		},
	},
	{
		name: "a context ended inside InTx commits nothing",
		doc:  "When the context of InTx ends while fn runs, the later calls fail, and InTx returns an error (ErrUnavailable or the context's) and commits none of fn's writes, even when fn ignores the failures and returns nil.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			c, cancel := context.WithCancel(ctx(t))
			err := st.InTx(c, func(tx store.Tx) error {
				if err := tx.SaveDeployment(c, store.Deployment{AccountID: f.account.ID, ID: 2, Name: "before"}); err != nil {
					return err
				}
				cancel()
				if err := tx.SaveDeployment(c, store.Deployment{AccountID: f.account.ID, ID: 3, Name: "after"}); err == nil {
					t.Error("a call after the context ended succeeded")
				}
				return nil
			})
			if err == nil {
				t.Fatal("InTx whose context ended: nil error")
			}
			if !errors.Is(err, store.ErrUnavailable) && !errors.Is(err, context.Canceled) {
				t.Errorf("InTx = %v, want ErrUnavailable or context.Canceled", err)
			}
			for _, id := range []int64{2, 3} {
				res, err := st.Lookup(ctx(t), store.Lookup{Scope: f.scope(), DeploymentID: id})
				mustNil(t, "Lookup", err)
				if res.DeploymentFound {
					t.Errorf("deployment %d of the cancelled transaction was committed", id)
				}
			}
		},
	},
	{
		name: "InTx commits every write of fn",
		doc:  "When fn returns nil, every write made through its Tx is committed and visible afterwards; reads inside the transaction see its own writes.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			var uid int64
			err := st.InTx(ctx(t), func(tx store.Tx) error {
				if err := tx.UpsertDefinitions(ctx(t), f.scope(), []store.GroupDef{{Name: "sales"}}, nil); err != nil {
					return err
				}
				res, err := tx.Lookup(ctx(t), store.Lookup{Scope: f.scope(), GroupNames: []string{"sales"}})
				if err != nil || len(res.Groups) != 1 {
					return errors.Join(err, errors.New("group not visible inside the transaction"))
				}
				up := f.upsert("u")
				up.SetGroups, up.GroupScope, up.Groups = true, f.scope(), []int64{res.Groups[0].ID}
				u, err := tx.UpsertUser(ctx(t), up)
				if err != nil {
					return err
				}
				uid = u.ID
				if _, err := tx.UserByID(ctx(t), u.ID, t0); err != nil {
					return err
				}
				if d, err := tx.UserData(ctx(t), u.ID, f.scope()); err != nil || len(d.Groups) != 1 {
					return errors.Join(err, errors.New("membership not visible inside the transaction"))
				}
				return tx.CreateSession(ctx(t), []byte("s"), store.Session{AccountID: f.account.ID, UserID: u.ID, DeploymentID: 1, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)})
			})
			mustNil(t, "InTx", err)
			if ms := f.data(t, st, uid, f.scope()).Groups; len(ms) != 1 {
				t.Errorf("memberships = %v", groupNames(ms))
			}
			_, err = st.ExchangeSession(ctx(t), []byte("s"), []byte("t"), t0.Add(time.Hour), t0)
			mustNil(t, "ExchangeSession", err)
		},
	},
	{
		name: "an error from fn leaves nothing behind",
		doc:  "A request is all or nothing: when fn fails, InTx returns fn's error unchanged and none of its writes are kept, including the places it took (persistent users, ephemeral users of the minute, embed tenants).",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			p := f.user(t, st, "p")
			err := st.InTx(ctx(t), func(tx store.Tx) error {
				if _, err := tx.EnsureEmbedTenant(ctx(t), f.account.ID, "tenant-one", 1); err != nil {
					return err
				}
				if err := tx.UpsertDefinitions(ctx(t), f.scope(), []store.GroupDef{{Name: "sales"}}, []store.AttributeDef{{Name: "country", Type: store.TypeString}}); err != nil {
					return err
				}
				res, err := tx.Lookup(ctx(t), store.Lookup{Scope: f.scope(), AttrNames: []string{"country"}, GroupNames: []string{"sales"}})
				if err != nil {
					return err
				}
				up := f.upsert("u")
				up.MaxUsers = 2
				up.Attributes = []store.AttributeValue{{AttributeID: res.Attributes[0].ID, Value: json.RawMessage(`"DE"`)}}
				up.SetGroups, up.GroupScope, up.Groups = true, f.scope(), []int64{res.Groups[0].ID}
				u, err := tx.UpsertUser(ctx(t), up)
				if err != nil {
					return err
				}
				e := f.upsert("e")
				e.Persistent, e.EphemeralExpiresAt, e.NewEphemeralPerMinute = false, t0.Add(time.Hour), 1
				if _, err := tx.UpsertUser(ctx(t), e); err != nil {
					return err
				}
				pu := f.upsert("p")
				pu.DisplayName = ptr("rolled back")
				if _, err := tx.UpsertUser(ctx(t), pu); err != nil {
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
			_, err = st.UserByKey(ctx(t), store.UserKey{AccountID: f.account.ID, ExternalID: "u"}, t0)
			wantErr(t, "rolled-back user", err, store.ErrNotFound)
			_, err = st.UserByKey(ctx(t), store.UserKey{AccountID: f.account.ID, ExternalID: "e"}, t0)
			wantErr(t, "rolled-back ephemeral user", err, store.ErrNotFound)
			if got, err := st.UserByID(ctx(t), p.ID, t0); err != nil || got.DisplayName != "" {
				t.Errorf("rolled-back update of p: %+v, %v", got, err)
			}
			_, err = st.EmbedTenantByName(ctx(t), f.account.ID, "tenant-one")
			wantErr(t, "rolled-back tenant", err, store.ErrNotFound)
			if as, gs := lookupAttrs(t, st, f.scope(), "country"), lookupGroups(t, st, f.scope(), "sales"); len(as)+len(gs) != 0 {
				t.Errorf("rolled-back definitions exist: %v %v", attrNames(as), groupNames(gs))
			}
			_, err = st.ExchangeSession(ctx(t), []byte("s"), []byte("t"), t0.Add(time.Hour), t0)
			wantErr(t, "rolled-back session", err, store.ErrNotFound)
			// The places taken by the rolled-back transaction are free again.
			up := f.upsert("v")
			up.MaxUsers = 2
			_, err = st.UpsertUser(ctx(t), up)
			mustNil(t, "persistent limit after rollback", err)
			e := f.upsert("e2")
			e.Persistent, e.EphemeralExpiresAt, e.NewEphemeralPerMinute = false, t0.Add(time.Hour), 1
			_, err = st.UpsertUser(ctx(t), e)
			mustNil(t, "ephemeral limit after rollback", err)
			_, err = st.EnsureEmbedTenant(ctx(t), f.account.ID, "tenant-two", 1)
			mustNil(t, "tenant limit after rollback", err)
		},
	},
	{
		name: "a store error inside InTx aborts the transaction",
		doc:  "fn that returns a sentinel from a Tx method (here ErrLimit) gets it back from InTx, testable with errors.Is, and earlier writes of fn are rolled back.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			err := st.InTx(ctx(t), func(tx store.Tx) error {
				if err := tx.UpsertDefinitions(ctx(t), f.scope(), []store.GroupDef{{Name: "g"}}, nil); err != nil {
					return err
				}
				up := f.upsert("u")
				up.MaxUsers = 1
				if _, err := tx.UpsertUser(ctx(t), up); err != nil {
					return err
				}
				up = f.upsert("u2")
				up.MaxUsers = 1
				_, err := tx.UpsertUser(ctx(t), up)
				return err
			})
			wantErr(t, "InTx", err, store.ErrLimit)
			gs, err := st.ListGroups(ctx(t), f.scope(), 0, 10)
			mustNil(t, "ListGroups", err)
			if len(gs) != 0 {
				t.Errorf("groups of a failed transaction: %v", groupNames(gs))
			}
			_, err = st.UserByKey(ctx(t), store.UserKey{AccountID: f.account.ID, ExternalID: "u"}, t0)
			wantErr(t, "user of a failed transaction", err, store.ErrNotFound)
		},
	},
}
