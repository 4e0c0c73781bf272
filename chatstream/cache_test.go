package chatstream_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/chatstreamtest"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
)

// TestTurnStatements lists the statements of a returning user's turn on a
// new thread, as a host's GORM logger sees them: a user whose request
// sends its stored values is read with its data and not written, with
// WithKeyCache the agent is not read again,
// and a turn whose sorts stayed within its reserved block does not write
// its thread's row again, neither at its checkpoint (the turn pauses
// longer than the checkpoint interval) nor at its end.
func TestTurnStatements(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			for _, cached := range []bool{false, true} {
				stmts := turnStatements(t, backend, cached)
				count := func(sub string) int {
					n := 0
					for _, q := range stmts {
						if strings.Contains(strings.NewReplacer(`"`, "", "`", "").Replace(q), sub) {
							n++
						}
					}
					return n
				}
				agents, catalog := count("embedkit_agents"), count("embedkit_catalog_attributes")
				// The user's data, read with the user: the request sends
				// the stored values, so no Lookup. Uncached: the agent too.
				wantAgents, wantCatalog := 1, 1
				if cached {
					wantAgents = 0
				}
				if w := count("INTO embedkit_users") + count("UPDATE embedkit_users"); w != 0 {
					t.Errorf("cached=%v: %d writes of the user, want none (it sends its stored values):\n%s",
						cached, w, strings.Join(stmts, "\n"))
				}
				if agents != wantAgents || catalog != wantCatalog {
					t.Errorf("cached=%v: %d agent reads and %d catalog reads, want %d and %d:\n%s",
						cached, agents, catalog, wantAgents, wantCatalog, strings.Join(stmts, "\n"))
				}
				n := 0
				for _, q := range stmts {
					if strings.HasPrefix(q, "UPDATE") && !strings.Contains(q, "embedkit_users") {
						n++
					}
				}
				if inserts := count("INSERT INTO embedkit_thread_messages"); inserts < 3 {
					t.Errorf("cached=%v: %d message writes, want the echo, a checkpoint and the end:\n%s",
						cached, inserts, strings.Join(stmts, "\n"))
				}
				if n != 0 {
					t.Errorf("cached=%v: %d updates besides the user's, want none (the thread's row is written with the echo):\n%s",
						cached, n, strings.Join(stmts, "\n"))
				}
			}
		})
	}
}

// turnStatements runs two turns of one user with a country attribute and
// returns the statements of the second.
func turnStatements(t *testing.T, backend string, cached bool) []string {
	var (
		mu  sync.Mutex
		on  bool
		got []string
	)
	hook := func(_ context.Context, sql string) {
		mu.Lock()
		defer mu.Unlock()
		if on {
			got = append(got, sql)
		}
	}
	agent := scripts{"q": {Events: []chatstreamtest.Event{chatstreamtest.Content("x"),
		chatstreamtest.Pause(800 * time.Millisecond), chatstreamtest.Content("y")}}}
	opts := []chatstream.Option{}
	if cached {
		opts = append(opts, chatstream.WithKeyCache(5*time.Second))
	}
	var h *chatstream.Handler
	s := apitest.New(t, apitest.Target{Backend: backend, Router: apitest.ServeMux},
		apitest.WithStore(func(t testing.TB, backend string) store.Store { return testdb.OpenWithHook(t, backend, hook) }),
		apitest.WithRoutes(func(s *apitest.Server) []apitest.Route {
			h = chatstream.NewHandler(s.Store, agent, append(opts, chatstream.WithClock(s.Now))...)
			var rs []apitest.Route
			for _, r := range h.Routes() {
				rs = append(rs, apitest.Route(r))
			}
			return rs
		}))
	t.Cleanup(func() { _ = h.Close() })
	c := chatstream.NewClient(s.URL, chatstream.WithAPIKey(apitest.AdminKey), chatstream.WithHTTPClient(s.Client()))
	ss := ext("u1")
	ss.UserAttributes = []chatstream.UserAttribute{{Name: "country", Value: "Germany"}}
	collect(t, c, chatstream.Request{Input: "q", SessionSettings: ss})
	mu.Lock()
	on = true
	mu.Unlock()
	collect(t, c, chatstream.Request{Input: "q", SessionSettings: ss})
	// The turn's final write may follow the end of the stream.
	if err := h.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return append([]string(nil), got...)
}
