package embedsession

// How to add an option to this package: write a With function that checks
// its argument first and panics with "embedsession: WithX: <what is wrong>,
// got <value>" when it is invalid (options are checked when the With
// function is called, never silently replaced by a default), then returns an
// Option: a func that sets a field of options. Its doc comment states the
// default and the valid range; add a row to TestInvalidOptionsPanic.

import (
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/embedkit/embedkit/internal/telemetry"
)

// Option configures a [Handler] at [NewHandler]; the handler's settings
// are frozen afterwards. Options of other constructors ([ClientOption], the
// middleware's options) have other types and do not compile here. An
// invalid value (see each option) panics when its With function is called,
// with a message naming the option.
type Option func(*options)

type options struct {
	sessionTTL time.Duration
	tokenTTL   time.Duration
	maxTenants int
	log        *slog.Logger
	now        func() time.Time
	cacheTTL   time.Duration
	tp         trace.TracerProvider // see telemetry.go
	mp         metric.MeterProvider
	cacheSize  int
}

// Defaults of the options.
const (
	DefaultSessionTTL = 5 * time.Minute
	DefaultTokenTTL   = 24 * time.Hour
	// DefaultMaxEmbedTenants is the limit of embed tenants per account for
	// accounts that set none (store.Limits.EmbedTenants).
	DefaultMaxEmbedTenants = 1000
)

func newOptions(opts []Option) options {
	o := options{
		sessionTTL: DefaultSessionTTL,
		tokenTTL:   DefaultTokenTTL,
		maxTenants: DefaultMaxEmbedTenants,
		now:        time.Now,
		cacheSize:  DefaultCacheSize,
	}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithSessionTTL sets how long a sessionId stays valid until it is used.
// Default: [DefaultSessionTTL] (5 minutes). d must be positive;
// WithSessionTTL panics otherwise.
func WithSessionTTL(d time.Duration) Option {
	mustPositive("WithSessionTTL", d)
	return func(o *options) { o.sessionTTL = d }
}

// WithTokenTTL sets how long a token obtained at POST
// /api/v1/embed/session/token stays valid. Default: [DefaultTokenTTL]
// (24 hours). d must be positive; WithTokenTTL panics otherwise. The
// embed-session middleware has its own option (middleware.WithTokenTTL) for
// the tokens it mints.
func WithTokenTTL(d time.Duration) Option {
	mustPositive("WithTokenTTL", d)
	return func(o *options) { o.tokenTTL = d }
}

// WithMaxEmbedTenants sets the limit of embed tenants per account for
// accounts whose own limit (store.Account.Limits.EmbedTenants) is zero: a
// generate-session that would create one more embed tenant is 403 and
// changes nothing. Default: [DefaultMaxEmbedTenants] (1,000). n must be
// positive; WithMaxEmbedTenants panics otherwise.
func WithMaxEmbedTenants(n int) Option {
	if n <= 0 {
		panic(fmt.Sprintf("embedsession: WithMaxEmbedTenants: count must be positive, got %d", n))
	}
	return func(o *options) { o.maxTenants = n }
}

// WithLogger sets where server faults (5xx) are logged; client errors are
// not logged, secrets never are, and the value of any ?sessionId= query
// parameter is scrubbed from every line. Default: nothing is logged (leave
// the option out). l must not be nil; WithLogger panics otherwise.
func WithLogger(l *slog.Logger) Option {
	if l == nil {
		panic("embedsession: WithLogger: logger must not be nil, got nil (leave the option out to log nothing)")
	}
	l = telemetry.Logger(l)
	return func(o *options) { o.log = l }
}

// WithClock sets the clock used for expiry and timestamps. Default:
// time.Now. Tests use it to expire sessions without sleeping. now must not
// be nil; WithClock panics otherwise.
func WithClock(now func() time.Time) Option {
	if now == nil {
		panic("embedsession: WithClock: clock must not be nil, got nil")
	}
	return func(o *options) { o.now = now }
}

// WithCacheTTL makes the handler remember resolved API keys (with their
// account), existing deployments and the attribute and group definitions
// that requests name for d, and embed tenants once created (they are never
// deleted). A generate-session then skips the API key read, the embed
// tenant read, and, when it defines nothing and names only known
// definitions, the read of its deployment and definitions ([store.Lookup]).
// Changes to accounts, deployments or definitions in the store are then
// noticed at most d later, except that a definition deleted through this
// handler is forgotten at once: within d, another process's deletion may
// let a request store a value or membership of the deleted definition,
// which reads ignore (definition IDs are never reused). API keys are cached for d or
// middleware.MaxKeyCacheTTL (5 s), whichever is shorter: a key revoked
// through this process is refused at once, one revoked by another process
// within that time. Each cache holds at most [WithCacheSize] entries.
// Default: 0, no cache. d must not be negative; WithCacheTTL panics
// otherwise.
func WithCacheTTL(d time.Duration) Option {
	if d < 0 {
		panic(fmt.Sprintf("embedsession: WithCacheTTL: duration must not be negative, got %v", d))
	}
	return func(o *options) { o.cacheTTL = d }
}

// DefaultCacheSize is how many entries each cache of [WithCacheTTL] holds
// unless [WithCacheSize] says otherwise.
const DefaultCacheSize = 10000

// WithCacheSize bounds each cache of [WithCacheTTL] (API keys, deployments,
// embed tenants, attribute and group definitions) to n entries; beyond it the least recently used entry is
// evicted, so that memory does not grow with the number of embed tenants
// or keys that clients use. Default: [DefaultCacheSize] (10,000). n must be
// positive; WithCacheSize panics otherwise.
func WithCacheSize(n int) Option {
	if n <= 0 {
		panic(fmt.Sprintf("embedsession: WithCacheSize: count must be positive, got %d", n))
	}
	return func(o *options) { o.cacheSize = n }
}

func mustPositive(option string, d time.Duration) {
	if d <= 0 {
		panic(fmt.Sprintf("embedsession: %s: duration must be positive, got %v", option, d))
	}
}
