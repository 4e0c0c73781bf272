package embedsession_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/middleware"
)

const tokenPath = embedsession.PathSessionToken

func exchange(t *testing.T, s *apitest.Server, key, sid string) (int, map[string]any) {
	t.Helper()
	return s.Do(t, http.MethodPost, tokenPath, key, map[string]string{"sessionId": sid})
}

// whoamiWith calls the Session-protected route with a Bearer token and/or a
// cookie and/or a sessionId.
func whoamiWith(t *testing.T, s *apitest.Server, bearer, cookie, sid string) apitest.Response {
	t.Helper()
	path := apitest.WhoamiPath
	if sid != "" {
		path += "?sessionId=" + sid
	}
	req := s.Request(t, http.MethodGet, path, "", nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: middleware.DefaultCookieName, Value: cookie})
	}
	return s.Send(t, req)
}

// TestTokenExchange covers POST /api/v1/embed/session/token and the
// lifetimes of sessionIds and tokens.
func TestTokenExchange(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		t.Parallel()
		s := apitest.New(t, tg)

		t.Run("exchange answers a token and its RFC 3339 expiry", func(t *testing.T) {
			sid := s.GenerateSession(t, body("tok", nil))
			status, out := exchange(t, s, "", sid)
			if status != 200 {
				t.Fatalf("got %d %v", status, out)
			}
			tok, _ := out["token"].(string)
			exp, err := time.Parse(time.RFC3339, out["expiresAt"].(string))
			if tok == "" || tok == sid || err != nil {
				t.Fatalf("token %q expiresAt %v (%v)", tok, out["expiresAt"], err)
			}
			if want := s.Now().Add(24 * time.Hour); exp.Sub(want).Abs() > time.Second {
				t.Errorf("expiresAt = %v, want %v", exp, want)
			}
			if r := whoamiWith(t, s, tok, "", ""); r.Status != 200 || r.Body["externalId"] != "tok" {
				t.Errorf("token in middleware: %d %s", r.Status, r.Raw)
			}
		})
		t.Run("replay of a used sessionId is 401", func(t *testing.T) {
			sid := s.GenerateSession(t, body("replay", nil))
			s.Token(t, sid)
			if status, _ := exchange(t, s, "", sid); status != 401 {
				t.Errorf("second exchange = %d, want 401", status)
			}
			if r := whoamiWith(t, s, "", "", sid); r.Status != 401 {
				t.Errorf("middleware with used sessionId = %d, want 401", r.Status)
			}
		})
		t.Run("sessionId used by the middleware cannot be exchanged again", func(t *testing.T) {
			sid := s.GenerateSession(t, body("replay2", nil))
			s.Whoami(t, sid)
			if status, _ := exchange(t, s, "", sid); status != 401 {
				t.Errorf("exchange after middleware use = %d, want 401", status)
			}
		})
		t.Run("expired sessionId is 401", func(t *testing.T) {
			sid := s.GenerateSession(t, body("expired", nil))
			ok := s.GenerateSession(t, body("expired", nil))
			s.Advance(5*time.Minute - time.Second)
			s.Token(t, ok)
			s.Advance(2 * time.Second)
			if status, _ := exchange(t, s, "", sid); status != 401 {
				t.Errorf("exchange after 5 minutes = %d, want 401", status)
			}
		})
		t.Run("expired token is 401", func(t *testing.T) {
			tok := s.Token(t, s.GenerateSession(t, body("tok-exp", nil)))
			s.Advance(24*time.Hour - time.Second)
			if r := whoamiWith(t, s, tok, "", ""); r.Status != 200 {
				t.Fatalf("token before expiry = %d", r.Status)
			}
			s.Advance(2 * time.Second)
			if r := whoamiWith(t, s, tok, "", ""); r.Status != 401 {
				t.Errorf("token after expiry = %d, want 401", r.Status)
			}
		})
		t.Run("unknown sessionId is 401", func(t *testing.T) {
			if status, out := exchange(t, s, "", "no-such-session"); status != 401 || strings.Contains(out["error"].(string), "no-such") {
				t.Errorf("got %d %v", status, out)
			}
		})
		t.Run("missing sessionId is 400", func(t *testing.T) {
			if status, _ := s.Do(t, http.MethodPost, tokenPath, "", map[string]any{}); status != 400 {
				t.Errorf("got %d", status)
			}
			if status, _ := s.Do(t, http.MethodPost, tokenPath, "", map[string]any{"sessionId": 5}); status != 400 {
				t.Errorf("wrong type: got %d", status)
			}
			if status, _ := s.Do(t, http.MethodPost, tokenPath, "", "{"); status != 400 {
				t.Errorf("malformed: got %d", status)
			}
		})
		t.Run("API key of the session's account is accepted", func(t *testing.T) {
			if status, _ := exchange(t, s, apitest.UserKey, s.GenerateSession(t, body("keyed", nil))); status != 200 {
				t.Errorf("got %d", status)
			}
		})
		t.Run("API key of another account is 401 and leaves the sessionId unused", func(t *testing.T) {
			sid := s.GenerateSession(t, body("keyed", nil))
			if status, _ := exchange(t, s, apitest.OtherAdminKey, sid); status != 401 {
				t.Errorf("got %d, want 401", status)
			}
			if status, _ := exchange(t, s, "", sid); status != 200 {
				t.Errorf("sessionId unusable after a refused exchange: %d", status)
			}
		})
		t.Run("invalid API key is 401 and leaves the sessionId unused", func(t *testing.T) {
			sid := s.GenerateSession(t, body("keyed", nil))
			if status, _ := exchange(t, s, "sk-bad", sid); status != 401 {
				t.Errorf("got %d, want 401", status)
			}
			s.Token(t, sid)
		})
	})
}

// TestSessionMiddleware covers the embed-session middleware over HTTP: its
// order (Bearer, then its cookie, then ?sessionId= on first use:
// docs/decisions.md §3) and the cookie it sets.
func TestSessionMiddleware(t *testing.T) {
	apitest.Run(t, true, func(t *testing.T, tg apitest.Target) {
		t.Parallel()
		s := apitest.New(t, tg)
		sid := s.GenerateSession(t, body("mw", nil))
		first := whoamiWith(t, s, "", "", sid)
		if first.Status != 200 {
			t.Fatalf("first use: %d %s", first.Status, first.Raw)
		}
		tok, _ := first.Body["token"].(string)
		if tok == "" {
			t.Fatal("EmbedSession.Token not set on the exchanging request")
		}
		var cookie *http.Cookie
		for _, c := range (&http.Response{Header: first.Header}).Cookies() {
			if c.Name == middleware.DefaultCookieName {
				cookie = c
			}
		}
		// The token, and a tag of the sessionId it was exchanged for.
		if cookie == nil || !strings.HasPrefix(cookie.Value, tok+".") || !cookie.HttpOnly || cookie.SameSite != http.SameSiteLaxMode || cookie.Secure || cookie.Path != "/" {
			t.Fatalf("cookie = %+v", cookie)
		}
		jar := cookie.Value
		other := s.Token(t, s.GenerateSession(t, body("mw-other", nil)))
		fresh := s.GenerateSession(t, body("mw-fresh", nil))
		fresh2 := s.GenerateSession(t, body("mw-fresh2", nil))
		fresh3 := s.GenerateSession(t, body("mw-fresh3", nil))

		cases := []struct {
			name                string
			bearer, cookie, sid string
			status              int
			user                string
			token               bool
		}{
			{name: "cookie alone", cookie: jar, status: 200, user: "mw"},
			{name: "bearer alone", bearer: tok, status: 200, user: "mw"},
			{name: "bearer wins over cookie", bearer: other, cookie: jar, status: 200, user: "mw-other"},
			{name: "invalid bearer is 401 even with a valid cookie", bearer: "bad", cookie: jar, status: 401},
			{name: "a reload: the cookie serves the used sessionId it was set for", cookie: jar, sid: sid, status: 200, user: "mw"},
			{name: "a new sessionId is exchanged, not served by another user's cookie", cookie: jar, sid: fresh, status: 200, user: "mw-fresh", token: true},
			{name: "a new sessionId that fails is 401 whatever the cookie", cookie: jar, sid: "nope", status: 401},
			{name: "a cookie of an earlier release (the bare token) does not serve a sessionId sent along", cookie: tok, sid: fresh3, status: 200, user: "mw-fresh3", token: true},
			{name: "a cookie of an earlier release serves a request without one", cookie: tok, status: 200, user: "mw"},
			{name: "invalid cookie with a fresh sessionId", cookie: "bad", sid: fresh2, status: 200, user: "mw-fresh2", token: true},
			{name: "invalid cookie alone is 401", cookie: "bad", status: 401},
			{name: "used sessionId is 401", sid: sid, status: 401},
			{name: "unknown sessionId is 401", sid: "nope", status: 401},
			{name: "nothing is 401", status: 401},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				r := whoamiWith(t, s, c.bearer, c.cookie, c.sid)
				if r.Status != c.status {
					t.Fatalf("status = %d (%s), want %d", r.Status, r.Raw, c.status)
				}
				if c.status != 200 {
					return
				}
				if r.Body["externalId"] != c.user {
					t.Errorf("user = %v, want %s", r.Body["externalId"], c.user)
				}
				if got := r.Body["token"] != nil; got != c.token {
					t.Errorf("token set = %v, want %v", got, c.token)
				}
			})
		}
	})
}

// TestRevocation covers revoking a user's sessions and deprovisioning.
func TestRevocation(t *testing.T) {
	apitest.Run(t, true, func(t *testing.T, tg apitest.Target) {
		t.Parallel()
		s := apitest.New(t, tg)
		del := func(path, key string) int {
			status, _ := s.Do(t, http.MethodDelete, path, key, nil)
			return status
		}

		t.Run("revoking sessions ends every token and unused sessionId", func(t *testing.T) {
			tok1 := s.Token(t, s.GenerateSession(t, body("rev", nil)))
			tok2 := s.Token(t, s.GenerateSession(t, body("rev", nil)))
			unused := s.GenerateSession(t, body("rev", nil))
			keep := s.Token(t, s.GenerateSession(t, body("rev-other", nil)))
			if st := del("/api/v1/embed/users/rev/sessions", apitest.AdminKey); st != 204 {
				t.Fatalf("revoke = %d", st)
			}
			for _, tok := range []string{tok1, tok2} {
				if r := whoamiWith(t, s, tok, "", ""); r.Status != 401 {
					t.Errorf("revoked token = %d", r.Status)
				}
			}
			if st, _ := exchange(t, s, "", unused); st != 401 {
				t.Errorf("revoked sessionId = %d", st)
			}
			if r := whoamiWith(t, s, keep, "", ""); r.Status != 200 {
				t.Errorf("other user's token = %d", r.Status)
			}
			if u := s.User(t, apitest.Account, "rev", ""); !u.Exists {
				t.Error("revocation deleted the user")
			}
			s.Whoami(t, s.GenerateSession(t, body("rev", nil))) // new sessions work
		})
		t.Run("deprovisioning deletes the user with values, memberships and sessions", func(t *testing.T) {
			tok := s.Token(t, s.GenerateSession(t, body("gone", obj{"userAttributes": attrs("country", "US"), "groups": []string{"sales"}})))
			if st := del("/api/v1/embed/users/gone", apitest.AdminKey); st != 204 {
				t.Fatalf("delete = %d", st)
			}
			if u := s.User(t, apitest.Account, "gone", ""); u.Exists {
				t.Fatal("user still exists")
			}
			if r := whoamiWith(t, s, tok, "", ""); r.Status != 401 {
				t.Errorf("token of deleted user = %d", r.Status)
			}
			if st := del("/api/v1/embed/users/gone", apitest.AdminKey); st != 404 {
				t.Errorf("second delete = %d, want 404", st)
			}
			// the same externalId starts afresh
			s.GenerateSession(t, body("gone", nil))
			if u := s.User(t, apitest.Account, "gone", ""); len(u.Attributes) != 0 || len(u.Groups) != 0 {
				t.Errorf("recreated user kept old data: %+v", u)
			}
		})
		t.Run("unknown user is 404", func(t *testing.T) {
			if st := del("/api/v1/embed/users/nobody", apitest.AdminKey); st != 404 {
				t.Errorf("delete = %d", st)
			}
			if st := del("/api/v1/embed/users/nobody/sessions", apitest.AdminKey); st != 404 {
				t.Errorf("revoke = %d", st)
			}
		})
		t.Run("user of another account is 404", func(t *testing.T) {
			s.GenerateSession(t, body("acme-only", nil))
			if st := del("/api/v1/embed/users/acme-only", apitest.OtherAdminKey); st != 404 {
				t.Errorf("delete = %d", st)
			}
			if u := s.User(t, apitest.Account, "acme-only", ""); !u.Exists {
				t.Error("deleted across accounts")
			}
		})
		t.Run("non-admin key is 403, no key 401", func(t *testing.T) {
			s.GenerateSession(t, body("guarded", nil))
			for _, p := range []string{"/api/v1/embed/users/guarded", "/api/v1/embed/users/guarded/sessions"} {
				if st := del(p, apitest.UserKey); st != 403 {
					t.Errorf("%s user key = %d", p, st)
				}
				if st := del(p, ""); st != 401 {
					t.Errorf("%s no key = %d", p, st)
				}
			}
			if u := s.User(t, apitest.Account, "guarded", ""); !u.Exists {
				t.Error("user deleted by a refused request")
			}
		})
	})
}

// TestTTLOptions checks WithSessionTTL and WithTokenTTL.
func TestTTLOptions(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		s := apitest.New(t, tg, apitest.WithEmbedOptions(embedsession.WithSessionTTL(time.Minute), embedsession.WithTokenTTL(time.Hour)))
		late := s.GenerateSession(t, body("ttl", nil))
		sid := s.GenerateSession(t, body("ttl", nil))
		s.Advance(59 * time.Second)
		status, out := exchange(t, s, "", sid)
		if status != 200 {
			t.Fatalf("exchange within the session TTL = %d", status)
		}
		exp, _ := time.Parse(time.RFC3339, out["expiresAt"].(string))
		if want := s.Now().Add(time.Hour); exp.Sub(want).Abs() > time.Second {
			t.Errorf("expiresAt = %v, want %v", exp, want)
		}
		s.Advance(2 * time.Second)
		if status, _ := exchange(t, s, "", late); status != 401 {
			t.Errorf("exchange after the session TTL = %d, want 401", status)
		}
		s.Advance(time.Hour)
		if r := whoamiWith(t, s, out["token"].(string), "", ""); r.Status != 401 {
			t.Errorf("token after its TTL = %d, want 401", r.Status)
		}
	})
}
