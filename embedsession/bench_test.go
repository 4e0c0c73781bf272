package embedsession_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/operator"
)

func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: 128, MaxIdleConnsPerHost: 128}}
}

// BenchmarkGenerateSession measures generate-session over HTTP with a
// realistic body (profile, 3 attributes, 2 groups) from 32 concurrent
// clients (SetParallelism(16) on 2 cores), over a pool of 1,000 users, on
// each backend, with and without WithCacheTTL. The client runs in the same
// process and takes part of the CPU.
func BenchmarkGenerateSession(b *testing.B) {
	for _, name := range []string{"sqlite", "sqlite/cached", "postgres", "postgres/cached"} {
		backend, cached, _ := strings.Cut(name, "/")
		b.Run(name, func(b *testing.B) {
			opts := []apitest.Option{apitest.WithConfig(func(c *operator.Config) {
				c.Accounts[0].UserAttributes = append(c.Accounts[0].UserAttributes, operator.Attribute{Name: "plan", Type: store.TypeString})
			})}
			if cached != "" {
				opts = append(opts, apitest.WithEmbedOptions(embedsession.WithCacheTTL(time.Minute)))
			}
			s := apitest.New(b, apitest.Target{Backend: backend, Router: apitest.ServeMux}, opts...)
			bodies := make([][]byte, 1000)
			for i := range bodies {
				bodies[i], _ = json.Marshal(body(fmt.Sprintf("user-%04d", i), obj{
					"email":          fmt.Sprintf("user-%04d@example.test", i),
					"userProfile":    obj{"displayName": fmt.Sprintf("User %d", i), "picture": "https://cdn.example.test/u.png"},
					"userAttributes": attrs("country", "US", "region_ids", []int{1, 2, 3}, "plan", "gold"),
					"groups":         []string{"sales", "marketing"},
				}))
			}
			hc := benchClient()
			var n, failed atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					req, _ := http.NewRequest(http.MethodPost, s.URL+embedsession.PathGenerateSession, bytes.NewReader(bodies[i%int64(len(bodies))]))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Authorization", "Api-Key "+apitest.AdminKey)
					resp, err := hc.Do(req)
					if err != nil {
						failed.Add(1)
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						failed.Add(1)
					}
				}
			})
			b.StopTimer()
			if f := failed.Load(); f > 0 {
				b.Fatalf("%d of %d requests failed", f, n.Load())
			}
			b.ReportMetric(float64(n.Load())/b.Elapsed().Seconds(), "req/s")
		})
	}
}

// BenchmarkAdminList lists groups of an embed tenant holding 100,000 groups:
// the first page and the last page must cost about the same (keyset
// pagination).
func BenchmarkAdminList(b *testing.B) {
	for _, backend := range testdb.Backends() {
		b.Run(backend, func(b *testing.B) {
			s := apitest.New(b, apitest.Target{Backend: backend, Router: apitest.ServeMux})
			ctx := context.Background()
			acct := s.Accounts[apitest.Account]
			et, err := s.Store.EnsureEmbedTenant(ctx, acct.ID, "big-tenant", 0)
			if err != nil {
				b.Fatal(err)
			}
			scope := store.Scope{AccountID: acct.ID, EmbedTenantID: et.ID}
			const total, batch = 100_000, 1000
			for i := 0; i < total; i += batch {
				defs := make([]store.GroupDef, batch)
				for j := range defs {
					defs[j] = store.GroupDef{Name: fmt.Sprintf("group-%06d", i+j)}
				}
				if err := s.Store.UpsertDefinitions(ctx, scope, defs, nil); err != nil {
					b.Fatal(err)
				}
			}
			// Walk the API once with big pages to the cursor before the last
			// page of 50.
			cursor := ""
			for seen := 0; seen < total-50; {
				q := fmt.Sprintf("?first=%d", min(1000, total-50-seen))
				if cursor != "" {
					q += "&after=" + cursor
				}
				status, page := s.Do(b, "GET", "/api/v1/embed-tenants/big-tenant/groups"+q, apitest.AdminKey, nil)
				if status != 200 {
					b.Fatalf("list = %d %v", status, page)
				}
				seen += len(page["items"].([]any))
				cursor = page["pageInfo"].(map[string]any)["endCursor"].(string)
			}
			lastURL := "/api/v1/embed-tenants/big-tenant/groups?first=50&after=" + cursor
			hc := benchClient()
			get := func(b *testing.B, path string, wantItems int, wantNext bool) {
				for b.Loop() {
					req, _ := http.NewRequest(http.MethodGet, s.URL+path, nil)
					req.Header.Set("Authorization", "Api-Key "+apitest.AdminKey)
					resp, err := hc.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					var p struct {
						Items    []json.RawMessage `json:"items"`
						PageInfo struct {
							HasNextPage bool `json:"hasNextPage"`
						} `json:"pageInfo"`
					}
					err = json.NewDecoder(resp.Body).Decode(&p)
					resp.Body.Close()
					if err != nil || len(p.Items) != wantItems || p.PageInfo.HasNextPage != wantNext {
						b.Fatalf("page: %d items, next %v, err %v", len(p.Items), p.PageInfo.HasNextPage, err)
					}
				}
			}
			b.Run("first", func(b *testing.B) {
				b.ReportAllocs()
				get(b, "/api/v1/embed-tenants/big-tenant/groups?first=50", 50, true)
			})
			b.Run("last", func(b *testing.B) {
				b.ReportAllocs()
				get(b, lastURL, 50, false)
			})
		})
	}
}
