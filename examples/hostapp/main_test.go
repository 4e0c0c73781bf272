package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/chatpage"
	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/store/memstore"
)

// TestWalkthrough runs the README's "add embedkit to your server" end to
// end over real HTTP: the host's own route still works, embedkit answers
// under the prefix only, the host's backend mints a session, the embed
// page opens with it, and the chat answers with the host's agent.
func TestWalkthrough(t *testing.T) {
	ctx := t.Context()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	app, err := New(ctx, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Shutdown(t.Context()) })
	srv := httptest.NewServer(app.Handler)
	t.Cleanup(srv.Close)

	if body := get(t, srv.URL+"/", http.StatusOK); !strings.Contains(body, "host's own home page") {
		t.Errorf("host route: %q", body)
	}
	// The host's own routes get their variables decoded, as before
	// embedkit was mounted.
	if body := get(t, srv.URL+"/products/caf%C3%A9%20cr%C3%A8me", http.StatusOK); body != "product café crème\n" {
		t.Errorf("host route with a variable: %q", body)
	}
	// Outside the prefix embedkit is not mounted.
	resp, err := http.Post(srv.URL+"/api/v1/embed/generate-session", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("generate-session without the prefix: %d, want 404", resp.StatusCode)
	}

	// The host's backend mints a session for its user.
	name := "Jane Doe"
	sessions := embedsession.NewClient(srv.URL+Prefix, app.APIKey)
	sid, err := sessions.GenerateSession(ctx, embedsession.SessionRequest{
		DeploymentID:   1,
		ExternalID:     "jane",
		UserProfile:    &embedsession.UserProfile{DisplayName: &name},
		UserAttributes: []embedsession.UserAttribute{{Name: "region", Value: json.RawMessage(`"EU"`)}},
	})
	if err != nil {
		t.Fatal(err)
	}

	// The embed page opens with it and sets its cookie on the prefix.
	jar := &cookieJar{}
	body := getWith(t, &http.Client{Jar: jar}, srv.URL+Prefix+"/embed/hello?sessionId="+sid, http.StatusOK)
	if !strings.Contains(body, "Hello, Jane Doe") || !strings.Contains(body, "region: &#34;EU&#34;") {
		t.Errorf("embed page: %q", body)
	}
	if jar.path != Prefix {
		t.Errorf("cookie path %q, want %q", jar.path, Prefix)
	}
	// The cookie alone opens it again (the sessionId is single-use).
	getWith(t, &http.Client{Jar: jar}, srv.URL+Prefix+"/embed/hello", http.StatusOK)

	// embedkit's chat page: the shell loads with no credentials; with the
	// session token it names the user and the chat endpoints under the
	// prefix.
	if body := get(t, srv.URL+Prefix+"/embed/chat", http.StatusOK); !strings.Contains(body, "Shop analytics") {
		t.Errorf("chat page shell: %q", body)
	}
	tok, err := sessions.ExchangeToken(ctx, mustSession(t, sessions))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+Prefix+"/embed/chat/me", nil)
	req.Header.Set("Authorization", "Bearer "+tok.Token)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var me chatpage.Me
	err = json.NewDecoder(resp.Body).Decode(&me)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || me.DisplayName != "Jane Doe" ||
		me.StreamURL != Prefix+"/api/v1/public/shop/agents/assistant/chat/stream-chat-state" {
		t.Errorf("chat page /me: %d %+v %v", resp.StatusCode, me, err)
	}

	// Chat with the host's agent, as the page does: with the token.
	var tconv chatstream.Conversation
	for m, err := range chatstream.NewClient(srv.URL+Prefix, chatstream.WithBearerToken(tok.Token)).Stream(ctx, "shop", "assistant", chatstream.Request{Input: "hello"}) {
		if err != nil {
			t.Fatal(err)
		}
		tconv.Add(m)
	}
	if a, _ := tconv.FinalAnswer(); strings.TrimSpace(a.Content) != "You asked: hello" {
		t.Errorf("chat with the token: %q", a.Content)
	}

	// Chat with the host's agent from its backend (API key).
	chat := chatstream.NewClient(srv.URL+Prefix, chatstream.WithAPIKey(app.APIKey))
	var conv chatstream.Conversation
	for m, err := range chat.Stream(ctx, "shop", "assistant", chatstream.Request{
		Input:           "revenue by region",
		SessionSettings: &chatstream.SessionSettings{ExternalID: "jane"},
	}) {
		if err != nil {
			t.Fatal(err)
		}
		conv.Add(m)
	}
	answer, ok := conv.FinalAnswer()
	if !ok || strings.TrimSpace(answer.Content) != "You asked: revenue by region" {
		t.Errorf("final answer %q (ok %v)", answer.Content, ok)
	}
}

// mustSession mints a fresh sessionId for jane.
func mustSession(t *testing.T, c *embedsession.Client) string {
	t.Helper()
	sid, err := c.GenerateSession(t.Context(), embedsession.SessionRequest{DeploymentID: 1, ExternalID: "jane"})
	if err != nil {
		t.Fatal(err)
	}
	return sid
}

func get(t *testing.T, url string, want int) string {
	t.Helper()
	return getWith(t, http.DefaultClient, url, want)
}

func getWith(t *testing.T, c *http.Client, url string, want int) string {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %d %s, want %d", strings.SplitN(url, "?", 2)[0], resp.StatusCode, b, want)
	}
	return string(b)
}

// cookieJar keeps the one cookie the embed-session middleware sets and
// remembers its path.
type cookieJar struct {
	cookies []*http.Cookie
	path    string
}

func (j *cookieJar) SetCookies(_ *url.URL, cs []*http.Cookie) {
	for _, c := range cs {
		j.path = c.Path
	}
	j.cookies = cs
}

func (j *cookieJar) Cookies(u *url.URL) []*http.Cookie {
	if !strings.HasPrefix(u.Path, j.path) {
		return nil
	}
	return j.cookies
}
