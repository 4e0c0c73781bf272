package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/memstore"
	"github.com/embedkit/embedkit/store/operator"
)

// echoAgent answers "hi <input>".
var echoAgent = chatstream.AgentFunc(func(ctx context.Context, t chatstream.Turn, e chatstream.Emitter) error {
	return e.Content("hi " + t.Input)
})

// setupTenant makes account "shop" with agent "assistant" and an admin key.
func setupTenant(t *testing.T) (store.Store, string) {
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	op := operator.New(st)
	if _, err := op.SaveAccount(t.Context(), operator.Account{Name: "shop", Plan: store.PlanEnterprise,
		Deployments: []operator.Deployment{{ID: 1, Name: "production"}},
		Agents:      []operator.Agent{{ID: "assistant", DeploymentID: 1}}}); err != nil {
		t.Fatal(err)
	}
	key, _, err := op.CreateAPIKey(t.Context(), "shop", operator.APIKey{Admin: true, Name: "backend"})
	if err != nil {
		t.Fatal(err)
	}
	return st, key
}

// exercisePrefix mints a session, opens the host page with it, chats and
// revokes, all under base.
func exercisePrefix(t *testing.T, base, key string) {
	ctx := t.Context()
	sc := embedsession.NewClient(base, key)
	sid, err := sc.GenerateSession(ctx, embedsession.SessionRequest{DeploymentID: 1, ExternalID: "jane"})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(base + "/embed/hello?sessionId=" + sid)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "hello jane") {
		t.Errorf("page %d %s", resp.StatusCode, b)
	}
	cc := chatstream.NewClient(base, chatstream.WithAPIKey(key))
	var conv chatstream.Conversation
	for m, err := range cc.Stream(ctx, "shop", "assistant", chatstream.Request{Input: "x", SessionSettings: &chatstream.SessionSettings{ExternalID: "jane"}}) {
		if err != nil {
			t.Fatal(err)
		}
		conv.Add(m)
	}
	a, ok := conv.FinalAnswer()
	if !ok || a.Content != "hi x" {
		t.Errorf("answer %q", a.Content)
	}
	if err := sc.RevokeUserSessions(ctx, "jane"); err != nil {
		t.Errorf("revoke: %v", err)
	}
}

// helloHandler is a host page behind the embed-session middleware.
func helloHandler(st store.Store) http.Handler {
	return middleware.Session(st, middleware.WithCookiePath(Prefix))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		es, _ := middleware.EmbedSessionFromContext(r.Context())
		io.WriteString(w, "hello "+es.User.ExternalID)
	}))
}

// TestServeMuxStripPrefix mounts both APIs and a host page on
// http.ServeMux under /analytics with http.StripPrefix (README: mounting
// under a prefix).
func TestServeMuxStripPrefix(t *testing.T) {
	st, key := setupTenant(t)
	embed := embedsession.NewHandler(st)
	chat := chatstream.NewHandler(st, echoAgent)
	t.Cleanup(func() { chat.Shutdown(context.Background()) })
	inner := http.NewServeMux()
	for _, rt := range embed.Routes() {
		inner.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}
	for _, rt := range chat.Routes() {
		inner.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}
	inner.Handle("GET /embed/hello", helloHandler(st))
	outer := http.NewServeMux()
	outer.Handle(Prefix+"/", http.StripPrefix(Prefix, inner))
	srv := httptest.NewServer(outer)
	t.Cleanup(srv.Close)
	exercisePrefix(t, srv.URL+Prefix, key)
}

// TestServeMuxPatternPrefix does the same with the prefix in each
// pattern.
func TestServeMuxPatternPrefix(t *testing.T) {
	st, key := setupTenant(t)
	embed := embedsession.NewHandler(st)
	chat := chatstream.NewHandler(st, echoAgent)
	t.Cleanup(func() { chat.Shutdown(context.Background()) })
	mux := http.NewServeMux()
	for _, rt := range embed.Routes() {
		mux.Handle(rt.Method+" "+Prefix+rt.Pattern, rt.Handler)
	}
	for _, rt := range chat.Routes() {
		mux.Handle(rt.Method+" "+Prefix+rt.Pattern, rt.Handler)
	}
	mux.Handle("GET "+Prefix+"/embed/hello", helloHandler(st))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	exercisePrefix(t, srv.URL+Prefix, key)
}
