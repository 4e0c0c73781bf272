package embedsession_test

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/operator"
)

// tenantCount returns how many of the embed tenants tenant-0 to
// tenant-<names-1> the account has.
func tenantCount(t *testing.T, s *apitest.Server, names int) int {
	t.Helper()
	n := 0
	for i := range names {
		_, err := s.Store.EmbedTenantByName(t.Context(), s.Accounts[apitest.Account].ID, fmt.Sprintf("tenant-%d", i))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

func TestEmbedTenantLimit(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		s := apitest.New(t, tg, apitest.WithConfig(func(c *operator.Config) { c.Accounts[0].Limits = store.Limits{EmbedTenants: 3} }))
		if n := tenantCount(t, s, 4); n != 0 {
			t.Fatalf("%d embed tenants before the test, want 0", n)
		}
		for i := range 3 {
			r := s.Send(t, s.Request(t, http.MethodPost, gen, apitest.AdminKey, body("u", obj{"embedTenantName": fmt.Sprintf("tenant-%d", i)})))
			if r.Status != http.StatusOK {
				t.Fatalf("tenant %d: %d %s", i, r.Status, r.Raw)
			}
		}
		checkRejection(t, s, rejection{body: body("u4", obj{"embedTenantName": "tenant-3"}), status: http.StatusForbidden,
			msg: "embed tenant limit of 3 reached for this account", exact: true})
		if n := tenantCount(t, s, 4); n != 3 {
			t.Errorf("%d embed tenants after the refusal, want 3", n)
		}
		if _, err := s.Store.UserByKey(t.Context(), store.UserKey{AccountID: s.Accounts[apitest.Account].ID, ExternalID: "u4"}, s.Now()); err == nil {
			t.Errorf("the refused request created its user")
		}
		// A missing internal user is answered before the tenant is counted.
		for _, b := range []obj{
			{"deploymentId": 1, "internalId": "nobody@acme.test", "embedTenantName": "tenant-3"},
			{"deploymentId": 1, "internalId": "nobody@acme.test", "creatorMode": true}, // the default tenant, not created yet
		} {
			checkRejection(t, s, rejection{body: b, status: http.StatusBadRequest, msg: `internalId: internal user "nobody@acme.test" not found`, exact: true})
		}
		// An existing tenant is still usable at the limit.
		if r := s.Send(t, s.Request(t, http.MethodPost, gen, apitest.AdminKey, body("u4", obj{"embedTenantName": "tenant-1"}))); r.Status != http.StatusOK {
			t.Fatalf("an existing tenant at the limit: %d %s", r.Status, r.Raw)
		}
	})
}

// TestEmbedTenantLimitConcurrent: 64 generate-sessions naming 64 new
// tenants at once with the handler's default limit at 10 create exactly
// 10.
func TestEmbedTenantLimitConcurrent(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		s := apitest.New(t, tg, apitest.WithEmbedOptions(embedsession.WithMaxEmbedTenants(10)))
		var ok, refused atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 64 {
			wg.Go(func() {
				<-start
				r := s.Send(t, s.Request(t, http.MethodPost, gen, apitest.AdminKey,
					body(fmt.Sprintf("u%d", i), obj{"embedTenantName": fmt.Sprintf("tenant-%d", i)})))
				switch r.Status {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusForbidden:
					refused.Add(1)
				default:
					t.Errorf("request %d: %d %s", i, r.Status, r.Raw)
				}
			})
		}
		close(start)
		wg.Wait()
		if ok.Load() != 10 || refused.Load() != 54 {
			t.Errorf("%d succeeded and %d got 403, want 10 and 54", ok.Load(), refused.Load())
		}
		if n := tenantCount(t, s, 64); n != 10 {
			t.Errorf("%d embed tenants, want 10", n)
		}
	})
}
