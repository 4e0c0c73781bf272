package storetest

import (
	"bytes"
	"slices"
	"testing"

	"github.com/embedkit/embedkit/store"
)

var accountRules = []rule{
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
		doc:  "SaveAPIKey stores a key by its hash and updates the admin flag of an existing hash; an unknown hash is ErrNotFound; a hash of another account is ErrConflict and changes nothing.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			h := bytes.Repeat([]byte{0xab}, 32)
			mustNil(t, "SaveAPIKey", st.SaveAPIKey(ctx(t), store.APIKey{Hash: h, AccountID: f.account.ID}))
			k, err := st.APIKeyByHash(ctx(t), h)
			mustNil(t, "APIKeyByHash", err)
			if !bytes.Equal(k.Hash, h) || k.AccountID != f.account.ID || k.Admin {
				t.Errorf("key = %+v, want non-admin key of account %d", k, f.account.ID)
			}
			mustNil(t, "SaveAPIKey admin", st.SaveAPIKey(ctx(t), store.APIKey{Hash: h, AccountID: f.account.ID, Admin: true}))
			k, err = st.APIKeyByHash(ctx(t), h)
			mustNil(t, "APIKeyByHash", err)
			if !k.Admin {
				t.Error("admin flag not updated")
			}
			_, err = st.APIKeyByHash(ctx(t), bytes.Repeat([]byte{0xcd}, 32))
			wantErr(t, "APIKeyByHash unknown", err, store.ErrNotFound)

			other := newFixture(t, st, "other")
			err = st.SaveAPIKey(ctx(t), store.APIKey{Hash: h, AccountID: other.account.ID})
			wantErr(t, "SaveAPIKey of another account's key", err, store.ErrConflict)
			k, err = st.APIKeyByHash(ctx(t), h)
			mustNil(t, "APIKeyByHash after the conflict", err)
			if k.AccountID != f.account.ID || !k.Admin {
				t.Errorf("key changed by a refused SaveAPIKey: %+v", k)
			}
		},
	},
	{
		name: "deployments and agents are idempotent per account",
		doc:  "SaveDeployment and SaveAgent create or update by (account, id); a missing one, or one of another account, is ErrNotFound.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			other := newFixture(t, st, "other")
			mustNil(t, "SaveDeployment rename", st.SaveDeployment(ctx(t), store.Deployment{AccountID: f.account.ID, ID: 1, Name: "prod"}))
			d, err := st.Deployment(ctx(t), f.account.ID, 1)
			mustNil(t, "Deployment", err)
			if d.Name != "prod" {
				t.Errorf("deployment name = %q, want prod", d.Name)
			}
			_, err = st.Deployment(ctx(t), f.account.ID, 2)
			wantErr(t, "Deployment missing", err, store.ErrNotFound)

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
