package chatpage

// How to add an option to this package: write a With function that checks
// its argument first and panics with "chatpage: WithX: <what is wrong>,
// got <value>" when it is invalid (options are checked when the With
// function is called, never silently replaced by a default), then returns
// an Option setting a field of options. Its doc comment states the default
// and the valid range; add a row to TestInvalidOptionsPanic.

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/embedkit/embedkit/middleware"
)

// Option configures [New]. An invalid value (see each option) panics when
// its With function is called, so a misconfigured page fails at start-up
// with a message naming the option.
type Option func(*options)

type options struct {
	path           string
	title          string
	frameAncestors []string
	theme          map[string]string
	imgSrc         []string
	vegaCDN        string
	vega           *Vega
	chatBase       string
	sessionOpts    []middleware.SessionOption
	log            *slog.Logger
}

func defaultOptions() options {
	return options{
		path:           DefaultPath,
		title:          "Chat",
		frameAncestors: []string{"'self'"},
		vegaCDN:        DefaultVegaCDN,
		log:            slog.Default(),
	}
}

// WithPath sets the path of the page; its other endpoints are under it.
// Default: /embed/chat ([DefaultPath]). p must start with "/" and hold no
// wildcard, query, fragment or space ({ } ? # * or " "); WithPath panics
// otherwise. A trailing "/" is dropped.
func WithPath(p string) Option {
	if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "{}?#* ") {
		panic(fmt.Sprintf(`chatpage: WithPath: path must start with "/" and hold no wildcard, query, fragment or space, got %q`, p))
	}
	p = strings.TrimRight(p, "/")
	return func(o *options) { o.path = p }
}

// WithTitle sets the page's title and heading. Default: "Chat". Any text
// is valid (it is escaped).
func WithTitle(t string) Option { return func(o *options) { o.title = t } }

// checkSources panics unless every source is a CSP source.
func checkSources(option string, sources []string) {
	for _, s := range sources {
		if s == "" || strings.ContainsAny(s, "; ,\t\r\n") {
			panic(fmt.Sprintf("chatpage: %s: source must be one CSP source (not empty, no ';', ',' or white space), got %q", option, s))
		}
	}
}

// WithFrameAncestors sets who may frame the page (the CSP frame-ancestors
// sources, for example "https://app.example.com"). Default: "'self'"
// (the page's own origin only): a host on another origin must be named,
// and a page requested as a cross-site frame without one logs a warning
// (once per handler). No source, or "'none'", forbids framing.
// Each source must be one CSP source: not empty, without ';', ',' or white
// space; WithFrameAncestors panics otherwise.
func WithFrameAncestors(sources ...string) Option {
	checkSources("WithFrameAncestors", sources)
	sources = slices.Clone(sources)
	if len(sources) == 0 {
		sources = []string{"'none'"}
	}
	return func(o *options) { o.frameAncestors = sources }
}

// WithTheme sets CSS custom properties on the page's root, for example
// {"--ek-accent": "#0f766e", "--ek-font": "Georgia, serif"}; the page's
// style sheet reads --ek-bg, --ek-fg, --ek-muted, --ek-surface,
// --ek-border, --ek-accent, --ek-accent-fg, --ek-danger, --ek-radius and
// --ek-font. Default: none (the built-in light theme). Names must be "--"
// and 1 to 64 letters, digits and dashes; values 1 to 200 letters,
// digits, spaces, closed quotes and #%.,()+-/, without url(); WithTheme
// panics otherwise. The map is copied.
func WithTheme(vars map[string]string) Option {
	if msg := checkTheme(vars); msg != "" {
		panic("chatpage: WithTheme: " + msg)
	}
	vars = maps.Clone(vars)
	return func(o *options) { o.theme = vars }
}

// WithImageSources adds CSP img-src sources for the users' avatars (for
// example "https://avatars.example.com"). Default: none, so only
// same-origin and data: pictures load; any other falls back to initials.
// Each source must be one CSP source: not empty, without ';', ',' or white
// space; WithImageSources panics otherwise.
func WithImageSources(sources ...string) Option {
	checkSources("WithImageSources", sources)
	sources = slices.Clone(sources)
	return func(o *options) { o.imgSrc = append(o.imgSrc, sources...) }
}

// WithVegaCDN sets the URL prefix the chart libraries load from, as
// prefix + "vega@6.4.0/build/vega.min.js" (an npm CDN layout). The page
// keeps the integrity of the pinned files, so the prefix must serve them
// unchanged. Default: https://cdn.jsdelivr.net/npm/ ([DefaultVegaCDN]).
// prefix must start with "https://" or "http://"; WithVegaCDN panics
// otherwise. [WithVega] takes precedence.
func WithVegaCDN(prefix string) Option {
	if !strings.HasPrefix(prefix, "https://") && !strings.HasPrefix(prefix, "http://") {
		panic(fmt.Sprintf("chatpage: WithVegaCDN: prefix must be an http(s) URL prefix, got %q", prefix))
	}
	prefix = normalizePrefix(prefix)
	return func(o *options) { o.vegaCDN = prefix }
}

// WithVega serves the chart libraries that [LoadVega] read from a
// node_modules folder instead of loading them from the CDN: the page then
// fetches nothing from another origin. Default: the CDN (leave the option
// out; see [WithVegaCDN]). v must come from LoadVega; WithVega panics on
// nil or an empty Vega.
func WithVega(v *Vega) Option {
	if v == nil {
		panic("chatpage: WithVega: vega must not be nil, got nil (leave the option out for the CDN)")
	}
	if len(v.files) == 0 {
		panic("chatpage: WithVega: vega must come from LoadVega, got an empty Vega")
	}
	return func(o *options) { o.vega = v }
}

// WithChatBaseURL sets where the chat and session-token endpoints are
// when they are not at the root of the page's own origin: another origin
// (for example "https://api.example.com"), which is added to the CSP
// connect-src, or a path prefix on the page's origin where the host
// mounted the APIs (for example "/analytics"). Default: "" (same origin,
// no prefix). base must be "", start with "https://" or "http://", or be
// an absolute path (one leading "/") without ? # { } * or space;
// WithChatBaseURL panics otherwise. A trailing "/" is dropped.
func WithChatBaseURL(base string) Option {
	if base != "" && !strings.HasPrefix(base, "https://") && !strings.HasPrefix(base, "http://") &&
		(!strings.HasPrefix(base, "/") || strings.HasPrefix(base, "//") || strings.ContainsAny(base, "?#{}* ")) {
		panic(fmt.Sprintf("chatpage: WithChatBaseURL: base must be an http(s) origin or an absolute path prefix, got %q", base))
	}
	base = strings.TrimRight(base, "/")
	return func(o *options) { o.chatBase = base }
}

// WithSessionOptions passes options to the [middleware.Session] in front
// of the user endpoint (for example middleware.WithClock or
// middleware.WithLogger). Default: none. No option may be nil;
// WithSessionOptions panics otherwise.
func WithSessionOptions(opts ...middleware.SessionOption) Option {
	for i, so := range opts {
		if so == nil {
			panic(fmt.Sprintf("chatpage: WithSessionOptions: options must not be nil, got nil at index %d", i))
		}
	}
	opts = slices.Clone(opts)
	return func(o *options) { o.sessionOpts = append(o.sessionOpts, opts...) }
}

// WithLogger sets the logger for server errors and for the warning about
// a cross-site frame that [WithFrameAncestors] does not allow. Default:
// slog.Default().
// l must not be nil; WithLogger panics otherwise.
func WithLogger(l *slog.Logger) Option {
	if l == nil {
		panic("chatpage: WithLogger: logger must not be nil, got nil (leave the option out for slog.Default())")
	}
	return func(o *options) { o.log = l }
}
