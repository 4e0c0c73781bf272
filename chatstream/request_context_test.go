package chatstream_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/chatstreamtest"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store/operator"
)

type requestMark struct{}

// TestTurnStatementsCarryTheirRequest: every statement that one chat turn
// causes, its final write included (which runs after the stream has
// ended), runs under a context that carries its request's values, so that
// a host's tracing plugin attributes it to that request.
func TestTurnStatementsCarryTheirRequest(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			var (
				mu       sync.Mutex
				record   bool
				marked   int
				unmarked []string
			)
			st := testdb.OpenWithHook(t, backend, func(ctx context.Context, sql string) {
				mu.Lock()
				defer mu.Unlock()
				switch _, ok := ctx.Value(requestMark{}).(bool); {
				case !record:
				case ok:
					marked++
				default:
					unmarked = append(unmarked, sql)
				}
			})
			if err := operator.New(st).Apply(t.Context(), apitest.Config()); err != nil {
				t.Fatal(err)
			}
			agent := &chatstreamtest.ScriptedAgent{Events: []chatstreamtest.Event{chatstreamtest.Content("hello")}}
			h := chatstream.NewHandler(st, agent)
			t.Cleanup(func() { _ = h.Close() })
			mux := http.NewServeMux()
			for _, rt := range h.Routes() {
				mux.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestMark{}, true)))
			}))
			defer srv.Close()
			mu.Lock()
			record = true
			mu.Unlock()
			c := chatstream.NewClient(srv.URL, chatstream.WithAPIKey(apitest.AdminKey), chatstream.WithHTTPClient(srv.Client()))
			for _, chatID := range []string{"", "ctx-1", "ctx-1"} { // a new chat, a named one, its second turn
				for _, err := range c.Stream(t.Context(), apitest.Account, "7", chatstream.Request{Input: "hi", ChatID: chatID,
					SessionSettings: &chatstream.SessionSettings{ExternalID: "jane"}}) {
					if err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := h.Shutdown(t.Context()); err != nil { // the turns' final writes are done
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if marked == 0 {
				t.Error("no statement under a request's context")
			}
			for _, q := range unmarked {
				t.Errorf("a statement of one request not under its context: %.160s", strings.TrimSpace(q))
			}
		})
	}
}
