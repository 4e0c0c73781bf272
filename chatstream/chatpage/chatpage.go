package chatpage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"html/template"
	"io/fs"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/internal/nilarg"
	"github.com/embedkit/embedkit/internal/wire"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store"
)

//go:embed assets
var assetFS embed.FS

// Store is what the page's user endpoint reads besides the session: the
// account and the agent. Every [store.Store] implements it.
type Store interface {
	middleware.SessionStore
	// AccountByID returns [store.ErrNotFound] when missing.
	AccountByID(ctx context.Context, id int64) (store.Account, error)
	// Agent returns [store.ErrNotFound] when missing.
	Agent(ctx context.Context, accountID int64, id string) (store.Agent, error)
}

// AgentFunc chooses the agent a session's user chats with. It returns the
// agent's id within the session's account.
type AgentFunc func(ctx context.Context, es middleware.EmbedSession) (agentID string, err error)

// FixedAgent is an [AgentFunc] that always chooses the agent id.
func FixedAgent(id string) AgentFunc {
	return func(context.Context, middleware.EmbedSession) (string, error) { return id, nil }
}

// Route is one endpoint of the handler: mount Handler for Method and
// Pattern on any router (the patterns have no wildcards).
type Route struct {
	Method  string
	Pattern string
	Handler http.Handler
}

// Handler serves the embed chat page: the HTML shell, its script and
// style sheet, optionally the chart libraries, and the user endpoint the
// script calls with the session token. Build it with [New]; it is safe for
// concurrent use.
type Handler struct {
	st       Store
	agent    AgentFunc
	o        options
	shell    []byte
	csp      string
	chart    []byte // the chart frame
	chartCSP string
	theme    []byte
	vega     map[string][]byte // local chart files by name, nil for a CDN
	assets   map[string][]byte // the page's script and style by file name
	// selfOnly: no other site may frame the page; framedOnce warns once
	// when one tries.
	selfOnly   bool
	framedOnce sync.Once
}

// assetNames are the files served under {path}/assets/.
var assetNames = []string{"chat.js", "chat.css", "markdown.js", "render.js", "chart.js", "chart.css", "vega-util.js"}

// DefaultPath is where [Handler.Routes] mounts the page by default.
const DefaultPath = "/embed/chat"

// New returns the chat page handler. Users chat with the agent that the
// [AgentFunc] chooses for their session, on the chat endpoints of
// [chatstream.Handler] mounted on the same origin, with the token the page
// gets from the embed-session token endpoint
// (embedsession.PathSessionToken).
//
// New opens nothing (the chart libraries of [WithVega] are read by
// [LoadVega]); its options are checked when their With functions are
// called, and a nil store (or a nil pointer in it, as an ignored Open
// error leaves) or agent panics, as http.Handle does for a nil handler.
func New(st Store, agent AgentFunc, opts ...Option) *Handler {
	nilarg.Check("chatpage: New", "store", st)
	if agent == nil {
		panic("chatpage: New: agent must not be nil, got nil (FixedAgent chooses one agent id)")
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	h := &Handler{st: st, agent: agent, o: o}
	h.assets = make(map[string][]byte, len(assetNames))
	for _, name := range assetNames {
		b, err := fs.ReadFile(assetFS, "assets/"+name)
		if err != nil {
			panic(fmt.Sprintf("chatpage: New: embedded asset: %v", err)) // a broken build
		}
		h.assets[name] = b
	}
	if o.vega != nil {
		h.vega = o.vega.files
	}
	if len(o.theme) > 0 {
		h.theme = themeCSS(o.theme)
	}
	h.selfOnly = !slices.ContainsFunc(o.frameAncestors, func(s string) bool { return s != "'self'" && s != "'none'" })
	h.render()
	return h
}

// Routes returns the page's endpoints under the path of [WithPath]
// (default /embed/chat):
//
//   - GET {path}: the HTML shell. It carries no user data and needs no
//     cookie or session, so that it loads in a cross-site iframe whose
//     third-party cookies the browser blocks, and after a reload. (A host
//     that mounts it behind [middleware.Session] anyway still works on the
//     first load: the middleware exchanges ?sessionId= and the shell hands
//     the token to the script; a reload then needs the middleware's cookie.)
//   - GET {path}/me: the user, the account and the agent, as JSON, behind
//     [middleware.Session] (the script sends Authorization: Bearer);
//   - GET {path}/chart: the frame each chart is drawn in (sandboxed, in
//     an opaque origin, with the chart libraries and no other request);
//   - GET {path}/assets/...: the scripts and the style sheets;
//   - GET {path}/theme.css: the theme of [WithTheme], when set;
//   - GET {path}/vega/...: the chart libraries, with [WithVega].
func (h *Handler) Routes() []Route {
	p := h.o.path
	session := middleware.Session(h.st, h.o.sessionOpts...)
	rs := []Route{
		{http.MethodGet, p, http.HandlerFunc(h.serveShell)},
		{http.MethodGet, p + "/me", session(http.HandlerFunc(h.serveMe))},
		{http.MethodGet, p + "/chart", http.HandlerFunc(h.serveChart)},
	}
	for _, name := range assetNames {
		ct := "text/javascript; charset=utf-8"
		if strings.HasSuffix(name, ".css") {
			ct = "text/css; charset=utf-8"
		}
		rs = append(rs, Route{http.MethodGet, p + "/assets/" + name, staticBytes(ct, h.assets[name])})
	}
	if h.theme != nil {
		rs = append(rs, Route{http.MethodGet, p + "/theme.css", staticBytes("text/css; charset=utf-8", h.theme)})
	}
	names := make([]string, 0, len(h.vega))
	for name := range h.vega {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		rs = append(rs, Route{http.MethodGet, p + "/vega/" + name, staticBytes("text/javascript; charset=utf-8", h.vega[name])})
	}
	return rs
}

// ContentSecurityPolicy returns the policy the shell is served with.
func (h *Handler) ContentSecurityPolicy() string { return h.csp }

// staticBytes serves b; browsers revalidate it with its ETag.
func staticBytes(contentType string, b []byte) http.Handler {
	sum := sha256.Sum256(b)
	etag := `"` + base64.RawURLEncoding.EncodeToString(sum[:16]) + `"`
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", etag)
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-cache")
		// The chart frame, whose origin is opaque, loads these with
		// crossorigin=anonymous (and integrity): public code, for anyone.
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Cross-Origin-Resource-Policy", "same-origin")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
	})
}

func (h *Handler) serveShell(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Content-Security-Policy", h.csp)
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Content-Type-Options", "nosniff")
	// The URL may carry a single-use sessionId: nothing keeps a copy.
	hd.Set("Cache-Control", "no-store")
	if h.selfOnly && r.Header.Get("Sec-Fetch-Dest") == "iframe" && r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		h.framedOnce.Do(func() {
			h.o.log.Warn("chatpage: the chat page was requested as an iframe of another site, but its frame-ancestors allow only its own origin, so the browser shows a blocked frame; allow the host's origin with chatpage.WithFrameAncestors, for example WithFrameAncestors(\"https://app.example.com\")",
				"path", h.o.path, "frameAncestors", strings.Join(h.o.frameAncestors, " "))
		})
	}
	if r.Method == http.MethodHead {
		return
	}
	// Behind middleware.Session, a request that exchanged ?sessionId= has
	// used it up: the shell hands the new token to the script instead.
	if es, ok := middleware.EmbedSessionFromContext(r.Context()); ok && es.Token != "" {
		_, _ = w.Write(bytes.Replace(h.shell, []byte(`data-token=""`), []byte(`data-token="`+html.EscapeString(es.Token)+`"`), 1))
		return
	}
	_, _ = w.Write(h.shell)
}

// Me is the JSON of GET {path}/me.
type Me struct {
	DisplayName string `json:"displayName"`
	// Initials stand for the user when Picture is empty or fails to load.
	Initials string `json:"initials"`
	// Picture is the avatar URL (http, https or a data: image), or "".
	Picture     string `json:"picture"`
	AccountName string `json:"accountName"`
	AgentID     string `json:"agentId"`
	// StreamURL and AbortURL are the chat endpoints for this account and
	// agent, relative to the page's origin.
	StreamURL string `json:"streamUrl"`
	AbortURL  string `json:"abortUrl"`
	// DataURL is the data query API for this account and agent, which
	// the page's "Download CSV" calls with a result's sqlQuery.
	DataURL string `json:"dataUrl"`
	// ExpiresAt is when the token expires.
	ExpiresAt time.Time `json:"expiresAt"`
	// ChatKey names the user and agent of the session, opaquely: the page
	// keeps its conversation across sessions with the same key (a host
	// page that mints a new session on every load), and drops it for
	// another.
	ChatKey string `json:"chatKey"`
}

var errNoAgent = wire.Errorf(http.StatusNotFound, "no chat agent for this session")

func (h *Handler) serveMe(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	es, ok := middleware.EmbedSessionFromContext(ctx)
	if !ok {
		wire.WriteError(w, r, h.o.log, wire.Errorf(http.StatusUnauthorized, "no embed session"))
		return
	}
	me, err := h.me(ctx, es)
	if err != nil {
		wire.WriteError(w, r, h.o.log, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	wire.WriteJSON(w, http.StatusOK, me)
}

func (h *Handler) me(ctx context.Context, es middleware.EmbedSession) (Me, error) {
	acct, err := h.st.AccountByID(ctx, es.Session.AccountID)
	if errors.Is(err, store.ErrNotFound) {
		return Me{}, wire.Errorf(http.StatusNotFound, "account not found")
	}
	if err != nil {
		return Me{}, err
	}
	id, err := h.agent(ctx, es)
	if err != nil {
		return Me{}, err
	}
	if id == "" {
		return Me{}, errNoAgent
	}
	if _, err := h.st.Agent(ctx, acct.ID, id); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return Me{}, errNoAgent
		}
		return Me{}, err
	}
	u := es.User
	name := u.DisplayName
	if name == "" {
		name = u.ExternalID + u.InternalID
	}
	chatPath := func(pattern string) string {
		return strings.NewReplacer("{accountName}", url.PathEscape(acct.Name), "{agentId}", url.PathEscape(id)).Replace(pattern)
	}
	return Me{
		DisplayName: name,
		Initials:    Initials(name),
		Picture:     safePicture(u.Picture),
		AccountName: acct.Name,
		AgentID:     id,
		StreamURL:   h.o.chatBase + chatPath(chatstream.StreamPattern),
		AbortURL:    h.o.chatBase + chatPath(chatstream.AbortPattern),
		DataURL:     h.o.chatBase + chatPath(chatstream.DataPattern),
		ExpiresAt:   es.Session.ExpiresAt.UTC(),
		ChatKey:     chatKey(acct.ID, u.ID, id),
	}, nil
}

// chatKey is Me.ChatKey: a hash, so that the page learns no identifier.
func chatKey(accountID, userID int64, agentID string) string {
	h := sha256.Sum256(fmt.Appendf(nil, "embedkit chat key\x00%d\x00%d\x00%s", accountID, userID, agentID))
	return hex.EncodeToString(h[:12])
}

// safePicture keeps http, https and data:image URLs.
func safePicture(p string) string {
	u, err := url.Parse(p)
	if err != nil {
		return ""
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
		return p
	case "data":
		if strings.HasPrefix(strings.ToLower(u.Opaque), "image/") {
			return p
		}
	}
	return ""
}

// Initials returns up to two initials of a display name, for an avatar
// without a picture: "Jane Doe" → "JD", "" → "?".
func Initials(name string) string {
	var out []rune
	for _, f := range strings.FieldsFunc(name, func(r rune) bool {
		return unicode.IsSpace(r) || r == '-' || r == '_' || r == '.' || r == '@'
	}) {
		for _, r := range f {
			if unicode.IsLetter(r) || unicode.IsDigit(r) {
				out = append(out, unicode.ToUpper(r))
				break
			}
		}
		if len(out) == 2 {
			break
		}
	}
	if len(out) == 0 {
		return "?"
	}
	return string(out)
}

// script is a classic script tag of the chart frame.
type script struct{ URL, Integrity string }

var (
	shellTmpl = template.Must(template.ParseFS(assetFS, "assets/chat.html"))
	chartTmpl = template.Must(template.ParseFS(assetFS, "assets/chart.html"))
)

const importMapMark = "@@IMPORTMAP@@"

// render builds the shell and the chart frame (the same bytes for every
// request) and their Content-Security-Policies. It fails only with a
// broken build (the embedded templates), so it panics then.
//
// The shell loads no chart library: each chart is drawn in a frame of
// {path}/chart, sandboxed by the shell with allow-scripts only, so that
// it runs in an opaque origin that cannot read the page's token, cookies
// or storage. The frame's policy allows the chart libraries' scripts and
// nothing else: no request, image, frame or form, to any origin.
func (h *Handler) render() {
	p := h.o.path
	var buf bytes.Buffer
	err := shellTmpl.Execute(&buf, struct {
		Title, Base, TokenURL string
		Theme                 bool
	}{h.o.title, p, h.o.chatBase + embedsession.PathSessionToken, h.theme != nil})
	if err != nil {
		panic(fmt.Sprintf("chatpage: New: shell template: %v", err))
	}
	h.shell = buf.Bytes()
	imgSrc := append([]string{"'self'", "data:"}, h.o.imgSrc...)
	connect := "'self'"
	if h.o.chatBase != "" && !strings.HasPrefix(h.o.chatBase, "/") { // a path prefix is 'self'
		connect += " " + h.o.chatBase
	}
	h.csp = strings.Join([]string{
		"default-src 'none'",
		"script-src 'self'",
		"style-src 'self'",
		"img-src " + strings.Join(imgSrc, " "),
		"connect-src " + connect,
		"frame-src 'self'",
		"base-uri 'none'",
		"form-action 'none'",
		"frame-ancestors " + strings.Join(h.o.frameAncestors, " "),
	}, "; ")
	h.renderChart()
}

// renderChart builds the chart frame and its policy.
func (h *Handler) renderChart() {
	p := h.o.path
	var scripts []script
	var interpURL, interpIntegrity string
	scriptSrc := []string{"'self'"}
	source := "this server"
	for _, f := range vegaFiles {
		u := p + "/vega/" + f.localName()
		if h.vega == nil {
			u = f.cdnURL(h.o.vegaCDN)
			scriptSrc = append(scriptSrc, u)
			source = h.o.vegaCDN
		}
		if f.module {
			interpURL, interpIntegrity = u, f.integrity
			continue
		}
		scripts = append(scripts, script{u, f.integrity})
	}
	im := map[string]any{
		"imports": map[string]string{
			"vega-interpreter": interpURL,
			// vega-interpreter imports three helpers of vega-util, which
			// the vega bundle already exports: a shim hands them over.
			"vega-util": p + "/assets/vega-util.js",
		},
		"integrity": map[string]string{interpURL: interpIntegrity},
	}
	imJSON, err := json.Marshal(im) // escapes <, > and &
	if err != nil {
		panic(fmt.Sprintf("chatpage: New: import map: %v", err))
	}
	var buf bytes.Buffer
	err = chartTmpl.Execute(&buf, struct {
		Base, ImportMap, VegaSource string
		Scripts                     []script
	}{p, importMapMark, source, scripts})
	if err != nil {
		panic(fmt.Sprintf("chatpage: New: chart template: %v", err))
	}
	h.chart = bytes.Replace(buf.Bytes(), []byte(importMapMark), imJSON, 1)
	sum := sha256.Sum256(imJSON)
	scriptSrc = append(scriptSrc, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")
	// The frame's ancestors are the page and the page's own ancestors.
	ancestors := []string{"'self'"}
	for _, a := range h.o.frameAncestors {
		if a != "'self'" && a != "'none'" {
			ancestors = append(ancestors, a)
		}
	}
	h.chartCSP = strings.Join([]string{
		"default-src 'none'",
		"script-src " + strings.Join(scriptSrc, " "),
		"style-src 'self'",
		"base-uri 'none'",
		"form-action 'none'",
		"frame-ancestors " + strings.Join(ancestors, " "),
	}, "; ")
}

func (h *Handler) serveChart(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Content-Security-Policy", h.chartCSP)
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Cache-Control", "no-cache")
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(h.chart)
}

var (
	themeName  = regexp.MustCompile(`^--[A-Za-z0-9-]{1,64}$`)
	themeValue = regexp.MustCompile(`^[A-Za-z0-9 #%.,()+\-/'"]{1,200}$`)
)

// checkTheme returns what is wrong with a theme, or "".
func checkTheme(vars map[string]string) string {
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		v := vars[k]
		if !themeName.MatchString(k) {
			return fmt.Sprintf(`variable name must be "--" and 1 to 64 letters, digits and dashes, got %q`, k)
		}
		if !themeValue.MatchString(v) || strings.Contains(strings.ToLower(v), "url(") ||
			strings.Count(v, `"`)%2 != 0 || strings.Count(v, "'")%2 != 0 {
			return fmt.Sprintf("value of %s must be 1 to 200 letters, digits, spaces, closed quotes and #%%.,()+-/, without url(), got %q", k, v)
		}
	}
	return ""
}

func themeCSS(vars map[string]string) []byte {
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteString(":root {\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s: %s;\n", k, vars[k])
	}
	b.WriteString("}\n")
	return b.Bytes()
}
