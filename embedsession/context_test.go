package embedsession_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store/operator"
)

type requestIDKey struct{}

// TestStatementsCarryTheirRequest sends 16 generate-sessions at once, each
// under a request context carrying its own id (as a host's tracing
// middleware would), and checks with a host GORM logger that every
// statement the store runs during them carries the context of a request,
// and each request exactly its own statements: as many as the same request
// runs alone.
func TestStatementsCarryTheirRequest(t *testing.T) {
	for _, backend := range []string{testdb.SQLite, testdb.Postgres} {
		t.Run(backend, func(t *testing.T) {
			var (
				mu     sync.Mutex
				counts = map[int]int{}
				orphan []string
				record bool
			)
			st := testdb.OpenWithHook(t, backend, func(ctx context.Context, sql string) {
				mu.Lock()
				defer mu.Unlock()
				if !record {
					return
				}
				if id, ok := ctx.Value(requestIDKey{}).(int); ok {
					counts[id]++
				} else {
					orphan = append(orphan, sql)
				}
			})
			if err := operator.New(st).Apply(t.Context(), apitest.Config()); err != nil {
				t.Fatal(err)
			}
			h := embedsession.NewHandler(st)
			mux := http.NewServeMux()
			for _, rt := range h.Routes() {
				mux.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				id, _ := strconv.Atoi(r.Header.Get("X-Request-Id"))
				mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id)))
			}))
			defer srv.Close()
			send := func(id int, user string) {
				b := fmt.Sprintf(`{"deploymentId":1,"externalId":%q,"userAttributes":[{"name":"country","value":"DE"}],"groups":["sales"]}`, user)
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/embed/generate-session", strings.NewReader(b))
				req.Header.Set("Authorization", "Api-Key "+apitest.AdminKey)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Request-Id", strconv.Itoa(id))
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("request %d: %d", id, resp.StatusCode)
				}
			}
			mu.Lock()
			record = true
			mu.Unlock()
			send(1000, "alone") // a new user, alone
			mu.Lock()
			alone := counts[1000]
			mu.Unlock()
			if alone == 0 {
				t.Fatal("the lone request ran no statement under its context")
			}
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range 16 {
				wg.Go(func() {
					<-start
					send(i, fmt.Sprintf("user-%d", i))
				})
			}
			close(start)
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			if len(orphan) > 0 {
				t.Errorf("%d statements carried no request's context: %q", len(orphan), orphan)
			}
			for i := range 16 {
				if counts[i] != alone {
					t.Errorf("request %d: %d statements under its context, want %d (as alone)", i, counts[i], alone)
				}
			}
		})
	}
}
