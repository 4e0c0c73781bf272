package embedsession

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/embedkit/embedkit/store/memstore"
	"github.com/embedkit/embedkit/store/operator"
)

// TestCachesStayBounded creates more embed tenants than the caches hold,
// over HTTP: each cache keeps at most WithCacheSize entries, and requests
// for evicted tenants still succeed.
func TestCachesStayBounded(t *testing.T) {
	st := memstore.New()
	if err := operator.New(st).Apply(context.Background(), operator.DemoConfig()); err != nil {
		t.Fatal(err)
	}
	const size = 8
	h := NewHandler(st, WithCacheTTL(time.Minute), WithCacheSize(size))
	mux := http.NewServeMux()
	for _, rt := range h.Routes() {
		mux.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	post := func(tenant string) {
		t.Helper()
		body := fmt.Sprintf(`{"deploymentId":1,"externalId":"jane","creatorMode":true,"embedTenantName":%q}`, tenant)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+PathGenerateSession, bytes.NewReader([]byte(body)))
		req.Header.Set("Authorization", "Api-Key sk-acme-admin")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("generate-session for %s: %d", tenant, resp.StatusCode)
		}
	}
	for i := range 5 * size {
		post(fmt.Sprintf("tenant-%03d", i))
	}
	if n := h.tenants.Len(); n != size {
		t.Errorf("embed tenant cache holds %d entries, want %d", n, size)
	}
	if n := h.deployments.Len(); n != 1 {
		t.Errorf("deployment cache holds %d entries, want 1", n)
	}
	post("tenant-000") // evicted long ago: looked up again
	if _, ok := h.tenants.Get(tenantKey{accountID(t, st, "acme"), "tenant-000"}, time.Time{}); !ok {
		t.Error("a tenant used again is not cached again")
	}
}

func accountID(t *testing.T, st *memstore.Store, name string) int64 {
	t.Helper()
	a, err := st.AccountByName(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return a.ID
}
