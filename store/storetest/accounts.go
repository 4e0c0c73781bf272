package storetest

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/embedkit/embedkit/store"
)

var accountRules = []rule{
	{
		name: "API keys keep origin, name and creation time",
		doc:  "SaveAPIKey stores Origin (empty as OriginAPI), Name and CreatedAt; saving the hash again updates admin, origin and name and keeps CreatedAt.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			h := bytes.Repeat([]byte{0x11}, 32)
			mustNil(t, "SaveAPIKey", st.SaveAPIKey(ctx(t), store.APIKey{Hash: h, AccountID: f.account.ID, Name: "ci", CreatedAt: t0}))
			k, _, err := st.APIKeyByHash(ctx(t), h)
			mustNil(t, "APIKeyByHash", err)
			if k.Origin != store.OriginAPI || k.Name != "ci" || !k.CreatedAt.Equal(t0) {
				t.Errorf("key = %+v, want origin api, name ci, created %v", k, t0)
			}
			mustNil(t, "SaveAPIKey again", st.SaveAPIKey(ctx(t), store.APIKey{Hash: h, AccountID: f.account.ID, Admin: true,
				Origin: store.OriginConfig, Name: "", CreatedAt: t0.Add(time.Hour)}))
			k, _, err = st.APIKeyByHash(ctx(t), h)
			mustNil(t, "APIKeyByHash", err)
			if k.Origin != store.OriginConfig || k.Name != "" || !k.Admin || !k.CreatedAt.Equal(t0) {
				t.Errorf("key = %+v, want admin config key created %v", k, t0)
			}
		},
	},
	{
		name: "APIKeys lists an account's keys in creation order",
		doc:  "APIKeys returns the keys of one account only, ordered by CreatedAt then hash; an account without keys gets an empty list.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			other := newFixture(t, st, "other")
			list, err := st.APIKeys(ctx(t), f.account.ID)
			mustNil(t, "APIKeys", err)
			if len(list) != 0 {
				t.Fatalf("APIKeys of an account without keys = %+v", list)
			}
			h1, h2, h3 := bytes.Repeat([]byte{3}, 32), bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
			mustNil(t, "SaveAPIKey", st.SaveAPIKey(ctx(t), store.APIKey{Hash: h1, AccountID: f.account.ID, CreatedAt: t0}))
			mustNil(t, "SaveAPIKey", st.SaveAPIKey(ctx(t), store.APIKey{Hash: h2, AccountID: f.account.ID, Admin: true, Origin: store.OriginConfig, CreatedAt: t0.Add(time.Second)}))
			mustNil(t, "SaveAPIKey", st.SaveAPIKey(ctx(t), store.APIKey{Hash: h3, AccountID: other.account.ID, CreatedAt: t0}))
			list, err = st.APIKeys(ctx(t), f.account.ID)
			mustNil(t, "APIKeys", err)
			if len(list) != 2 || !bytes.Equal(list[0].Hash, h1) || !bytes.Equal(list[1].Hash, h2) ||
				list[1].Origin != store.OriginConfig || !list[1].Admin || list[0].AccountID != f.account.ID {
				t.Errorf("APIKeys = %+v, want h1 then h2 of account %d", list, f.account.ID)
			}
		},
	},
	{
		name: "DeleteAPIKey removes one key of its account",
		doc:  "DeleteAPIKey deletes the key at once (APIKeyByHash is then ErrNotFound); a hash unknown or of another account is ErrNotFound and changes nothing; inside a rolled-back transaction nothing is deleted.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			other := newFixture(t, st, "other")
			h, keep := bytes.Repeat([]byte{7}, 32), bytes.Repeat([]byte{8}, 32)
			mustNil(t, "SaveAPIKey", st.SaveAPIKey(ctx(t), store.APIKey{Hash: h, AccountID: f.account.ID}))
			mustNil(t, "SaveAPIKey", st.SaveAPIKey(ctx(t), store.APIKey{Hash: keep, AccountID: f.account.ID}))
			wantErr(t, "DeleteAPIKey of another account", st.DeleteAPIKey(ctx(t), other.account.ID, h), store.ErrNotFound)
			wantErr(t, "DeleteAPIKey unknown", st.DeleteAPIKey(ctx(t), f.account.ID, bytes.Repeat([]byte{9}, 32)), store.ErrNotFound)
			boom := errors.New("boom")
			err := st.InTx(ctx(t), func(tx store.Tx) error {
				mustNil(t, "DeleteAPIKey in tx", tx.DeleteAPIKey(ctx(t), f.account.ID, h))
				return boom
			})
			wantErr(t, "InTx", err, boom)
			_, _, err = st.APIKeyByHash(ctx(t), h)
			mustNil(t, "APIKeyByHash after a rolled-back delete", err)
			mustNil(t, "DeleteAPIKey", st.DeleteAPIKey(ctx(t), f.account.ID, h))
			_, _, err = st.APIKeyByHash(ctx(t), h)
			wantErr(t, "APIKeyByHash after DeleteAPIKey", err, store.ErrNotFound)
			wantErr(t, "DeleteAPIKey twice", st.DeleteAPIKey(ctx(t), f.account.ID, h), store.ErrNotFound)
			list, err := st.APIKeys(ctx(t), f.account.ID)
			mustNil(t, "APIKeys", err)
			if len(list) != 1 || !bytes.Equal(list[0].Hash, keep) {
				t.Errorf("APIKeys after delete = %+v, want only the other key", list)
			}
		},
	},
	{
		name: "SaveAccount creates then updates by name",
		doc:  "SaveAccount is idempotent by name: a second call keeps the ID and overwrites plan, flags, limit and branches.",
		fn: func(t *testing.T, st store.Store) {
			a, err := st.SaveAccount(ctx(t), store.Account{Name: "acme", Plan: store.PlanFree, MaxExternalUsers: 5, Branches: []string{"main"}})
			mustNil(t, "SaveAccount", err)
			if a.ID == 0 {
				t.Fatal("SaveAccount returned ID 0")
			}
			b, err := st.SaveAccount(ctx(t), store.Account{Name: "acme", Plan: store.PlanEnterprise, UseCreatorMode: true, MaxExternalUsers: 7, Branches: []string{"main", "dev-1"}})
			mustNil(t, "SaveAccount again", err)
			if b.ID != a.ID {
				t.Fatalf("second SaveAccount ID = %d, want %d", b.ID, a.ID)
			}
			for _, get := range []func() (store.Account, error){
				func() (store.Account, error) { return st.AccountByID(ctx(t), a.ID) },
				func() (store.Account, error) { return st.AccountByName(ctx(t), "acme") },
			} {
				got, err := get()
				mustNil(t, "AccountBy*", err)
				if got.Name != "acme" || got.Plan != store.PlanEnterprise || !got.UseCreatorMode || got.MaxExternalUsers != 7 ||
					!slices.Equal(got.Branches, []string{"main", "dev-1"}) {
					t.Errorf("account = %+v, want the updated values", got)
				}
			}
		},
	},
	{
		name: "unknown account is ErrNotFound",
		doc:  "AccountByID and AccountByName report a missing account with ErrNotFound.",
		fn: func(t *testing.T, st store.Store) {
			_, err := st.AccountByID(ctx(t), 424242)
			wantErr(t, "AccountByID", err, store.ErrNotFound)
			_, err = st.AccountByName(ctx(t), "nobody")
			wantErr(t, "AccountByName", err, store.ErrNotFound)
		},
	},
	{
		name: "API keys are found by hash and updated in place",
		doc:  "SaveAPIKey stores a key by its hash and updates the admin flag of an existing hash; APIKeyByHash returns the key with its account; an unknown hash is ErrNotFound; a hash of another account is ErrConflict and changes nothing.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			h := bytes.Repeat([]byte{0xab}, 32)
			mustNil(t, "SaveAPIKey", st.SaveAPIKey(ctx(t), store.APIKey{Hash: h, AccountID: f.account.ID}))
			k, a, err := st.APIKeyByHash(ctx(t), h)
			mustNil(t, "APIKeyByHash", err)
			if !bytes.Equal(k.Hash, h) || k.AccountID != f.account.ID || k.Admin {
				t.Errorf("key = %+v, want non-admin key of account %d", k, f.account.ID)
			}
			if a.ID != f.account.ID || a.Name != "acme" || a.Plan != store.PlanEnterprise || !a.UseCreatorMode || a.MaxExternalUsers != 100 {
				t.Errorf("account of the key = %+v, want %+v", a, f.account)
			}
			mustNil(t, "SaveAPIKey admin", st.SaveAPIKey(ctx(t), store.APIKey{Hash: h, AccountID: f.account.ID, Admin: true}))
			k, _, err = st.APIKeyByHash(ctx(t), h)
			mustNil(t, "APIKeyByHash", err)
			if !k.Admin {
				t.Error("admin flag not updated")
			}
			_, _, err = st.APIKeyByHash(ctx(t), bytes.Repeat([]byte{0xcd}, 32))
			wantErr(t, "APIKeyByHash unknown", err, store.ErrNotFound)

			other := newFixture(t, st, "other")
			err = st.SaveAPIKey(ctx(t), store.APIKey{Hash: h, AccountID: other.account.ID})
			wantErr(t, "SaveAPIKey of another account's key", err, store.ErrConflict)
			k, _, err = st.APIKeyByHash(ctx(t), h)
			mustNil(t, "APIKeyByHash after the conflict", err)
			if k.AccountID != f.account.ID || !k.Admin {
				t.Errorf("key changed by a refused SaveAPIKey: %+v", k)
			}
		},
	},
	{
		name: "deployments and agents are idempotent per account",
		doc:  "SaveDeployment and SaveAgent create or update by (account, id); a missing agent, or one of another account, is ErrNotFound.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			other := newFixture(t, st, "other")
			mustNil(t, "SaveDeployment rename", st.SaveDeployment(ctx(t), store.Deployment{AccountID: f.account.ID, ID: 1, Name: "prod"}))
			mustNil(t, "SaveDeployment again", st.SaveDeployment(ctx(t), store.Deployment{AccountID: f.account.ID, ID: 1, Name: "prod"}))
			res, err := st.Lookup(ctx(t), store.Lookup{Scope: f.scope(), DeploymentID: 1})
			mustNil(t, "Lookup", err)
			if !res.DeploymentFound || res.Deployment.Name != "prod" {
				t.Errorf("deployment = %+v, want prod", res)
			}
			res, err = st.Lookup(ctx(t), store.Lookup{Scope: other.scope(), DeploymentID: 1})
			mustNil(t, "Lookup", err)
			if !res.DeploymentFound || res.Deployment.Name != "production" {
				t.Errorf("other account's deployment = %+v, want its own, unrenamed", res)
			}

			mustNil(t, "SaveAgent", st.SaveAgent(ctx(t), store.Agent{AccountID: f.account.ID, ID: "7", DeploymentID: 1}))
			mustNil(t, "SaveAgent again", st.SaveAgent(ctx(t), store.Agent{AccountID: f.account.ID, ID: "7", DeploymentID: 2}))
			ag, err := st.Agent(ctx(t), f.account.ID, "7")
			mustNil(t, "Agent", err)
			if ag.DeploymentID != 2 {
				t.Errorf("agent deployment = %d, want 2", ag.DeploymentID)
			}
			_, err = st.Agent(ctx(t), other.account.ID, "7")
			wantErr(t, "Agent of another account", err, store.ErrNotFound)
		},
	},
}
