package chatpage_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/embedkit/embedkit/chatstream/chatpage"
	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/internal/optiontest"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore"
	"github.com/embedkit/embedkit/store/memstore"
)

// env is a store with account "acme" (API key "sk-acme", admin), agent
// "7", and a server with the embed-session API and the chat page.
type env struct {
	st  *memstore.Store
	srv *httptest.Server
	h   *chatpage.Handler
}

func seed(t *testing.T, st store.Store) {
	t.Helper()
	ctx := context.Background()
	acct, err := st.SaveAccount(ctx, store.Account{Name: "acme", Plan: store.PlanEnterprise})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("sk-acme"))
	if err := st.SaveAPIKey(ctx, store.APIKey{Hash: sum[:], AccountID: acct.ID, Admin: true}); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveDeployment(ctx, store.Deployment{AccountID: acct.ID, ID: 1, Name: "production"}); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveAgent(ctx, store.Agent{AccountID: acct.ID, ID: "7", DeploymentID: 1}); err != nil {
		t.Fatal(err)
	}
}

func newEnv(t *testing.T, agent chatpage.AgentFunc, opts ...chatpage.Option) *env {
	t.Helper()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	seed(t, st)
	h := chatpage.New(st, agent, opts...)
	sm := http.NewServeMux()
	for _, rt := range embedsession.NewHandler(st).Routes() {
		sm.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}
	for _, rt := range h.Routes() {
		sm.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}
	srv := httptest.NewServer(sm)
	t.Cleanup(srv.Close)
	return &env{st: st, srv: srv, h: h}
}

// token provisions user and returns a token of a new session.
func (e *env) token(t *testing.T, user, picture string) string {
	t.Helper()
	ctx := context.Background()
	c := embedsession.NewClient(e.srv.URL, "sk-acme")
	req := embedsession.SessionRequest{DeploymentID: 1, ExternalID: user,
		UserProfile: &embedsession.UserProfile{DisplayName: embedsession.String("Jane Doe"), Picture: &picture}}
	sid, err := c.GenerateSession(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := c.ExchangeToken(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	return tok.Token
}

func get(t *testing.T, url, bearer string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

var (
	scriptTag = regexp.MustCompile(`<script[^>]*>`)
	importMap = regexp.MustCompile(`<script type="importmap">([^<]*)</script>`)
)

func TestShellNeedsNoSessionAndIsLockedDown(t *testing.T) {
	e := newEnv(t, chatpage.FixedAgent("7"), chatpage.WithTitle("Ask <your> data"))
	res, body := get(t, e.srv.URL+"/embed/chat", "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /embed/chat without credentials: %d %s", res.StatusCode, body)
	}
	h := res.Header
	for k, want := range map[string]string{
		"Referrer-Policy":        "no-referrer",
		"X-Content-Type-Options": "nosniff",
		"Cache-Control":          "no-store",
		"Content-Type":           "text/html; charset=utf-8",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	csp := h.Get("Content-Security-Policy")
	if csp != e.h.ContentSecurityPolicy() {
		t.Errorf("served CSP differs from ContentSecurityPolicy()")
	}
	for _, want := range []string{"default-src 'none'", "style-src 'self'", "connect-src 'self'", "base-uri 'none'", "form-action 'none'", "frame-ancestors 'self'", "img-src 'self' data:"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "*", "blob:"} {
		if strings.Contains(csp, bad) {
			t.Errorf("CSP %q allows %s", csp, bad)
		}
	}
	// Every script has a src; the shell loads no chart library.
	for _, tag := range scriptTag.FindAllString(body, -1) {
		if !strings.Contains(tag, " src=") || strings.Contains(tag, "vega") {
			t.Errorf("script %s in the shell", tag)
		}
	}
	if !strings.Contains(csp, "script-src 'self';") || !strings.Contains(csp, "frame-src 'self';") {
		t.Errorf("CSP %q: want scripts and frames of the page's origin only", csp)
	}
	if !strings.Contains(body, "<title>Ask &lt;your&gt; data</title>") {
		t.Error("the title is not escaped")
	}
}

// chartFrame returns the chart frame's response and its body.
func chartFrame(t *testing.T, e *env) (*http.Response, string) {
	t.Helper()
	return get(t, e.srv.URL+"/embed/chat/chart", "")
}

// The chart frame loads the chart libraries with integrity, and its
// policy allows their scripts only: no request, image, frame or form.
func TestChartFrameIsLockedDown(t *testing.T) {
	e := newEnv(t, chatpage.FixedAgent("7"), chatpage.WithFrameAncestors("https://app.example.com"))
	res, body := chartFrame(t, e)
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /embed/chat/chart: %d %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	csp := res.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "style-src 'self'", "base-uri 'none'", "form-action 'none'", "frame-ancestors 'self' https://app.example.com"} {
		if !strings.Contains(csp, want) {
			t.Errorf("chart CSP %q lacks %q", csp, want)
		}
	}
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "*", "blob:", "data:", "connect-src", "img-src", "frame-src"} {
		if strings.Contains(csp, bad) {
			t.Errorf("chart CSP %q has %s", csp, bad)
		}
	}
	for _, tag := range scriptTag.FindAllString(body, -1) {
		if !strings.Contains(tag, " src=") && tag != `<script type="importmap">` {
			t.Errorf("inline script %s", tag)
		}
		if strings.Contains(tag, "cdn.jsdelivr.net") && (!strings.Contains(tag, `integrity="sha384-`) || !strings.Contains(tag, `crossorigin="anonymous"`)) {
			t.Errorf("CDN script without integrity: %s", tag)
		}
	}
	m := importMap.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no import map")
	}
	sum := sha256.Sum256([]byte(m[1]))
	if want := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(csp, want) {
		t.Errorf("CSP %q lacks the import map hash %s", csp, want)
	}
	var im struct {
		Imports   map[string]string `json:"imports"`
		Integrity map[string]string `json:"integrity"`
	}
	if err := json.Unmarshal([]byte(m[1]), &im); err != nil {
		t.Fatal(err)
	}
	interp := im.Imports["vega-interpreter"]
	if interp != "https://cdn.jsdelivr.net/npm/vega-interpreter@2.3.2/build/vega-interpreter.js" || !strings.HasPrefix(im.Integrity[interp], "sha384-") {
		t.Errorf("import map %+v", im)
	}
	for _, u := range []string{
		"https://cdn.jsdelivr.net/npm/vega@6.4.0/build/vega.min.js",
		"https://cdn.jsdelivr.net/npm/vega-lite@6.5.0/build/vega-lite.min.js",
		"https://cdn.jsdelivr.net/npm/vega-embed@7.3.0/build/vega-embed.min.js",
	} {
		if !strings.Contains(body, `src="`+u+`"`) || !strings.Contains(csp, u) {
			t.Errorf("chart frame or CSP lacks %s", u)
		}
	}
	// The page draws charts in this frame, sandboxed: its script names
	// the frame's sandbox (scripts only, so an opaque origin).
	_, render := get(t, e.srv.URL+"/embed/chat/assets/render.js", "")
	if !strings.Contains(render, `frame.setAttribute("sandbox", "allow-scripts")`) {
		t.Error("render.js does not sandbox the chart frame with allow-scripts only")
	}
}

func TestAssets(t *testing.T) {
	e := newEnv(t, chatpage.FixedAgent("7"), chatpage.WithTheme(map[string]string{"--ek-accent": "#0f766e", "--ek-font": `"Inter", sans-serif`}))
	for path, ct := range map[string]string{
		"/embed/chat/assets/chat.js":      "text/javascript; charset=utf-8",
		"/embed/chat/assets/markdown.js":  "text/javascript; charset=utf-8",
		"/embed/chat/assets/render.js":    "text/javascript; charset=utf-8",
		"/embed/chat/assets/vega-util.js": "text/javascript; charset=utf-8",
		"/embed/chat/assets/chart.js":     "text/javascript; charset=utf-8",
		"/embed/chat/assets/chart.css":    "text/css; charset=utf-8",
		"/embed/chat/assets/chat.css":     "text/css; charset=utf-8",
		"/embed/chat/theme.css":           "text/css; charset=utf-8",
	} {
		res, body := get(t, e.srv.URL+path, "")
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != ct || res.Header.Get("X-Content-Type-Options") != "nosniff" || body == "" {
			t.Errorf("GET %s: %d %q", path, res.StatusCode, res.Header.Get("Content-Type"))
		}
	}
	// Revalidation with the ETag answers 304.
	res, _ := get(t, e.srv.URL+"/embed/chat/assets/chat.js", "")
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/embed/chat/assets/chat.js", nil)
	req.Header.Set("If-None-Match", res.Header.Get("ETag"))
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusNotModified {
		t.Errorf("revalidation: %v %v", res, err)
	} else {
		res.Body.Close()
	}
	_, css := get(t, e.srv.URL+"/embed/chat/theme.css", "")
	if css != ":root {\n  --ek-accent: #0f766e;\n  --ek-font: \"Inter\", sans-serif;\n}\n" {
		t.Errorf("theme.css %q", css)
	}
	_, shell := get(t, e.srv.URL+"/embed/chat", "")
	if !strings.Contains(shell, `href="/embed/chat/theme.css"`) {
		t.Error("the shell does not link the theme")
	}
}

func TestMe(t *testing.T) {
	e := newEnv(t, chatpage.FixedAgent("7"))
	tok := e.token(t, "jane", "https://img.example.com/jane.png")
	res, body := get(t, e.srv.URL+"/embed/chat/me", tok)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("me: %d %s", res.StatusCode, body)
	}
	var me chatpage.Me
	if err := json.Unmarshal([]byte(body), &me); err != nil {
		t.Fatal(err)
	}
	if me.DisplayName != "Jane Doe" || me.Initials != "JD" || me.Picture != "https://img.example.com/jane.png" ||
		me.AccountName != "acme" || me.AgentID != "7" ||
		me.StreamURL != "/api/v1/public/acme/agents/7/chat/stream-chat-state" || me.AbortURL != "/api/v1/public/acme/agents/7/chat/abort" ||
		me.ExpiresAt.IsZero() {
		t.Errorf("me %+v", me)
	}
	if res.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q", res.Header.Get("Cache-Control"))
	}
	for _, c := range []struct{ name, bearer string }{{"no token", ""}, {"unknown token", "nope"}} {
		res, body := get(t, e.srv.URL+"/embed/chat/me", c.bearer)
		if res.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `"error"`) {
			t.Errorf("%s: %d %s", c.name, res.StatusCode, body)
		}
	}
}

func TestMeUnknownAgent(t *testing.T) {
	e := newEnv(t, func(context.Context, middleware.EmbedSession) (string, error) { return "missing", nil })
	res, body := get(t, e.srv.URL+"/embed/chat/me", e.token(t, "jane", ""))
	if res.StatusCode != http.StatusNotFound || !strings.Contains(body, "no chat agent") {
		t.Errorf("me with an unknown agent: %d %s", res.StatusCode, body)
	}
}

// TestInvalidOptionsPanic checks that every invalid option value panics,
// when its With function is called, with a message naming the package, the
// option and the value, and that New panics on a nil store or agent.
func TestInvalidOptionsPanic(t *testing.T) {
	st := memstore.New()
	defer st.Close()
	optiontest.Panics(t, map[string]func(){
		`chatpage: WithTheme: variable name must be "--" and 1 to 64 letters, digits and dashes, got "accent"`: func() { chatpage.WithTheme(map[string]string{"accent": "red"}) },
		`chatpage: WithTheme: value of --ek-accent must be 1 to 200 letters, digits, spaces, closed quotes and #%.,()+-/, without url(), got "red; background: x"`: func() {
			chatpage.WithTheme(map[string]string{"--ek-accent": "red; background: x"})
		},
		`chatpage: WithTheme: value of --ek-bg must be 1 to 200 letters, digits, spaces, closed quotes and #%.,()+-/, without url(), got "url(https://evil.example)"`: func() {
			chatpage.WithTheme(map[string]string{"--ek-bg": "url(https://evil.example)"})
		},
		`chatpage: WithFrameAncestors: source must be one CSP source (not empty, no ';', ',' or white space), got "https://a.example; script-src *"`: func() {
			chatpage.WithFrameAncestors("https://a.example; script-src *")
		},
		`chatpage: WithFrameAncestors: source must be one CSP source (not empty, no ';', ',' or white space), got ""`: func() { chatpage.WithFrameAncestors("'self'", "") },
		`chatpage: WithImageSources: source must be one CSP source (not empty, no ';', ',' or white space), got "https://a.example 'unsafe-inline'"`: func() {
			chatpage.WithImageSources("https://a.example 'unsafe-inline'")
		},
		`chatpage: WithPath: path must start with "/" and hold no wildcard, query, fragment or space, got "embed/{x}"`: func() { chatpage.WithPath("embed/{x}") },
		`chatpage: WithPath: path must start with "/" and hold no wildcard, query, fragment or space, got "/embed?x"`:  func() { chatpage.WithPath("/embed?x") },
		`chatpage: WithVegaCDN: prefix must be an http(s) URL prefix, got "ftp://cdn.example"`:                         func() { chatpage.WithVegaCDN("ftp://cdn.example") },
		`chatpage: WithChatBaseURL: base must be an http(s) origin or an absolute path prefix, got "javascript:x"`:     func() { chatpage.WithChatBaseURL("javascript:x") },
		`chatpage: WithChatBaseURL: base must be an http(s) origin or an absolute path prefix, got "//evil.example"`:   func() { chatpage.WithChatBaseURL("//evil.example") },
		`chatpage: WithChatBaseURL: base must be an http(s) origin or an absolute path prefix, got "/api prefix"`:      func() { chatpage.WithChatBaseURL("/api prefix") },
		"chatpage: WithVega: vega must not be nil, got nil (leave the option out for the CDN)":                         func() { chatpage.WithVega(nil) },
		"chatpage: WithVega: vega must come from LoadVega, got an empty Vega":                                          func() { chatpage.WithVega(&chatpage.Vega{}) },
		"chatpage: WithSessionOptions: options must not be nil, got nil at index 0":                                    func() { chatpage.WithSessionOptions(nil) },
		"chatpage: WithLogger: logger must not be nil, got nil (leave the option out for slog.Default())":              func() { chatpage.WithLogger(nil) },
		"chatpage: New: store must not be nil, got nil":                                                                func() { chatpage.New(nil, chatpage.FixedAgent("7")) },
		"chatpage: New: store must not be nil, got (*gormstore.Store)(nil) (was the error of the function that returned it ignored?)": func() {
			chatpage.New((*gormstore.Store)(nil), chatpage.FixedAgent("7"))
		},
		"chatpage: New: agent must not be nil, got nil (FixedAgent chooses one agent id)": func() { chatpage.New(st, nil) },
	})
}

// TestLoadVegaMissing: a folder without the pinned packages is an error of
// LoadVega (it reads files), which says what to install.
func TestLoadVegaMissing(t *testing.T) {
	v, err := chatpage.LoadVega(t.TempDir())
	if v != nil || err == nil || !strings.Contains(err.Error(), "install vega@6.4.0 there") {
		t.Errorf("LoadVega of an empty folder: %v, %v", v, err)
	}
}

// TestOptionsAreCopied: the slices and maps given to options are copied
// when the option is made, so what was checked is what the page uses.
func TestOptionsAreCopied(t *testing.T) {
	st := memstore.New()
	defer st.Close()
	theme := map[string]string{"--ek-accent": "#0f766e"}
	frames := []string{"https://app.example.com"}
	opts := []chatpage.Option{chatpage.WithTheme(theme), chatpage.WithFrameAncestors(frames...)}
	theme["--ek-accent"] = "red; } body { display: none"
	frames[0] = "*; script-src *"
	h := chatpage.New(st, chatpage.FixedAgent("7"), opts...)
	if csp := h.ContentSecurityPolicy(); !strings.Contains(csp, "frame-ancestors https://app.example.com") {
		t.Errorf("CSP %q", csp)
	}
	for _, rt := range h.Routes() {
		if strings.HasSuffix(rt.Pattern, "/theme.css") {
			rec := httptest.NewRecorder()
			rt.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, rt.Pattern, nil))
			if css := rec.Body.String(); css != ":root {\n  --ek-accent: #0f766e;\n}\n" {
				t.Errorf("theme.css %q", css)
			}
		}
	}
}

// TestChatBasePathPrefix: a host that mounts the APIs under a path prefix
// names it; the page's endpoints get it, and the CSP stays 'self' (a path
// is no CSP source).
func TestChatBasePathPrefix(t *testing.T) {
	st := memstore.New()
	defer st.Close()
	h := chatpage.New(st, chatpage.FixedAgent("7"), chatpage.WithChatBaseURL("/analytics/"))
	if csp := h.ContentSecurityPolicy(); strings.Contains(csp, "/analytics") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
	mux := http.NewServeMux()
	for _, rt := range h.Routes() {
		mux.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/embed/chat", nil))
	if body := rec.Body.String(); !strings.Contains(body, `data-token-url="/analytics/api/v1/embed/session/token"`) {
		t.Errorf("shell does not name the prefixed token URL: %s", body)
	}
}

func TestFrameAncestorsAndImageSources(t *testing.T) {
	st := memstore.New()
	defer st.Close()
	h := chatpage.New(st, chatpage.FixedAgent("7"),
		chatpage.WithFrameAncestors("https://app.example.com", "https://*.example.org"),
		chatpage.WithImageSources("https://avatars.example.com"),
		chatpage.WithPath("/chat/"),
		chatpage.WithVegaCDN("https://cdn.example.net/npm"))
	csp := h.ContentSecurityPolicy()
	for _, want := range []string{"frame-ancestors https://app.example.com https://*.example.org", "img-src 'self' data: https://avatars.example.com"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	for _, rt := range h.Routes() {
		if !strings.HasPrefix(rt.Pattern, "/chat") || strings.HasPrefix(rt.Pattern, "/chat//") {
			t.Errorf("route %s", rt.Pattern)
		}
		if rt.Pattern == "/chat/chart" {
			rec := httptest.NewRecorder()
			rt.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, rt.Pattern, nil))
			if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "https://cdn.example.net/npm/vega@6.4.0/build/vega.min.js") ||
				!strings.Contains(csp, "frame-ancestors 'self' https://app.example.com https://*.example.org") {
				t.Errorf("chart CSP %q", csp)
			}
		}
	}
}

// vegaDir is the node_modules folder of the pinned packages, or "".
func vegaDir(t *testing.T) string {
	dir := os.Getenv("EMBEDKIT_VEGA_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", ".ci", "vega", "node_modules")
	}
	if _, err := os.Stat(filepath.Join(dir, "vega", "package.json")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("vega packages not found in %s (CI=true)", dir)
		}
		t.Skipf("vega packages not found in %s: npm ci --prefix .ci/vega, or set EMBEDKIT_VEGA_DIR", dir)
	}
	return dir
}

func TestVegaDir(t *testing.T) {
	dir := vegaDir(t)
	v, err := chatpage.LoadVega(dir)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, chatpage.FixedAgent("7"), chatpage.WithVega(v))
	res, frame := chartFrame(t, e)
	if csp := res.Header.Get("Content-Security-Policy"); strings.Contains(csp, "https:") {
		t.Errorf("chart CSP %q names another origin with local vega files", csp)
	}
	for _, name := range []string{"vega.js", "vega-lite.js", "vega-embed.js", "vega-interpreter.js"} {
		if !strings.Contains(frame, `/embed/chat/vega/`+name) {
			t.Errorf("the chart frame does not load %s locally", name)
		}
		// The frame's origin is opaque: its scripts load with CORS.
		res, body := get(t, e.srv.URL+"/embed/chat/vega/"+name, "")
		if res.StatusCode != http.StatusOK || len(body) < 1000 || res.Header.Get("Access-Control-Allow-Origin") != "*" {
			t.Errorf("GET vega/%s: %d, Access-Control-Allow-Origin %q", name, res.StatusCode, res.Header.Get("Access-Control-Allow-Origin"))
		}
	}
	// Another version is refused.
	bad := t.TempDir()
	if err := os.CopyFS(bad, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, "vega", "build", "vega.min.js"), []byte("/* v0 */"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := chatpage.LoadVega(bad); err == nil || !strings.Contains(err.Error(), "is not vega@6.4.0") {
		t.Errorf("LoadVega with a changed vega.min.js: %v", err)
	}
}

func TestInitials(t *testing.T) {
	for in, want := range map[string]string{"Jane Doe": "JD", "jane": "J", "": "?", "ana-maria lópez": "AM", "42 x": "4X", "  ": "?", "émile zola": "ÉZ", "  anna  maria lee": "AM", "o'brien": "O"} {
		if got := chatpage.Initials(in); got != want {
			t.Errorf("Initials(%q) = %q, want %q", in, got, want)
		}
	}
}

// A host may mount the shell behind middleware.Session: the middleware
// uses up the sessionId, so the shell hands the token to the script.
func TestShellBehindSessionMiddleware(t *testing.T) {
	e := newEnv(t, chatpage.FixedAgent("7"))
	var shell http.Handler
	for _, rt := range e.h.Routes() {
		if rt.Pattern == chatpage.DefaultPath {
			shell = rt.Handler
		}
	}
	srv := httptest.NewServer(middleware.Session(e.st)(shell))
	defer srv.Close()
	c := embedsession.NewClient(e.srv.URL, "sk-acme")
	sid, err := c.GenerateSession(context.Background(), embedsession.SessionRequest{DeploymentID: 1, ExternalID: "jane"})
	if err != nil {
		t.Fatal(err)
	}
	res, body := get(t, srv.URL+"/embed/chat?sessionId="+sid, "")
	m := regexp.MustCompile(`data-token="([^"]+)"`).FindStringSubmatch(body)
	if res.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("shell behind the middleware: %d, token handed: %v", res.StatusCode, m != nil)
	}
	if res, _ := get(t, e.srv.URL+"/embed/chat/me", m[1]); res.StatusCode != http.StatusOK {
		t.Errorf("the handed token is refused: %d", res.StatusCode)
	}
	// Without an exchange in the request, no token is in the page.
	_, plain := get(t, e.srv.URL+"/embed/chat", "")
	if !strings.Contains(plain, `data-token=""`) {
		t.Error("the plain shell carries a token")
	}
}

// A page requested as a cross-site iframe while only its own origin may
// frame it logs one warning naming WithFrameAncestors.
func TestCrossSiteFrameWarning(t *testing.T) {
	shell := func(h *chatpage.Handler, dest, site string) {
		t.Helper()
		for _, rt := range h.Routes() {
			if rt.Pattern == chatpage.DefaultPath {
				req := httptest.NewRequest(http.MethodGet, rt.Pattern, nil)
				req.Header.Set("Sec-Fetch-Dest", dest)
				req.Header.Set("Sec-Fetch-Site", site)
				rec := httptest.NewRecorder()
				rt.Handler.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					t.Fatalf("shell: %d", rec.Code)
				}
			}
		}
	}
	st := memstore.New()
	defer st.Close()
	for _, tc := range []struct {
		name  string
		opts  []chatpage.Option
		dest  string
		site  string
		warns int
	}{
		{"default, cross-site frame", nil, "iframe", "cross-site", 1},
		{"default, same-site frame", nil, "iframe", "same-site", 0},
		{"default, same-origin frame", nil, "iframe", "same-origin", 0},
		{"default, top-level document", nil, "document", "cross-site", 0},
		{"explicit 'self', cross-site frame", []chatpage.Option{chatpage.WithFrameAncestors("'self'")}, "iframe", "cross-site", 1},
		{"host allowed, cross-site frame", []chatpage.Option{chatpage.WithFrameAncestors("'self'", "https://app.example.com")}, "iframe", "cross-site", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf strings.Builder
			log := slog.New(slog.NewTextHandler(&buf, nil))
			h := chatpage.New(st, chatpage.FixedAgent("7"), append(tc.opts, chatpage.WithLogger(log))...)
			for range 3 {
				shell(h, tc.dest, tc.site)
			}
			out := buf.String()
			if n := strings.Count(out, "level=WARN"); n != tc.warns {
				t.Fatalf("%d warnings, want %d: %s", n, tc.warns, out)
			}
			if tc.warns > 0 && (!strings.Contains(out, "chatpage.WithFrameAncestors") || !strings.Contains(out, "frameAncestors='self'")) {
				t.Errorf("warning %q does not name the option and the sources", out)
			}
		})
	}
}
