package operator_test

import (
	"context"
	"encoding/hex"
	"sync"
	"testing"

	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/operator"
)

// openShared opens a store on dsn, closed by t.Cleanup.
func openShared(t *testing.T, dsn string) store.Store {
	t.Helper()
	st, err := testdb.OpenStore(dsn)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// replica starts a test server on st with the embedsession handler's
// caches on (5 s: keys, deployments), as the example server runs.
func replica(t *testing.T, backend string, st store.Store, opts ...apitest.Option) *apitest.Server {
	t.Helper()
	opts = append([]apitest.Option{
		apitest.WithStore(func(testing.TB, string) store.Store { return st }),
		apitest.WithEmbedOptions(embedsession.WithCacheTTL(middleware.MaxKeyCacheTTL)),
	}, opts...)
	return apitest.New(t, apitest.Target{Backend: backend, Router: apitest.ServeMux}, opts...)
}

func generate(t *testing.T, s *apitest.Server, key string) int {
	t.Helper()
	status, _ := s.Do(t, "POST", "/api/v1/embed/generate-session", key, map[string]any{"deploymentId": 1, "externalId": "jane"})
	return status
}

// TestRevokeOverHTTP: a key revoked through the Go API is refused at once by
// the server that revoked it, and by another replica sharing the database
// within its key cache's lifetime (5 s on its clock), over real HTTP.
func TestRevokeOverHTTP(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			dsn := testdb.OpenDSN(t, backend)
			s1 := replica(t, backend, openShared(t, dsn))
			s2 := replica(t, backend, openShared(t, dsn))
			ctx := context.Background()
			op := operator.New(s1.Store)

			key, info, err := op.CreateAPIKey(ctx, apitest.Account, operator.APIKey{Name: "host"})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []*apitest.Server{s1, s2} {
				if got := generate(t, s, key); got != 200 {
					t.Fatalf("new key: %d, want 200", got)
				}
			}
			if err := op.RevokeAPIKey(ctx, apitest.Account, info.Hash); err != nil {
				t.Fatal(err)
			}
			if got := generate(t, s1, key); got != 401 {
				t.Errorf("the server that revoked the key (cached there): %d, want 401 at once", got)
			}

			// Another replica learns of a revocation through the database
			// only. Simulate a revocation by another process: the row goes,
			// and this process is not told.
			other, _, err := op.CreateAPIKey(ctx, apitest.Account, operator.APIKey{})
			if err != nil {
				t.Fatal(err)
			}
			if got := generate(t, s2, other); got != 200 {
				t.Fatalf("second key: %d, want 200", got)
			}
			h, _ := hex.DecodeString(operator.HashKey(other))
			if err := s1.Store.DeleteAPIKey(ctx, s1.Accounts[apitest.Account].ID, h); err != nil {
				t.Fatal(err)
			}
			s2.Advance(middleware.MaxKeyCacheTTL - 1)
			if got := generate(t, s2, other); got != 401 {
				// The replica's cache still accepts the key, but the
				// store mints no session with a deleted key.
				t.Errorf("within the cache lifetime: %d, want 401 (no session of a deleted key)", got)
			}
			s2.Advance(1)
			if got := generate(t, s2, other); got != 401 {
				t.Errorf("replica %v after a revocation elsewhere: %d, want 401", middleware.MaxKeyCacheTTL, got)
			}
			if got := generate(t, s2, apitest.AdminKey); got != 200 {
				t.Errorf("an unrevoked key: %d, want 200", got)
			}
		})
	}
}

// TestRevokeByConfig: a key dropped from the bootstrap configuration is
// refused after the next start; a key created through the Go API survives.
func TestRevokeByConfig(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			dsn := testdb.OpenDSN(t, backend)
			withTemp := apitest.WithConfig(func(c *operator.Config) {
				c.Accounts[0].APIKeys = append(c.Accounts[0].APIKeys,
					operator.APIKey{Key: "sk-acme-temp"},
					operator.APIKey{KeyHash: operator.HashKey("sk-acme-hashed")})
			})
			st1, err := testdb.OpenStore(dsn)
			if err != nil {
				t.Fatal(err)
			}
			s1 := replica(t, backend, st1, withTemp)
			goKey, _, err := operator.New(st1).CreateAPIKey(context.Background(), apitest.Account, operator.APIKey{})
			if err != nil {
				t.Fatal(err)
			}
			// A listed key relabelled through the Go API stays the
			// configuration's.
			if _, err := operator.New(st1).AddAPIKey(context.Background(), apitest.Account, operator.APIKey{Key: "sk-acme-temp", Name: "frontend"}); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"sk-acme-temp", "sk-acme-hashed", goKey} {
				if got := generate(t, s1, k); got != 200 {
					t.Fatalf("first start, a listed key: %d, want 200", got)
				}
			}
			s1.Close()
			if err := st1.Close(); err != nil {
				t.Fatal(err)
			}

			// Restart with the default configuration: both keys dropped.
			s2 := replica(t, backend, openShared(t, dsn))
			for _, k := range []string{"sk-acme-temp", "sk-acme-hashed"} {
				if got := generate(t, s2, k); got != 401 {
					t.Errorf("a key dropped from the configuration, after the restart: %d, want 401", got)
				}
			}
			for _, k := range []string{goKey, apitest.AdminKey, apitest.UserKey} {
				if got := generate(t, s2, k); got != 200 {
					t.Errorf("a kept key after the restart: %d, want 200", got)
				}
			}
		})
	}
}

// TestDemoteOverHTTP: a key whose admin flag AddAPIKey clears loses the
// admin endpoints at once on the server that changed it, though its key
// cache held it as an admin key.
func TestDemoteOverHTTP(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			s := replica(t, backend, openShared(t, testdb.OpenDSN(t, backend)))
			ctx := context.Background()
			op := operator.New(s.Store)
			key, _, err := op.CreateAPIKey(ctx, apitest.Account, operator.APIKey{Name: "host", Admin: true})
			if err != nil {
				t.Fatal(err)
			}
			list := func() int {
				status, _ := s.Do(t, "GET", "/api/v1/embed-tenants/default/groups", key, nil)
				return status
			}
			if got := list(); got == 401 || got == 403 {
				t.Fatalf("admin key on an admin endpoint: %d", got)
			}
			if _, err := op.AddAPIKey(ctx, apitest.Account, operator.APIKey{Key: key, Name: "host"}); err != nil {
				t.Fatal(err)
			}
			if got := list(); got != 403 {
				t.Errorf("the demoted key (cached as admin): %d, want 403 at once", got)
			}
		})
	}
}

// TestReplicasStartTogether: replicas that start at once with a
// configuration that drops a key all start (each deletes the key, or finds
// it deleted by another), and the key is gone.
func TestReplicasStartTogether(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			for range 3 {
				dsn := testdb.OpenDSN(t, backend)
				old := operator.DemoConfig()
				old.Accounts[0].APIKeys = append(old.Accounts[0].APIKeys, operator.APIKey{Key: "sk-acme-old"})
				if err := operator.New(openShared(t, dsn)).Apply(t.Context(), old); err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				for i := range 6 {
					st := openShared(t, dsn)
					wg.Go(func() {
						if err := operator.New(st).Apply(t.Context(), operator.DemoConfig()); err != nil {
							t.Errorf("replica %d: Apply: %v", i, err)
						}
					})
				}
				wg.Wait()
				st := openShared(t, dsn)
				acct, err := st.AccountByName(t.Context(), "acme")
				if err != nil {
					t.Fatal(err)
				}
				keys, err := st.APIKeys(t.Context(), acct.ID)
				if err != nil {
					t.Fatal(err)
				}
				if len(keys) != len(operator.DemoConfig().Accounts[0].APIKeys) {
					t.Errorf("%d keys after the replicas started, want the demo's %d", len(keys), len(operator.DemoConfig().Accounts[0].APIKeys))
				}
			}
		})
	}
}
