package chatpage

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/embedkit/embedkit/middleware"
)

// Option configures [New].
type Option func(*options)

type options struct {
	path           string
	title          string
	frameAncestors []string
	theme          map[string]string
	imgSrc         []string
	vegaCDN        string
	vegaDir        string
	chatBase       string
	sessionOpts    []middleware.SessionOption
	log            *slog.Logger
	err            error
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

func (o *options) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}

// WithPath sets the path of the page; its other endpoints are under it.
// Default: /embed/chat ([DefaultPath]).
func WithPath(p string) Option {
	return func(o *options) {
		if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "{}?#* ") {
			o.fail(fmt.Errorf("chatpage: path %q: want an absolute path without wildcards", p))
			return
		}
		o.path = strings.TrimRight(p, "/")
	}
}

// WithTitle sets the page's title and heading. Default: "Chat".
func WithTitle(t string) Option { return func(o *options) { o.title = t } }

// WithFrameAncestors sets who may frame the page (the CSP frame-ancestors
// sources, for example "https://app.example.com"). Default: "'self'"
// (the page's own origin only). "'none'" forbids framing.
func WithFrameAncestors(sources ...string) Option {
	return func(o *options) {
		for _, s := range sources {
			if s == "" || strings.ContainsAny(s, "; ,\t\r\n") {
				o.fail(fmt.Errorf("chatpage: frame ancestor %q is not a CSP source", s))
				return
			}
		}
		if len(sources) == 0 {
			sources = []string{"'none'"}
		}
		o.frameAncestors = sources
	}
}

// WithTheme sets CSS custom properties on the page's root, for example
// {"--ek-accent": "#0f766e", "--ek-font": "Georgia, serif"}; the page's
// style sheet reads --ek-bg, --ek-fg, --ek-muted, --ek-surface,
// --ek-border, --ek-accent, --ek-accent-fg, --ek-danger, --ek-radius and
// --ek-font. Names are --letters-digits-dashes; values are letters,
// digits, spaces, quotes (closed) and #%.,()+-/, without url(). Default:
// none (the built-in light theme).
func WithTheme(vars map[string]string) Option {
	return func(o *options) {
		if err := checkTheme(vars); err != nil {
			o.fail(err)
			return
		}
		o.theme = vars
	}
}

// WithImageSources adds CSP img-src sources for the users' avatars (for
// example "https://avatars.example.com"). Default: none, so only
// same-origin and data: pictures load; any other falls back to initials.
func WithImageSources(sources ...string) Option {
	return func(o *options) {
		for _, s := range sources {
			if s == "" || strings.ContainsAny(s, "; ,\t\r\n") {
				o.fail(fmt.Errorf("chatpage: image source %q is not a CSP source", s))
				return
			}
		}
		o.imgSrc = append(o.imgSrc, sources...)
	}
}

// WithVegaCDN sets the URL prefix the chart libraries load from, as
// prefix + "vega@6.4.0/build/vega.min.js" (an npm CDN layout). The page
// keeps the integrity of the pinned files, so the prefix must serve them
// unchanged. Default: https://cdn.jsdelivr.net/npm/ ([DefaultVegaCDN]).
func WithVegaCDN(prefix string) Option {
	return func(o *options) {
		if !strings.HasPrefix(prefix, "https://") && !strings.HasPrefix(prefix, "http://") {
			o.fail(fmt.Errorf("chatpage: vega CDN %q: want an http(s) URL prefix", prefix))
			return
		}
		o.vegaCDN = normalizePrefix(prefix)
	}
}

// WithVegaDir serves the chart libraries from a node_modules folder that
// holds the pinned npm packages (vega 6.4.0, vega-lite 6.5.0, vega-embed
// 7.3.0, vega-interpreter 2.3.2) instead of loading them from the CDN:
// the page then fetches nothing from another origin. [New] reads the four
// build files once and fails if one is missing or not the pinned version.
// Default: "" (the CDN).
func WithVegaDir(dir string) Option { return func(o *options) { o.vegaDir = dir } }

// WithChatBaseURL sets where the chat and session-token endpoints are
// when they are not at the root of the page's own origin: another origin
// (for example "https://api.example.com"), which is added to the CSP
// connect-src, or a path prefix on the page's origin where the host
// mounted the APIs (for example "/analytics"). Default: "" (same origin,
// no prefix).
func WithChatBaseURL(base string) Option {
	return func(o *options) {
		if base != "" && !strings.HasPrefix(base, "https://") && !strings.HasPrefix(base, "http://") &&
			(!strings.HasPrefix(base, "/") || strings.HasPrefix(base, "//") || strings.ContainsAny(base, "?#{}* ")) {
			o.fail(fmt.Errorf("chatpage: chat base URL %q: want an http(s) origin or an absolute path prefix", base))
			return
		}
		o.chatBase = strings.TrimRight(base, "/")
	}
}

// WithSessionOptions passes options to the [middleware.Session] in front
// of the user endpoint (for example middleware.WithClock or
// middleware.WithLogger). Default: none.
func WithSessionOptions(opts ...middleware.SessionOption) Option {
	return func(o *options) { o.sessionOpts = append(o.sessionOpts, opts...) }
}

// WithLogger sets the logger for server errors. Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }
