package middleware

// How to add an option to this package: write a With function that checks
// its argument first and panics with "middleware: WithX: <what is wrong>,
// got <value>" when it is invalid (options are checked when the With
// function is called, never silently replaced by a default), then returns
// apiKeyOption (read by APIKey), sessionOption (Session), keyOption (APIKey
// and APIKeyOrToken) or allOption (every middleware), wrapping a func that
// sets a field of options. Its doc comment states the default and the valid
// range; add a row to TestInvalidOptionsPanic.

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/embedkit/embedkit/internal/lru"
	"github.com/embedkit/embedkit/internal/telemetry"
)

// APIKeyOption configures the [APIKey] middleware. Only this package's
// With functions make one, so an option [APIKey] does not read (a cookie
// option, say) does not compile. An invalid value (see each option) panics
// when its With function is called, with a message naming the option.
type APIKeyOption interface{ applyAPIKey(*options) }

// SessionOption configures the [Session] middleware.
type SessionOption interface{ applySession(*options) }

// APIKeyOrTokenOption configures the [APIKeyOrToken] middleware.
type APIKeyOrTokenOption interface{ applyAPIKeyOrToken(*options) }

// Option is an option read by every middleware of this package:
// [WithLogger] and [WithClock].
type Option interface {
	APIKeyOption
	SessionOption
	APIKeyOrTokenOption
}

// KeyOption is an option read by the two middlewares that accept API keys,
// [APIKey] and [APIKeyOrToken]: [WithKeyCache].
type KeyOption interface {
	APIKeyOption
	APIKeyOrTokenOption
}

type (
	apiKeyOption  func(*options)
	sessionOption func(*options)
	keyOption     func(*options)
	allOption     func(*options)
)

func (f apiKeyOption) applyAPIKey(o *options)     { f(o) }
func (f sessionOption) applySession(o *options)   { f(o) }
func (f keyOption) applyAPIKey(o *options)        { f(o) }
func (f keyOption) applyAPIKeyOrToken(o *options) { f(o) }
func (f allOption) applyAPIKey(o *options)        { f(o) }
func (f allOption) applySession(o *options)       { f(o) }
func (f allOption) applyAPIKeyOrToken(o *options) { f(o) }

type options struct {
	log        *slog.Logger
	now        func() time.Time
	optional   bool
	tokenTTL   time.Duration
	cookieName string
	cookiePath string
	cookieSite http.SameSite
	secure     bool
	partition  bool
	redirect   bool

	keyCacheTTL  time.Duration
	keyCacheSize int
	keys         *lru.Cache[string, cachedKey] // by key hash; see WithKeyCache
}

// DefaultTokenTTL is how long a token obtained for a sessionId stays valid
// unless [WithTokenTTL] says otherwise.
const DefaultTokenTTL = 24 * time.Hour

// DefaultCookieName is the name of the [Session] middleware's cookie unless
// [WithCookieName] says otherwise.
const DefaultCookieName = "embedkit_token"

func defaultOptions() options {
	return options{
		now:        time.Now,
		tokenTTL:   DefaultTokenTTL,
		cookieName: DefaultCookieName,
		cookiePath: "/",
		cookieSite: http.SameSiteLaxMode,

		keyCacheSize: DefaultKeyCacheSize,
	}
}

func apiKeyOptions(opts []APIKeyOption) options {
	o := defaultOptions()
	for _, opt := range opts {
		opt.applyAPIKey(&o)
	}
	o.keys = lru.New[string, cachedKey](o.keyCacheSize)
	return o
}

func sessionOptions(opts []SessionOption) options {
	o := defaultOptions()
	for _, opt := range opts {
		opt.applySession(&o)
	}
	o.keys = lru.New[string, cachedKey](o.keyCacheSize)
	return o
}

func apiKeyOrTokenOptions(opts []APIKeyOrTokenOption) options {
	o := defaultOptions()
	for _, opt := range opts {
		opt.applyAPIKeyOrToken(&o)
	}
	o.keys = lru.New[string, cachedKey](o.keyCacheSize)
	return o
}

// WithLogger sets where server faults (5xx) are logged; the value of any
// ?sessionId= query parameter is scrubbed from every line. Default: nothing
// is logged (leave the option out). l must not be nil; WithLogger panics
// otherwise. Read by every middleware.
func WithLogger(l *slog.Logger) Option {
	if l == nil {
		panic("middleware: WithLogger: logger must not be nil, got nil (leave the option out to log nothing)")
	}
	l = telemetry.Logger(l)
	return allOption(func(o *options) { o.log = l })
}

// WithClock sets the clock used to check expiry (of tokens, and of the
// entries of [WithKeyCache]). Default: time.Now. now must not be nil;
// WithClock panics otherwise. Read by every middleware.
func WithClock(now func() time.Time) Option {
	if now == nil {
		panic("middleware: WithClock: clock must not be nil, got nil")
	}
	return allOption(func(o *options) { o.now = now })
}

// Optional makes [APIKey] pass requests without an Authorization header
// through unauthenticated (no account in the context). A header that is
// present must still hold a valid API key. Default: the key is required.
func Optional() APIKeyOption { return apiKeyOption(func(o *options) { o.optional = true }) }

// WithTokenTTL sets how long a token obtained by exchanging a sessionId
// stays valid. Default: [DefaultTokenTTL] (24 hours). d must be positive;
// WithTokenTTL panics otherwise.
func WithTokenTTL(d time.Duration) SessionOption {
	if d <= 0 {
		panic(fmt.Sprintf("middleware: WithTokenTTL: duration must be positive, got %v", d))
	}
	return sessionOption(func(o *options) { o.tokenTTL = d })
}

// WithCookieName sets the name of the token cookie. Default:
// [DefaultCookieName]. name must be a valid cookie name (a non-empty HTTP
// token: letters, digits and !#$%&'*+-.^_`|~); WithCookieName panics
// otherwise.
func WithCookieName(name string) SessionOption {
	if err := (&http.Cookie{Name: name}).Valid(); err != nil || name == "" {
		panic(fmt.Sprintf("middleware: WithCookieName: invalid cookie name, got %q", name))
	}
	return sessionOption(func(o *options) { o.cookieName = name })
}

// WithCookiePath sets the Path attribute of the token cookie. Default: "/".
// path must start with "/" and hold no ';' or control character;
// WithCookiePath panics otherwise.
func WithCookiePath(path string) SessionOption {
	if !strings.HasPrefix(path, "/") || (&http.Cookie{Name: "n", Path: path}).Valid() != nil {
		panic(fmt.Sprintf("middleware: WithCookiePath: path must start with \"/\" and hold no ';' or control character, got %q", path))
	}
	return sessionOption(func(o *options) { o.cookiePath = path })
}

// WithCookieSameSite sets the SameSite attribute of the token cookie.
// Default: http.SameSiteLaxMode. Embeds inside a cross-site iframe need
// http.SameSiteNoneMode together with [WithSecureCookie] (browsers require
// Secure for SameSite=None). s must be one of http.SameSiteDefaultMode,
// SameSiteLaxMode, SameSiteStrictMode and SameSiteNoneMode;
// WithCookieSameSite panics otherwise.
func WithCookieSameSite(s http.SameSite) SessionOption {
	if s < http.SameSiteDefaultMode || s > http.SameSiteNoneMode {
		panic(fmt.Sprintf("middleware: WithCookieSameSite: not an http.SameSite mode, got %d", s))
	}
	return sessionOption(func(o *options) { o.cookieSite = s })
}

// WithSecureCookie marks the token cookie Secure on every request, for
// servers behind a TLS-terminating proxy. Default: Secure only when the
// request itself came over TLS (r.TLS != nil).
func WithSecureCookie(secure bool) SessionOption {
	return sessionOption(func(o *options) { o.secure = secure })
}

// WithPartitionedCookie marks the token cookie Partitioned (CHIPS): the
// browser keeps it in a jar of the top-level site that embeds the page,
// and sends it in that site's iframe even where third-party cookies are
// blocked; another site embedding the same page gets a jar of its own.
// For a cross-site iframe, with [WithCookieSameSite](http.SameSiteNoneMode)
// and [WithSecureCookie] (browsers ignore a Partitioned cookie that is not
// Secure). Default: not partitioned.
func WithPartitionedCookie(partitioned bool) SessionOption {
	return sessionOption(func(o *options) { o.partition = partitioned })
}

// WithRedirectAfterExchange makes [Session] answer a GET or HEAD request
// whose ?sessionId= it has just exchanged with a 303 redirect to the same URL
// without the sessionId, once the cookie is set, so the used id leaves the
// address bar; the Location is the query alone ("?tab=2"), resolved
// against the URL the browser asked for, so that a prefix stripped before
// [Session] is kept. The token is then
// available only through the cookie. A
// ?sessionId= left unused because a valid cookie won is dropped alike.
// Default: the request is served directly, with [EmbedSession].Token set.
func WithRedirectAfterExchange() SessionOption {
	return sessionOption(func(o *options) { o.redirect = true })
}

// MaxKeyCacheTTL is the longest [WithKeyCache] accepts: a key revoked by
// another process (another replica sharing the database) is refused at most
// this long after its revocation.
const MaxKeyCacheTTL = 5 * time.Second

// WithKeyCache makes [APIKey] and [APIKeyOrToken] remember a resolved API
// key (its account and admin flag) for ttl, saving two store reads per
// request. Only valid keys are cached, at most [WithKeyCacheSize] of them
// (least recently used evicted). A key revoked through this process (the operator package,
// or the bootstrap configuration) is refused at once; a key removed by
// another process, or an account changed, is noticed at most ttl later. The
// cache reads the clock of [WithClock]. Default: 0, no cache. ttl must be
// between 0 and [MaxKeyCacheTTL], so that a revoked key stops working
// within that time on every replica; WithKeyCache panics otherwise.
func WithKeyCache(ttl time.Duration) KeyOption {
	if ttl < 0 || ttl > MaxKeyCacheTTL {
		panic(fmt.Sprintf("middleware: WithKeyCache: ttl must be between 0 and MaxKeyCacheTTL (%v), got %v", MaxKeyCacheTTL, ttl))
	}
	return keyOption(func(o *options) { o.keyCacheTTL = ttl })
}

// DefaultKeyCacheSize is how many keys the cache of [WithKeyCache] holds
// unless [WithKeyCacheSize] says otherwise.
const DefaultKeyCacheSize = 10000

// WithKeyCacheSize bounds the cache of [WithKeyCache] to n keys; beyond it
// the least recently used key is evicted (and resolved from the store at
// its next use). Default: [DefaultKeyCacheSize] (10,000). n must be
// positive; WithKeyCacheSize panics otherwise.
func WithKeyCacheSize(n int) KeyOption {
	if n <= 0 {
		panic(fmt.Sprintf("middleware: WithKeyCacheSize: count must be positive, got %d", n))
	}
	return keyOption(func(o *options) { o.keyCacheSize = n })
}
