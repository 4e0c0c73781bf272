package embedsession

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/embedkit/embedkit/internal/telemetry"
)

// Option configures a [Handler]. Options are applied in order at
// [NewHandler]; the handler's settings are frozen afterwards.
type Option func(*options)

type options struct {
	sessionTTL time.Duration
	tokenTTL   time.Duration
	maxUsers   int
	log        *slog.Logger
	now        func() time.Time
	cacheTTL   time.Duration
	tp         trace.TracerProvider // see telemetry.go
	mp         metric.MeterProvider
	cacheSize  int
}

// Defaults of the options.
const (
	DefaultSessionTTL       = 5 * time.Minute
	DefaultTokenTTL         = 24 * time.Hour
	DefaultMaxExternalUsers = 10000
)

func newOptions(opts []Option) options {
	o := options{
		sessionTTL: DefaultSessionTTL,
		tokenTTL:   DefaultTokenTTL,
		maxUsers:   DefaultMaxExternalUsers,
		now:        time.Now,
		cacheSize:  DefaultCacheSize,
	}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithSessionTTL sets how long a sessionId stays valid until it is used.
// Default: [DefaultSessionTTL] (5 minutes). Values of zero or less keep the
// default.
func WithSessionTTL(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.sessionTTL = d
		}
	}
}

// WithTokenTTL sets how long a token obtained at POST
// /api/v1/embed/session/token stays valid. Default: [DefaultTokenTTL]
// (24 hours). Values of zero or less keep the default. The embed-session
// middleware has its own option (middleware.WithTokenTTL) for the tokens it
// mints.
func WithTokenTTL(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.tokenTTL = d
		}
	}
}

// WithMaxExternalUsers sets the limit of persistent external users per
// account for accounts that set none themselves; an account's own
// MaxExternalUsers, when above zero, takes precedence. Default:
// [DefaultMaxExternalUsers] (10,000). Values of zero or less keep the
// default.
func WithMaxExternalUsers(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.maxUsers = n
		}
	}
}

// WithLogger sets where server faults (5xx) are logged; client errors are
// not logged, secrets never are, and the value of any ?sessionId= query
// parameter is scrubbed from every line. Default: nothing is logged.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = telemetry.Logger(l) } }

// WithClock sets the clock used for expiry and timestamps. Default:
// time.Now. Tests use it to expire sessions without sleeping.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.now = now
		}
	}
}

// WithCacheTTL makes the handler remember resolved API keys (with their
// account) and existing deployments for d, and embed tenants once created
// (they are never deleted), saving up to four store reads per
// generate-session; on SQLite the embed-tenant read leaves the serialized
// write transaction. Changes to accounts or deployments in the store are
// then noticed at most d later. API keys are cached for d or
// middleware.MaxKeyCacheTTL (5 s), whichever is shorter: a key revoked
// through this process is refused at once, one revoked by another process
// within that time. Each cache holds at most [WithCacheSize] entries.
// Default: 0, no cache.
func WithCacheTTL(d time.Duration) Option { return func(o *options) { o.cacheTTL = d } }

// DefaultCacheSize is how many entries each cache of [WithCacheTTL] holds
// unless [WithCacheSize] says otherwise.
const DefaultCacheSize = 10000

// WithCacheSize bounds each cache of [WithCacheTTL] (API keys, deployments,
// embed tenants) to n entries; beyond it the least recently used entry is
// evicted, so that memory does not grow with the number of embed tenants
// or keys that clients use. Default: [DefaultCacheSize] (10,000). Values ≤ 0
// are ignored.
func WithCacheSize(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.cacheSize = n
		}
	}
}
