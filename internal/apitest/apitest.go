// Package apitest builds test servers for end-to-end tests of embedkit's
// HTTP API: a fresh store on each backend (SQLite, and PostgreSQL when
// EMBEDKIT_TEST_POSTGRES_DSN is set), seeded with the demo account of
// docs/decisions.md §6 plus a second account for cross-account checks, the
// embedsession routes mounted on gorilla/mux or http.ServeMux, served by
// httptest.NewServer.
//
//	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
//		s := apitest.New(t, tg)
//		status, body := s.Do(t, "POST", "/api/v1/embed/generate-session", apitest.AdminKey,
//			map[string]any{"deploymentId": 1, "externalId": "jane"})
//		...
//	})
//
// Other handlers (chatstream) are mounted with [WithRoutes].
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/operator"
)

// Keys and names of the seeded accounts.
const (
	Account       = "acme"            // the demo account of docs/decisions.md §6
	AdminKey      = "sk-acme-admin"   // admin key of Account
	UserKey       = "sk-acme-user"    // non-admin key of Account
	OtherAccount  = "globex"          // a second account with the same catalog names
	OtherAdminKey = "sk-globex-admin" // admin key of OtherAccount
	OtherUserKey  = "sk-globex-user"  // non-admin key of OtherAccount
	InternalUser  = "alice@acme.test" // internal user of Account
	// WhoamiPath is served behind middleware.Session; it answers the
	// session's user and grant as JSON (see [Whoami]).
	WhoamiPath = "/embed/whoami"
)

// Router names a router the routes are mounted on.
type Router string

// The routers of [Targets].
const (
	ServeMux Router = "servemux"
	Gorilla  Router = "gorilla"
)

// Target is one backend × router combination.
type Target struct {
	Backend string
	Router  Router
}

// String is "<backend>/<router>", used as the subtest name.
func (tg Target) String() string { return tg.Backend + "/" + string(tg.Router) }

// Targets returns every backend of testdb.Backends with ServeMux, and with
// gorilla/mux too when allRouters is true. PostgreSQL targets skip
// themselves (in [New]) when EMBEDKIT_TEST_POSTGRES_DSN is unset.
func Targets(allRouters bool) []Target {
	var out []Target
	for _, b := range testdb.Backends() {
		out = append(out, Target{b, ServeMux})
		if allRouters {
			out = append(out, Target{b, Gorilla})
		}
	}
	return out
}

// Run runs fn as one subtest per target of [Targets].
func Run(t *testing.T, allRouters bool, fn func(t *testing.T, tg Target)) {
	t.Helper()
	for _, tg := range Targets(allRouters) {
		t.Run(tg.String(), func(t *testing.T) { fn(t, tg) })
	}
}

// Route is an extra endpoint to mount (see [WithRoutes]).
type Route struct {
	Method  string
	Pattern string // {name} wildcards; handlers read r.PathValue
	Handler http.Handler
}

// Option configures [New].
type Option func(*config)

type config struct {
	cfg         operator.Config
	embedOpts   []embedsession.Option
	sessionOpts []middleware.SessionOption
	routes      []func(s *Server) []Route
	storeOpen   func(t testing.TB, backend string) store.Store
}

// WithConfig lets fn change the bootstrap configuration before it is
// applied (for example a small maxExternalUsers).
func WithConfig(fn func(*operator.Config)) Option { return func(c *config) { fn(&c.cfg) } }

// WithEmbedOptions adds options to the embedsession handler (after the
// server's clock).
func WithEmbedOptions(opts ...embedsession.Option) Option {
	return func(c *config) { c.embedOpts = append(c.embedOpts, opts...) }
}

// WithSessionOptions adds options to the middleware.Session in front of
// [WhoamiPath] (after the server's clock).
func WithSessionOptions(opts ...middleware.SessionOption) Option {
	return func(c *config) { c.sessionOpts = append(c.sessionOpts, opts...) }
}

// WithRoutes mounts the routes fn returns beside the embedsession ones. fn
// runs once the store is open and seeded, so it can build handlers on
// s.Store with s.Now as their clock.
func WithRoutes(fn func(s *Server) []Route) Option {
	return func(c *config) { c.routes = append(c.routes, fn) }
}

// WithStore replaces how the store is opened (default: testdb.Open on the
// target's backend, closed by t.Cleanup). The restart test uses it to open
// a store it closes and reopens itself.
func WithStore(open func(t testing.TB, backend string) store.Store) Option {
	return func(c *config) { c.storeOpen = open }
}

// Server is a running test server.
type Server struct {
	*httptest.Server
	Target Target
	// Store is the server's store, for setting up and checking state.
	Store store.Store
	// Accounts are the seeded accounts by name.
	Accounts map[string]store.Account
	// Embed is the mounted embedsession handler.
	Embed *embedsession.Handler

	mu  sync.Mutex
	now time.Time
}

// Config returns the bootstrap configuration [New] applies unless changed by
// [WithConfig]: the demo account and a second account, OtherAccount
// (premium, useCreatorMode off), with the same catalog names, deployments 1
// and 2, and the internal user bob@globex.test.
func Config() operator.Config {
	cfg := operator.DemoConfig()
	cfg.Accounts = append(cfg.Accounts, operator.Account{
		Name:           OtherAccount,
		Plan:           store.PlanPremium,
		UseCreatorMode: false,
		APIKeys:        []operator.APIKey{{Key: OtherAdminKey, Admin: true}, {Key: OtherUserKey}},
		Deployments:    []operator.Deployment{{ID: 1, Name: "production"}, {ID: 2, Name: "staging"}},
		UserAttributes: []operator.Attribute{{Name: "country", Type: store.TypeString}},
		Groups:         []operator.Group{{Name: "sales"}},
		InternalUsers:  []operator.InternalUser{{Username: "bob@globex.test"}},
	})
	return cfg
}

// New opens a fresh store for tg's backend, applies the bootstrap
// configuration, mounts the routes on tg's router and starts the server.
// Everything is closed by t.Cleanup. The server's clock starts at the real
// time and only moves with [Server.Advance].
func New(t testing.TB, tg Target, opts ...Option) *Server {
	t.Helper()
	c := config{cfg: Config(), storeOpen: func(t testing.TB, backend string) store.Store { return testdb.Open(t, backend) }}
	for _, o := range opts {
		o(&c)
	}
	st := c.storeOpen(t, tg.Backend)
	ctx := context.Background()
	if err := operator.New(st).Apply(ctx, c.cfg); err != nil {
		t.Fatalf("apitest: bootstrap: %v", err)
	}
	s := &Server{Target: tg, Store: st, Accounts: map[string]store.Account{}, now: time.Now().UTC().Truncate(time.Millisecond)}
	for _, a := range c.cfg.Accounts {
		acct, err := st.AccountByName(ctx, a.Name)
		if err != nil {
			t.Fatalf("apitest: account %q: %v", a.Name, err)
		}
		s.Accounts[a.Name] = acct
	}
	s.Embed = embedsession.NewHandler(st, append([]embedsession.Option{embedsession.WithClock(s.Now)}, c.embedOpts...)...)
	routes := []Route{}
	for _, rt := range s.Embed.Routes() {
		routes = append(routes, Route(rt))
	}
	session := middleware.Session(st, append([]middleware.SessionOption{middleware.WithClock(s.Now)}, c.sessionOpts...)...)
	routes = append(routes, Route{http.MethodGet, WhoamiPath, session(http.HandlerFunc(s.whoami))})
	for _, fn := range c.routes {
		routes = append(routes, fn(s)...)
	}
	var h http.Handler
	switch tg.Router {
	case Gorilla:
		r := mux.NewRouter().UseEncodedPath()
		r.Use(middleware.EncodedPathValues(mux.Vars))
		for _, rt := range routes {
			r.Handle(rt.Pattern, rt.Handler).Methods(rt.Method)
		}
		h = r
	default:
		sm := http.NewServeMux()
		for _, rt := range routes {
			sm.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
		}
		h = sm
	}
	s.Server = httptest.NewServer(h)
	t.Cleanup(s.Server.Close)
	return s
}

// Now is the server's clock, given to every handler.
func (s *Server) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

// Advance moves the server's clock forward by d.
func (s *Server) Advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = s.now.Add(d)
}

// Response is an answer of the server.
type Response struct {
	Status int
	Header http.Header
	Raw    []byte
	// Body is Raw decoded as a JSON object (nil when it is not one).
	Body map[string]any
}

// Do sends body (JSON-encoded unless it is a []byte, string or nil) with
// key as Authorization: Api-Key (none when empty) and returns the status
// and the decoded JSON object.
func (s *Server) Do(t testing.TB, method, path, key string, body any) (int, map[string]any) {
	t.Helper()
	r := s.Send(t, s.Request(t, method, path, key, body))
	return r.Status, r.Body
}

// Request builds a request for [Server.Send]; see [Server.Do].
func (s *Server) Request(t testing.TB, method, path, key string, body any) *http.Request {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("apitest: encode body: %v", err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		t.Fatalf("apitest: %v", err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Api-Key "+key)
	}
	return req
}

// Send sends req without following redirects and reads the whole answer.
func (s *Server) Send(t testing.TB, req *http.Request) Response {
	t.Helper()
	c := *s.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("apitest: %s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("apitest: read body: %v", err)
	}
	r := Response{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	_ = json.Unmarshal(raw, &r.Body)
	return r
}

// GenerateSession calls generate-session with the admin key and fails the
// test unless it answers 200; it returns the sessionId.
func (s *Server) GenerateSession(t testing.TB, body any) string {
	t.Helper()
	status, out := s.Do(t, http.MethodPost, embedsession.PathGenerateSession, AdminKey, body)
	if status != http.StatusOK {
		t.Fatalf("apitest: generate-session = %d %v, want 200", status, out)
	}
	id, _ := out["sessionId"].(string)
	if id == "" {
		t.Fatalf("apitest: generate-session answered no sessionId: %v", out)
	}
	return id
}

// Token exchanges a sessionId at the token endpoint (no API key) and fails
// the test unless it answers 200.
func (s *Server) Token(t testing.TB, sessionID string) string {
	t.Helper()
	status, out := s.Do(t, http.MethodPost, embedsession.PathSessionToken, "", map[string]string{"sessionId": sessionID})
	if status != http.StatusOK {
		t.Fatalf("apitest: token exchange = %d %v, want 200", status, out)
	}
	return out["token"].(string)
}
