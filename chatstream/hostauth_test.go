package chatstream_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/middleware"
)

// TestStreamBehindHostAuthentication mounts Handler.Stream and
// Handler.Abort behind the host's own authentication (middleware.APIKey)
// instead of Handler.Routes: a turn streams whole, a running turn is
// rejoined and aborted, and a request that reaches the endpoint without an
// account in its context is 401 with no turn started.
func TestStreamBehindHostAuthentication(t *testing.T) {
	var h *chatstream.Handler
	s := apitest.New(t, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux}, apitest.WithRoutes(func(s *apitest.Server) []apitest.Route {
		h = chatstream.NewHandler(s.Store, testScripts(), chatstream.WithClock(s.Now))
		auth := middleware.APIKey(s.Store)
		return []apitest.Route{
			{Method: http.MethodPost, Pattern: chatstream.StreamPattern, Handler: auth(h.Stream())},
			{Method: http.MethodPost, Pattern: chatstream.AbortPattern, Handler: auth(h.Abort())},
			{Method: http.MethodPost, Pattern: "/bare" + chatstream.StreamPattern, Handler: h.Stream()},
		}
	}))
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("Handler.Close: %v", err)
		}
	})
	client := chatstream.NewClient(s.URL, chatstream.WithAPIKey(apitest.AdminKey), chatstream.WithHTTPClient(s.Client()))
	ctx := t.Context()

	msgs := collect(t, client, chatstream.Request{Input: "echo:hello", SessionSettings: ext("host")})
	if !containsPiece(msgs, "hello") {
		t.Errorf("whole turn: no content piece %q in %+v", "hello", msgs)
	}
	if st := last(msgs); st.ID != chatstream.StateID || st.State == nil || st.State.Error != "" || st.State.Aborted {
		t.Errorf("whole turn: last line %+v, want a __state__ without error", st)
	}

	const id = "host-slow"
	_, wait := streamUntil(t, ctx, client, chatstream.Request{Input: "slow", ChatID: id, SessionSettings: ext("host")}, isPiece("answer"))
	_, waitRejoin := streamUntil(t, ctx, client, chatstream.Request{ChatID: id, SessionSettings: ext("host")}, isPiece("answer"))
	if err := client.Abort(ctx, acct, agentID, id, chatstream.SessionSettings{ExternalID: "host"}); err != nil {
		t.Fatalf("abort: %v", err)
	}
	for name, w := range map[string]func() ([]chatstream.Message, time.Time, error){"started": wait, "rejoined": waitRejoin} {
		msgs, _, err := w()
		if err != nil {
			t.Fatalf("%s stream: %v", name, err)
		}
		if st := last(msgs); st.ID != chatstream.StateID || st.State == nil || !st.State.Aborted {
			t.Errorf("%s stream: last line %+v, want an aborted __state__", name, st)
		}
	}

	req := s.Request(t, http.MethodPost, "/bare"+streamPath(acct, agentID), apitest.AdminKey,
		map[string]any{"input": "echo:x", "sessionSettings": map[string]any{"externalId": "host"}})
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no account in the context: status %d, want 401", resp.StatusCode)
	}
	if n := h.RunningTurns(); n != 0 {
		t.Errorf("%d turns running after the refused request, want 0", n)
	}
}

func containsPiece(msgs []chatstream.Message, text string) bool {
	for _, m := range msgs {
		if isContent(m) && m.Content == text {
			return true
		}
	}
	return false
}
