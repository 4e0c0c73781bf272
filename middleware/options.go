package middleware

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/embedkit/embedkit/internal/lru"
	"github.com/embedkit/embedkit/internal/telemetry"
)

// Option configures a middleware of this package. Each option says which
// middleware reads it; the others ignore it.
type Option func(*options)

type options struct {
	log        *slog.Logger
	now        func() time.Time
	optional   bool
	tokenTTL   time.Duration
	cookieName string
	cookiePath string
	cookieSite http.SameSite
	secure     bool
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

func newOptions(opts []Option) options {
	o := options{
		now:        time.Now,
		tokenTTL:   DefaultTokenTTL,
		cookieName: DefaultCookieName,
		cookiePath: "/",
		cookieSite: http.SameSiteLaxMode,

		keyCacheSize: DefaultKeyCacheSize,
	}
	for _, opt := range opts {
		opt(&o)
	}
	o.keys = lru.New[string, cachedKey](o.keyCacheSize)
	return o
}

// WithLogger sets where server faults (5xx) are logged; the value of any
// ?sessionId= query parameter is scrubbed from every line. Default: nothing
// is logged. Read by every middleware.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = telemetry.Logger(l) } }

// WithClock sets the clock used to check expiry. Default: time.Now. Read by
// [Session], [APIKeyOrToken], and by the key cache of [WithKeyCache].
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.now = now
		}
	}
}

// Optional makes [APIKey] pass requests without an Authorization header
// through unauthenticated (no account in the context). A header that is
// present must still hold a valid API key. Default: the key is required.
func Optional() Option { return func(o *options) { o.optional = true } }

// WithTokenTTL sets how long a token obtained by exchanging a sessionId
// stays valid. Default: [DefaultTokenTTL] (24 hours). Read by [Session].
func WithTokenTTL(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.tokenTTL = d
		}
	}
}

// WithCookieName sets the name of the token cookie. Default:
// [DefaultCookieName]. Read by [Session].
func WithCookieName(name string) Option {
	return func(o *options) {
		if name != "" {
			o.cookieName = name
		}
	}
}

// WithCookiePath sets the Path attribute of the token cookie. Default: "/".
// Read by [Session].
func WithCookiePath(path string) Option {
	return func(o *options) {
		if path != "" {
			o.cookiePath = path
		}
	}
}

// WithCookieSameSite sets the SameSite attribute of the token cookie.
// Default: http.SameSiteLaxMode. Embeds inside a cross-site iframe need
// http.SameSiteNoneMode together with [WithSecureCookie] (browsers require
// Secure for SameSite=None). Read by [Session].
func WithCookieSameSite(s http.SameSite) Option { return func(o *options) { o.cookieSite = s } }

// WithSecureCookie marks the token cookie Secure on every request, for
// servers behind a TLS-terminating proxy. Default: Secure only when the
// request itself came over TLS (r.TLS != nil). Read by [Session].
func WithSecureCookie(secure bool) Option { return func(o *options) { o.secure = secure } }

// WithRedirectAfterExchange makes [Session] answer a GET or HEAD request
// whose ?sessionId= it has just exchanged with a 303 redirect to the same URL
// without the sessionId, once the cookie is set, so the used id leaves the
// address bar. The token is then available only through the cookie. A
// ?sessionId= left unused because a valid cookie won is dropped alike.
// Default: the request is served directly, with [EmbedSession].Token set.
func WithRedirectAfterExchange() Option { return func(o *options) { o.redirect = true } }

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
// cache reads the clock of [WithClock]. ttl must be between 0 and
// [MaxKeyCacheTTL]; WithKeyCache panics otherwise. Default: 0, no cache.
func WithKeyCache(ttl time.Duration) Option {
	if ttl < 0 || ttl > MaxKeyCacheTTL {
		panic(fmt.Sprintf("middleware.WithKeyCache: ttl %v is outside 0 to MaxKeyCacheTTL (%v): a revoked key must stop working within %v on every replica", ttl, MaxKeyCacheTTL, MaxKeyCacheTTL))
	}
	return func(o *options) { o.keyCacheTTL = ttl }
}

// DefaultKeyCacheSize is how many keys the cache of [WithKeyCache] holds
// unless [WithKeyCacheSize] says otherwise.
const DefaultKeyCacheSize = 10000

// WithKeyCacheSize bounds the cache of [WithKeyCache] to n keys; beyond it
// the least recently used key is evicted (and resolved from the store at
// its next use). Default: [DefaultKeyCacheSize] (10,000). Values ≤ 0 are
// ignored. Read by [APIKey] and [APIKeyOrToken].
func WithKeyCacheSize(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.keyCacheSize = n
		}
	}
}
