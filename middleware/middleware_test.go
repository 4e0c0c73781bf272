package middleware_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/embedkit/embedkit/internal/secret"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store"
)

// fakeStore is a tiny in-memory middleware.AuthStore.
type fakeStore struct {
	mu       sync.Mutex
	keys     map[string]store.APIKey
	accounts map[int64]store.Account
	sessions map[string]store.Session // by hash, unused
	tokens   map[string]store.Session // by hash
	users    map[int64]store.User
	down     bool
	lookups  int
}

func newFake() *fakeStore {
	f := &fakeStore{
		keys:     map[string]store.APIKey{},
		accounts: map[int64]store.Account{1: {ID: 1, Name: "acme"}},
		sessions: map[string]store.Session{},
		tokens:   map[string]store.Session{},
		users:    map[int64]store.User{7: {ID: 7, AccountID: 1, ExternalID: "bob"}},
	}
	for k, admin := range map[string]bool{"sk-admin": true, "sk-user": false} {
		h := secret.Hash(k)
		f.keys[string(h)] = store.APIKey{Hash: h, AccountID: 1, Admin: admin}
	}
	return f
}

func (f *fakeStore) addSession(id string, expires time.Time) {
	f.sessions[string(secret.Hash(id))] = store.Session{AccountID: 1, UserID: 7, DeploymentID: 1, ExpiresAt: expires}
}

func (f *fakeStore) APIKeyByHash(_ context.Context, h []byte) (store.APIKey, store.Account, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return store.APIKey{}, store.Account{}, store.ErrUnavailable
	}
	f.lookups++
	k, ok := f.keys[string(h)]
	if !ok {
		return k, store.Account{}, store.ErrNotFound
	}
	a, ok := f.accounts[k.AccountID]
	if !ok {
		return store.APIKey{}, store.Account{}, store.ErrNotFound
	}
	return k, a, nil
}

func (f *fakeStore) AccountByID(_ context.Context, id int64) (store.Account, error) {
	a, ok := f.accounts[id]
	if !ok {
		return a, store.ErrNotFound
	}
	return a, nil
}

func (f *fakeStore) ExchangeSession(_ context.Context, sh, th []byte, exp, now time.Time) (store.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sessions[string(sh)]
	if !ok || !now.Before(s.ExpiresAt) {
		return store.Session{}, store.ErrNotFound
	}
	delete(f.sessions, string(sh))
	s.ExpiresAt = exp
	f.tokens[string(th)] = s
	return s, nil
}

func (f *fakeStore) SessionByToken(_ context.Context, th []byte, now time.Time) (store.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.tokens[string(th)]
	if !ok || !now.Before(s.ExpiresAt) {
		return store.Session{}, store.ErrNotFound
	}
	return s, nil
}

func (f *fakeStore) UserByID(_ context.Context, id int64, _ time.Time) (store.User, error) {
	u, ok := f.users[id]
	if !ok {
		return u, store.ErrNotFound
	}
	return u, nil
}

func echo(w http.ResponseWriter, r *http.Request) {
	out := map[string]any{}
	if a, admin, ok := middleware.AccountFromContext(r.Context()); ok {
		out["account"], out["admin"] = a.Name, admin
	}
	if es, ok := middleware.EmbedSessionFromContext(r.Context()); ok {
		out["user"], out["token"] = es.User.ExternalID, es.Token
	}
	_ = json.NewEncoder(w).Encode(out)
}

type resp struct {
	status int
	body   map[string]any
	raw    string
	header http.Header
}

func serve(h http.Handler, r *http.Request) resp {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	var m map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &m)
	return resp{rec.Code, m, rec.Body.String(), rec.Header()}
}

func TestAPIKey(t *testing.T) {
	f := newFake()
	h := middleware.APIKey(f)(http.HandlerFunc(echo))
	opt := middleware.APIKey(f, middleware.Optional())(http.HandlerFunc(echo))
	admin := middleware.APIKey(f)(middleware.RequireAdmin(http.HandlerFunc(echo)))
	cases := []struct {
		name    string
		h       http.Handler
		auth    string
		status  int
		account bool
	}{
		{"valid key sets account", h, "Api-Key sk-user", 200, true},
		{"scheme is case-insensitive", h, "api-key sk-user", 200, true},
		{"missing header is 401", h, "", 401, false},
		{"unknown key is 401", h, "Api-Key sk-nope", 401, false},
		{"empty key is 401", h, "Api-Key", 401, false},
		{"bearer is not an API key", h, "Bearer sk-user", 401, false},
		{"optional passes without header", opt, "", 200, false},
		{"optional still checks a sent key", opt, "Api-Key sk-nope", 401, false},
		{"admin key passes RequireAdmin", admin, "Api-Key sk-admin", 200, true},
		{"user key is 403 on RequireAdmin", admin, "Api-Key sk-user", 403, false},
		{"RequireAdmin without key is 401", middleware.RequireAdmin(http.HandlerFunc(echo)), "", 401, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			if c.auth != "" {
				r.Header.Set("Authorization", c.auth)
			}
			got := serve(c.h, r)
			if got.status != c.status {
				t.Fatalf("status = %d, want %d (%s)", got.status, c.status, got.raw)
			}
			if c.status >= 400 {
				if got.header.Get("Content-Type") != "application/json" || got.body["error"] == nil {
					t.Errorf("error response = %q, want JSON {error}", got.raw)
				}
				if strings.Contains(got.raw, "sk-") {
					t.Errorf("error response echoes the key: %s", got.raw)
				}
			}
			if (got.body["account"] == "acme") != c.account {
				t.Errorf("account in context = %v, want %v", got.body["account"], c.account)
			}
		})
	}
	t.Run("store unavailable is 503", func(t *testing.T) {
		f.down = true
		defer func() { f.down = false }()
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Api-Key sk-user")
		if got := serve(h, r); got.status != 503 {
			t.Errorf("status = %d, want 503", got.status)
		}
	})
}

func TestKeyCache(t *testing.T) {
	f := newFake()
	h := middleware.APIKey(f, middleware.WithKeyCache(middleware.MaxKeyCacheTTL))(http.HandlerFunc(echo))
	for _, key := range []string{"sk-user", "sk-user", "sk-user", "sk-nope", "sk-nope"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Api-Key "+key)
		want := 200
		if key == "sk-nope" {
			want = 401
		}
		if got := serve(h, r); got.status != want {
			t.Fatalf("%s: status = %d, want %d", key, got.status, want)
		}
	}
	if f.lookups != 3 {
		t.Errorf("store lookups = %d, want 3 (one for the cached valid key, one per invalid request)", f.lookups)
	}
}

// A key removed from the store is refused once the cache entry's lifetime,
// measured on the middleware's clock, has passed.
func TestKeyCacheLifetime(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	f := newFake()
	h := middleware.APIKey(f, middleware.WithClock(clock), middleware.WithKeyCache(middleware.MaxKeyCacheTTL))(http.HandlerFunc(echo))
	call := func() int {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Api-Key sk-user")
		return serve(h, r).status
	}
	if got := call(); got != 200 {
		t.Fatalf("status = %d, want 200", got)
	}
	f.mu.Lock()
	delete(f.keys, string(secret.Hash("sk-user"))) // removed by another process
	f.mu.Unlock()
	mu.Lock()
	now = now.Add(middleware.MaxKeyCacheTTL - time.Millisecond)
	mu.Unlock()
	if got := call(); got != 200 {
		t.Errorf("within the cache lifetime: status = %d, want 200 (served from the cache)", got)
	}
	mu.Lock()
	now = now.Add(time.Millisecond)
	mu.Unlock()
	if got := call(); got != 401 {
		t.Errorf("at the end of the cache lifetime: status = %d, want 401", got)
	}
}

func TestSession(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	f := newFake()
	h := middleware.Session(f, middleware.WithClock(clock))(http.HandlerFunc(echo))

	f.addSession("sid-1", now.Add(5*time.Minute))
	got := serve(h, httptest.NewRequest("GET", "/embed?sessionId=sid-1", nil))
	if got.status != 200 || got.body["user"] != "bob" {
		t.Fatalf("exchange: %d %s", got.status, got.raw)
	}
	tok, _ := got.body["token"].(string)
	if tok == "" {
		t.Fatal("EmbedSession.Token not set after exchange")
	}
	setCookie := got.header.Get("Set-Cookie")
	for _, want := range []string{middleware.DefaultCookieName + "=" + tok, "HttpOnly", "SameSite=Lax", "Path=/"} {
		if !strings.Contains(setCookie, want) {
			t.Errorf("Set-Cookie = %q, want %q in it", setCookie, want)
		}
	}
	if strings.Contains(setCookie, "Secure") {
		t.Errorf("Set-Cookie = %q: Secure without TLS", setCookie)
	}
	cookie := (&http.Response{Header: got.header}).Cookies()[0].Value // the token, tagged with sid-1

	req := func(target, bearer, cookie string) *http.Request {
		r := httptest.NewRequest("GET", target, nil)
		if bearer != "" {
			r.Header.Set("Authorization", "Bearer "+bearer)
		}
		if cookie != "" {
			r.AddCookie(&http.Cookie{Name: middleware.DefaultCookieName, Value: cookie})
		}
		return r
	}
	cases := []struct {
		name   string
		r      *http.Request
		status int
		token  bool
	}{
		{"used sessionId is 401", req("/?sessionId=sid-1", "", ""), 401, false},
		{"bearer token works", req("/", tok, ""), 200, false},
		{"cookie works", req("/", "", tok), 200, false},
		{"bad bearer is 401 even with a good cookie", req("/", "nope", tok), 401, false},
		{"the cookie serves a reload of the sessionId it was set for", req("/embed?sessionId=sid-1", "", cookie), 200, false},
		{"a new sessionId that fails is 401, whatever the cookie", req("/?sessionId=unknown", "", cookie), 401, false},
		{"bad cookie falls through to sessionId", req("/?sessionId=unknown", "", "nope"), 401, false},
		{"bad cookie alone is 401", req("/", "", "nope"), 401, false},
		{"nothing is 401", req("/", "", ""), 401, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := serve(h, c.r)
			if got.status != c.status {
				t.Fatalf("status = %d, want %d (%s)", got.status, c.status, got.raw)
			}
			if (got.body["token"] != nil && got.body["token"] != "") != c.token {
				t.Errorf("token = %v", got.body["token"])
			}
		})
	}

	t.Run("expired sessionId is 401", func(t *testing.T) {
		f.addSession("sid-old", now.Add(-time.Second))
		if got := serve(h, req("/?sessionId=sid-old", "", "")); got.status != 401 {
			t.Errorf("status = %d, want 401", got.status)
		}
	})
	t.Run("expired token is 401", func(t *testing.T) {
		later := middleware.Session(f, middleware.WithClock(func() time.Time { return now.Add(25 * time.Hour) }))(http.HandlerFunc(echo))
		if got := serve(later, req("/", tok, "")); got.status != 401 {
			t.Errorf("status = %d, want 401", got.status)
		}
	})
	t.Run("WithTokenTTL sets the token's lifetime", func(t *testing.T) {
		f.addSession("sid-ttl", now.Add(time.Minute))
		at := now
		h := middleware.Session(f, middleware.WithClock(func() time.Time { return at }), middleware.WithTokenTTL(time.Hour))(http.HandlerFunc(echo))
		got := serve(h, req("/?sessionId=sid-ttl", "", ""))
		short, _ := got.body["token"].(string)
		if got.status != 200 || short == "" {
			t.Fatalf("exchange: %d %s", got.status, got.raw)
		}
		at = now.Add(59 * time.Minute)
		if got := serve(h, req("/", short, "")); got.status != 200 {
			t.Errorf("token after 59m: status %d, want 200", got.status)
		}
		at = now.Add(61 * time.Minute)
		if got := serve(h, req("/", short, "")); got.status != 401 {
			t.Errorf("token after 61m: status %d, want 401", got.status)
		}
	})
	t.Run("options shape the cookie", func(t *testing.T) {
		f.addSession("sid-2", now.Add(time.Minute))
		h := middleware.Session(f, middleware.WithClock(clock), middleware.WithCookieName("c"), middleware.WithCookiePath("/embed"),
			middleware.WithCookieSameSite(http.SameSiteNoneMode), middleware.WithSecureCookie(true))(http.HandlerFunc(echo))
		got := serve(h, req("/?sessionId=sid-2", "", ""))
		sc := got.header.Get("Set-Cookie")
		for _, want := range []string{"c=", "Path=/embed", "SameSite=None", "Secure", "HttpOnly"} {
			if !strings.Contains(sc, want) {
				t.Errorf("Set-Cookie = %q, want %q in it", sc, want)
			}
		}
	})
	t.Run("a partitioned cookie", func(t *testing.T) {
		f.addSession("sid-5", now.Add(time.Minute))
		h := middleware.Session(f, middleware.WithClock(clock), middleware.WithCookieSameSite(http.SameSiteNoneMode),
			middleware.WithSecureCookie(true), middleware.WithPartitionedCookie(true))(http.HandlerFunc(echo))
		sc := serve(h, req("/?sessionId=sid-5", "", "")).header.Get("Set-Cookie")
		for _, want := range []string{"SameSite=None", "Secure", "Partitioned"} {
			if !strings.Contains(sc, want) {
				t.Errorf("Set-Cookie = %q, want %q in it", sc, want)
			}
		}
		// Cleared alike: a browser keeps a partitioned cookie apart, and
		// deletes it only through a Set-Cookie that says Partitioned.
		bad := serve(h, req("/", "", "not-a-token"))
		if sc := bad.header.Get("Set-Cookie"); !strings.Contains(sc, "Max-Age=0") || !strings.Contains(sc, "Partitioned") {
			t.Errorf("clearing Set-Cookie = %q, want Max-Age=0 and Partitioned", sc)
		}
	})
	t.Run("TLS makes the cookie Secure", func(t *testing.T) {
		f.addSession("sid-3", now.Add(time.Minute))
		r := req("https://example.test/?sessionId=sid-3", "", "")
		if r.TLS == nil {
			t.Skip("httptest did not set TLS")
		}
		if sc := serve(h, r).header.Get("Set-Cookie"); !strings.Contains(sc, "Secure") {
			t.Errorf("Set-Cookie = %q, want Secure", sc)
		}
	})
	t.Run("redirect after exchange drops the sessionId", func(t *testing.T) {
		f.addSession("sid-4", now.Add(time.Minute))
		h := middleware.Session(f, middleware.WithClock(clock), middleware.WithRedirectAfterExchange())(http.HandlerFunc(echo))
		got := serve(h, req("/embed/x?a=1&sessionId=sid-4", "", ""))
		if got.status != http.StatusSeeOther || got.header.Get("Location") != "?a=1" {
			t.Errorf("got %d Location %q, want 303 ?a=1", got.status, got.header.Get("Location"))
		}
		if !strings.Contains(got.header.Get("Set-Cookie"), "HttpOnly") {
			t.Errorf("no cookie set before redirect")
		}
		// A sessionId other than the one the cookie was set for (a page
		// opened for a new session, maybe of another user) is exchanged:
		// the cookie does not serve it.
		f.addSession("sid-5", now.Add(time.Minute))
		got = serve(h, req("/embed/x?sessionId=sid-5", "", cookie))
		if got.status != http.StatusSeeOther || got.header.Get("Location") != "?" || got.header.Get("Set-Cookie") == "" {
			t.Errorf("cookie with a new sessionId: %d Location %q Set-Cookie %q, want a 303 to ? with the new session's cookie",
				got.status, got.header.Get("Location"), got.header.Get("Set-Cookie"))
		}
		if got := serve(h, req("/embed/x?sessionId=sid-5", "", "")); got.status != http.StatusUnauthorized {
			t.Errorf("sid-5 again without its cookie: %d, want 401 (used)", got.status)
		}
	})
	// The redirect is relative to the page: behind http.StripPrefix it
	// keeps the prefix the handler does not see, and a path no router
	// cleaned ("//evil.example/x") cannot turn it into another host.
	t.Run("redirect after exchange stays on the page", func(t *testing.T) {
		h := middleware.Session(f, middleware.WithClock(clock), middleware.WithRedirectAfterExchange())(http.HandlerFunc(echo))
		srv := httptest.NewServer(http.StripPrefix("/analytics", h))
		defer srv.Close()
		noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		for path, want := range map[string]string{
			"/analytics/embed/hello?x=1&sessionId=sid-6": "/analytics/embed/hello?x=1",
			"/analytics//evil.example/x?sessionId=sid-7": "/analytics//evil.example/x?",
			"/analytics/embed/?sessionId=sid-8":          "/analytics/embed/?",
			"/analytics?sessionId=sid-9":                 "/analytics?",
			"/analytics/a/../b?sessionId=sid-10":         "/analytics/b?", // as a browser resolves it
		} {
			f.addSession(path[strings.Index(path, "sid-"):], now.Add(time.Minute))
			resp, err := noFollow.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			loc, err := resp.Location()
			if err != nil || resp.StatusCode != http.StatusSeeOther || loc.String() != srv.URL+want {
				t.Errorf("GET %s: %d to %v (%v), want 303 to %s", path, resp.StatusCode, loc, err, srv.URL+want)
			}
		}
	})
}

func TestAPIKeyOrToken(t *testing.T) {
	now := time.Now()
	f := newFake()
	f.addSession("sid", now.Add(time.Minute))
	ex := serve(middleware.Session(f)(http.HandlerFunc(echo)), httptest.NewRequest("GET", "/?sessionId=sid", nil))
	tok := ex.body["token"].(string)
	h := middleware.APIKeyOrToken(f)(http.HandlerFunc(echo))
	cases := []struct {
		name, auth string
		status     int
		user       bool
	}{
		{"api key sets account", "Api-Key sk-user", 200, false},
		{"bearer sets account and session", "Bearer " + tok, 200, true},
		{"bad bearer 401", "Bearer x", 401, false},
		{"bad key 401", "Api-Key x", 401, false},
		{"no header 401", "", 401, false},
		{"other scheme 401", "Basic abc", 401, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/", bytes.NewReader(nil))
			if c.auth != "" {
				r.Header.Set("Authorization", c.auth)
			}
			got := serve(h, r)
			if got.status != c.status {
				t.Fatalf("status = %d, want %d", got.status, c.status)
			}
			if c.status == 200 && got.body["account"] != "acme" {
				t.Errorf("account = %v", got.body["account"])
			}
			if (got.body["user"] == "bob") != c.user {
				t.Errorf("user = %v, want set %v", got.body["user"], c.user)
			}
		})
	}
}

func TestPathValues(t *testing.T) {
	h := middleware.PathValues(func(*http.Request) map[string]string { return map[string]string{"id": "42"} })(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(r.PathValue("id"))) }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Body.String() != "42" {
		t.Errorf("PathValue = %q, want 42", rec.Body.String())
	}
}

// TestEncodedPathValues: escaped parameters arrive decoded; one that does
// not decode is left out.
func TestEncodedPathValues(t *testing.T) {
	h := middleware.EncodedPathValues(func(*http.Request) map[string]string {
		return map[string]string{"id": "a%2Fb%25", "dots": "%2E%2E", "bad": "%zz"}
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(r.PathValue("id") + "|" + r.PathValue("dots") + "|" + r.PathValue("bad")))
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if got := rec.Body.String(); got != "a/b%|..|" {
		t.Errorf("PathValues = %q, want %q", got, "a/b%|..|")
	}
}

func tabReq(target, cookie string) *http.Request {
	r := httptest.NewRequest("GET", target, nil)
	if cookie != "" {
		r.AddCookie(&http.Cookie{Name: middleware.DefaultCookieName, Value: cookie})
	}
	return r
}

func cookieOf(t *testing.T, h http.Header) string {
	t.Helper()
	cs := (&http.Response{Header: h}).Cookies()
	if len(cs) == 0 {
		t.Fatal("no Set-Cookie")
	}
	return cs[len(cs)-1].Value
}

// TestSessionReloadOfEarlierTab: two tabs of one user, each opened with
// its own sessionId (a user holds several sessions at once): the reload
// of either is served by the cookie, which keeps the tags of both.
func TestSessionReloadOfEarlierTab(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	f := newFake()
	h := middleware.Session(f, middleware.WithClock(func() time.Time { return now }))(http.HandlerFunc(echo))
	f.addSession("sid-A", now.Add(5*time.Minute))
	f.addSession("sid-B", now.Add(5*time.Minute))

	a := serve(h, tabReq("/embed?sessionId=sid-A", ""))
	jar := cookieOf(t, a.header)
	b := serve(h, tabReq("/embed?sessionId=sid-B", jar))
	if b.status != 200 {
		t.Fatalf("tab B: %d %s", b.status, b.raw)
	}
	jar = cookieOf(t, b.header)

	// Reload tab A: same user, same browser, its URL still carries sid-A.
	ra := serve(h, tabReq("/embed?sessionId=sid-A", jar))
	if ra.status != 200 {
		t.Errorf("reload of tab A: %d %s (Set-Cookie %q)", ra.status, ra.raw, ra.header.Get("Set-Cookie"))
	}
	if cs := (&http.Response{Header: ra.header}).Cookies(); len(cs) > 0 && cs[len(cs)-1].MaxAge < 0 {
		jar = ""
	}
	// Then reload tab B.
	rb := serve(h, tabReq("/embed?sessionId=sid-B", jar))
	if rb.status != 200 {
		t.Errorf("reload of tab B after reloading tab A: %d %s", rb.status, rb.raw)
	}
}

// TestSessionLegacyCookie: a cookie set by an earlier release holds the
// bare token (no tags): it serves a request without a sessionId, and never
// one with a sessionId (which it cannot tell from another user's): a
// reload of such a tab is 401 once, until a new session sets a tagged
// cookie.
func TestSessionLegacyCookie(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	f := newFake()
	h := middleware.Session(f, middleware.WithClock(func() time.Time { return now }))(http.HandlerFunc(echo))
	f.addSession("sid-1", now.Add(5*time.Minute))
	f.addSession("sid-2", now.Add(5*time.Minute))
	got := serve(h, tabReq("/embed?sessionId=sid-1", ""))
	tok, _ := got.body["token"].(string)
	if r := serve(h, tabReq("/embed", tok)); r.status != 200 {
		t.Errorf("a page without a sessionId and the previous release's cookie: %d %s", r.status, r.raw)
	}
	if r := serve(h, tabReq("/embed?sessionId=nope", tok)); r.status != 401 {
		t.Errorf("a failing sessionId with the previous release's cookie: %d %s, want 401", r.status, r.raw)
	}
	if r := serve(h, tabReq("/embed?sessionId=sid-2", tok)); r.status != 200 || r.body["token"] == "" {
		t.Errorf("a new sessionId with the previous release's cookie: %d %s, want it exchanged", r.status, r.raw)
	}
}

// TestSessionTabOfAnotherGrant: one user, tab A opened for deployment 1,
// tab B for deployment 2 in creator mode of embed tenant 5: the cookie
// keeps only tab B's tag, so the reload of tab A is not served with tab
// B's grant (it is 401: its sessionId is used).
func TestSessionTabOfAnotherGrant(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	f := newFake()
	grant := func(w http.ResponseWriter, r *http.Request) {
		es, _ := middleware.EmbedSessionFromContext(r.Context())
		_ = json.NewEncoder(w).Encode(map[string]any{"deployment": es.Session.DeploymentID, "creator": es.Session.CreatorMode, "tenant": es.Session.EmbedTenantID})
	}
	h := middleware.Session(f, middleware.WithClock(func() time.Time { return now }))(http.HandlerFunc(grant))
	f.sessions[string(secret.Hash("sid-A"))] = store.Session{AccountID: 1, UserID: 7, DeploymentID: 1, ExpiresAt: now.Add(5 * time.Minute)}
	f.sessions[string(secret.Hash("sid-B"))] = store.Session{AccountID: 1, UserID: 7, DeploymentID: 2, CreatorMode: true, EmbedTenantID: 5, ExpiresAt: now.Add(5 * time.Minute)}

	a := serve(h, tabReq("/embed?sessionId=sid-A", ""))
	if a.body["deployment"] != float64(1) {
		t.Fatalf("tab A: %s", a.raw)
	}
	b := serve(h, tabReq("/embed?sessionId=sid-B", cookieOf(t, a.header)))
	jar := cookieOf(t, b.header)
	ra := serve(h, tabReq("/embed?sessionId=sid-A", jar))
	if ra.status != http.StatusUnauthorized {
		t.Errorf("reload of tab A (sessionId for deployment 1, not creator mode) with tab B's cookie: %d %s, want 401", ra.status, ra.raw)
	}
}
