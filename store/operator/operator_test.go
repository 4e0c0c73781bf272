package operator_test

import (
	"context"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/embedkit/embedkit/internal/optiontest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore"
	"github.com/embedkit/embedkit/store/memstore"
	"github.com/embedkit/embedkit/store/operator"
)

// stores runs fn on every backend: memstore, SQLite, and PostgreSQL when
// EMBEDKIT_TEST_POSTGRES_DSN is set.
func stores(t *testing.T, fn func(t *testing.T, st store.Store)) {
	t.Run("memory", func(t *testing.T) { fn(t, memstore.New()) })
	for _, b := range testdb.Backends() {
		t.Run(b, func(t *testing.T) { fn(t, testdb.Open(t, b)) })
	}
}

// works reports whether key authenticates for the account named acct.
func works(t *testing.T, st store.Store, key, acct string) bool {
	t.Helper()
	a, err := st.AccountByName(context.Background(), acct)
	if err != nil {
		t.Fatal(err)
	}
	k, _, err := st.APIKeyByHash(context.Background(), hash(key))
	if errors.Is(err, store.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return k.AccountID == a.ID
}

func hash(key string) []byte {
	h, err := hex.DecodeString(operator.HashKey(key))
	if err != nil {
		panic(err)
	}
	return h
}

func TestConfigIsAuthoritativeForKeys(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		op := operator.New(st)
		cfg := func(keys ...operator.APIKey) operator.Config {
			return operator.Config{Accounts: []operator.Account{{Name: "acme", APIKeys: keys}}}
		}
		// Another account that the configuration does not list.
		if err := op.Apply(ctx, operator.Config{Accounts: []operator.Account{{Name: "globex", APIKeys: []operator.APIKey{{Key: "sk-globex"}}}}}); err != nil {
			t.Fatal(err)
		}
		if err := op.Apply(ctx, cfg(operator.APIKey{Key: "sk-a", Admin: true}, operator.APIKey{KeyHash: operator.HashKey("sk-b")})); err != nil {
			t.Fatal(err)
		}
		if !works(t, st, "sk-a", "acme") || !works(t, st, "sk-b", "acme") {
			t.Fatal("configured keys (key and keyHash) do not work")
		}
		apiKey, _, err := op.CreateAPIKey(ctx, "acme", operator.APIKey{Name: "made in Go"})
		if err != nil {
			t.Fatal(err)
		}

		// The next start lists only sk-b: sk-a stops working, the key of
		// the Go API and the other account's key are untouched.
		if err := op.Apply(ctx, cfg(operator.APIKey{KeyHash: operator.HashKey("sk-b")})); err != nil {
			t.Fatal(err)
		}
		if works(t, st, "sk-a", "acme") {
			t.Error("a key dropped from the configuration still works")
		}
		if !works(t, st, "sk-b", "acme") || !works(t, st, apiKey, "acme") || !works(t, st, "sk-globex", "globex") {
			t.Error("the configuration removed a key it lists, a Go API key, or a key of an account it does not list")
		}

		// A key first added through the Go API becomes the
		// configuration's once it is listed there.
		if _, err := op.AddAPIKey(ctx, "acme", operator.APIKey{Key: "sk-c"}); err != nil {
			t.Fatal(err)
		}
		if err := op.Apply(ctx, cfg(operator.APIKey{Key: "sk-b"}, operator.APIKey{Key: "sk-c"})); err != nil {
			t.Fatal(err)
		}
		if err := op.Apply(ctx, cfg(operator.APIKey{Key: "sk-b"})); err != nil {
			t.Fatal(err)
		}
		if works(t, st, "sk-c", "acme") {
			t.Error("a key the configuration listed, then dropped, still works")
		}

		// A key moves from one listed account to another in one start.
		two := operator.Config{Accounts: []operator.Account{
			{Name: "acme", APIKeys: []operator.APIKey{{Key: "sk-b"}}},
			{Name: "initech", APIKeys: []operator.APIKey{{Key: "sk-i"}}},
		}}
		if err := op.Apply(ctx, two); err != nil {
			t.Fatal(err)
		}
		two.Accounts[0].APIKeys, two.Accounts[1].APIKeys = nil, []operator.APIKey{{Key: "sk-i"}, {Key: "sk-b"}}
		if err := op.Apply(ctx, two); err != nil {
			t.Fatalf("moving a key between listed accounts: %v", err)
		}
		if works(t, st, "sk-b", "acme") || !works(t, st, "sk-b", "initech") {
			t.Error("the moved key is not initech's alone")
		}
	})
}

func TestKeyLifecycle(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		op := operator.New(st)
		if _, err := op.SaveAccount(ctx, operator.Account{Name: "acme", Plan: store.PlanPremium}); err != nil {
			t.Fatal(err)
		}
		key, info, err := op.CreateAPIKey(ctx, "acme", operator.APIKey{Admin: true, Name: "ci"})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(key, "sk-") || len(key) < 40 {
			t.Errorf("key %q: want sk- and 256 random bits", "[redacted]")
		}
		if info.Hash != operator.HashKey(key) || !info.Admin || info.Name != "ci" || info.Origin != store.OriginAPI || info.CreatedAt.IsZero() {
			t.Errorf("info = %+v", info)
		}
		key2, _, err := op.CreateAPIKey(ctx, "acme", operator.APIKey{})
		if err != nil || key2 == key {
			t.Fatalf("second key: %v (same as the first: %v)", err, key2 == key)
		}
		if !works(t, st, key, "acme") || !works(t, st, key2, "acme") {
			t.Fatal("created keys do not work")
		}
		list, err := op.APIKeys(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		hashes := []string{list[0].Hash, list[1].Hash}
		if len(list) != 2 || !slices.Contains(hashes, operator.HashKey(key)) || !slices.Contains(hashes, operator.HashKey(key2)) {
			t.Errorf("APIKeys = %+v", list)
		}
		for _, k := range list {
			if strings.Contains(k.Hash+k.Name, key) || strings.Contains(k.Hash+k.Name, key2) {
				t.Error("APIKeys shows a secret")
			}
		}

		if err := op.RevokeAPIKey(ctx, "acme", operator.HashKey(key)); err != nil {
			t.Fatal(err)
		}
		if works(t, st, key, "acme") || !works(t, st, key2, "acme") {
			t.Error("revoke: wrong key removed")
		}
		if err := op.RevokeAPIKey(ctx, "acme", operator.HashKey(key)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("revoking twice: %v, want ErrNotFound", err)
		}
		if _, err := op.SaveAccount(ctx, operator.Account{Name: "globex"}); err != nil {
			t.Fatal(err)
		}
		if err := op.RevokeAPIKey(ctx, "globex", operator.HashKey(key2)); !errors.Is(err, store.ErrNotFound) || !works(t, st, key2, "acme") {
			t.Errorf("revoking another account's key: %v, want ErrNotFound and the key kept", err)
		}
		if err := op.RevokeAPIKey(ctx, "acme", "nothex"); err == nil {
			t.Error("a malformed hash is accepted")
		}
		if _, _, err := op.CreateAPIKey(ctx, "nobody", operator.APIKey{}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("key of an unknown account: %v, want ErrNotFound", err)
		}
		if _, _, err := op.CreateAPIKey(ctx, "acme", operator.APIKey{Key: "mine"}); err == nil {
			t.Error("CreateAPIKey accepted a key of the caller")
		}
		_, err = op.AddAPIKey(ctx, "globex", operator.APIKey{Key: key2})
		if !errors.Is(err, store.ErrConflict) || strings.Contains(err.Error(), key2) {
			t.Errorf("adding another account's key: %v, want ErrConflict without the key", err)
		}
	})
}

func TestSetUpATenant(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		op := operator.New(st)
		acct, err := op.SaveAccount(ctx, operator.Account{Name: "acme", Plan: store.PlanEnterprise, UseCreatorMode: true, MaxExternalUsers: 50, Branches: []string{"main"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := op.SaveDeployment(ctx, "acme", operator.Deployment{ID: 3, Name: "prod"}); err != nil {
			t.Fatal(err)
		}
		if err := op.SaveAgent(ctx, "acme", operator.Agent{ID: "9", DeploymentID: 3}); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{".", ".."} {
			if err := op.SaveAgent(ctx, "acme", operator.Agent{ID: id, DeploymentID: 3}); err == nil || !strings.Contains(err.Error(), "a browser cannot address it") {
				t.Errorf("agent %q: %v, want refused", id, err)
			}
		}
		if err := op.SaveAgent(ctx, "acme", operator.Agent{ID: "10", DeploymentID: 4}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("agent of a missing deployment: %v, want ErrNotFound", err)
		}
		if _, err := op.SaveInternalUser(ctx, "acme", operator.InternalUser{Username: "alice@acme.test"}); err != nil {
			t.Fatal(err)
		}
		if err := op.SaveGroups(ctx, "acme", []operator.Group{{Name: "sales"}}); err != nil {
			t.Fatal(err)
		}
		if err := op.SaveAttributes(ctx, "acme", []operator.Attribute{{Name: "country", Type: store.TypeString}}); err != nil {
			t.Fatal(err)
		}
		got, err := op.Account(ctx, "acme")
		if err != nil || got.ID != acct.ID || got.Plan != store.PlanEnterprise || !got.UseCreatorMode || got.MaxExternalUsers != 50 {
			t.Errorf("Account = %+v, %v", got, err)
		}
		if a, err := st.Agent(ctx, acct.ID, "9"); err != nil || a.DeploymentID != 3 {
			t.Errorf("agent = %+v, %v", a, err)
		}
		if _, err := st.UserByKey(ctx, store.UserKey{AccountID: acct.ID, InternalID: "alice@acme.test"}, time.Now()); err != nil {
			t.Error(err)
		}
		// All or nothing: a type change among new definitions adds none.
		err = op.SaveAttributes(ctx, "acme", []operator.Attribute{{Name: "region", Type: store.TypeNumber}, {Name: "country", Type: store.TypeNumber}})
		if !errors.Is(err, store.ErrConflict) {
			t.Errorf("type change: %v, want ErrConflict", err)
		}
		if found, _ := st.Lookup(ctx, store.Lookup{Scope: store.TenantWide(acct.ID), AttrNames: []string{"region"}}); len(found.Attributes) != 0 {
			t.Error("a refused SaveAttributes kept a definition")
		}
		if _, err := op.Account(ctx, "nobody"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unknown account: %v", err)
		}
		if err := op.SaveGroups(ctx, "nobody", []operator.Group{{Name: "x"}}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("groups of an unknown account: %v", err)
		}
		// NUL, which PostgreSQL's text cannot hold, is refused alike on
		// every backend.
		if err := op.SaveGroups(ctx, "acme", []operator.Group{{Name: "sa\x00les"}}); err == nil || !strings.Contains(err.Error(), "NUL") {
			t.Errorf("a group name with NUL: %v, want it refused", err)
		}
	})
}

func TestApplyAgentNeedsDeployment(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		cfg := operator.Config{Accounts: []operator.Account{{Name: "acme", Agents: []operator.Agent{{ID: "7", DeploymentID: 2}}}}}
		if err := operator.New(st).Apply(ctx, cfg); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("agent of a missing deployment: %v, want ErrNotFound", err)
		}
		if _, err := st.AccountByName(ctx, "acme"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the refused configuration wrote the account: %v", err)
		}
		cfg.Accounts[0].Deployments = []operator.Deployment{{ID: 2, Name: "staging"}}
		if err := operator.New(st).Apply(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	})
}

// TestNewNilStorePanics: New panics on a nil store, a nil interface or a
// nil pointer in one (an ignored Open error), rather than in the first
// method called.
func TestNewNilStorePanics(t *testing.T) {
	optiontest.Panics(t, map[string]func(){
		"operator: New: store must not be nil, got nil": func() { operator.New(nil) },
		"operator: New: store must not be nil, got (*gormstore.Store)(nil) (was the error of the function that returned it ignored?)": func() {
			operator.New((*gormstore.Store)(nil))
		},
	})
}
