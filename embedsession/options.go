package embedsession

import (
	"log/slog"
	"time"
)

// Option configures a [Handler]. Options are applied in order at
// [NewHandler]; the handler's settings are frozen afterwards.
type Option func(*options)

type options struct {
	sessionTTL time.Duration
	tokenTTL   time.Duration
	maxTenants int
	log        *slog.Logger
	now        func() time.Time
	cacheTTL   time.Duration
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

// WithMaxEmbedTenants sets the limit of embed tenants per account for
// accounts whose own limit (store.Account.Limits.EmbedTenants) is zero: a
// generate-session that would create one more embed tenant is 403 and
// changes nothing. Default: [DefaultMaxEmbedTenants] (1,000). Values of zero
// or less keep the default.
func WithMaxEmbedTenants(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.maxTenants = n
		}
	}
}

// WithLogger sets where server faults (5xx) are logged; client errors are
// not logged, and secrets never are. Default: nothing is logged.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

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
// write transaction. Changes to keys, accounts or deployments in the store
// are then noticed at most d later. Default: 0, no cache.
func WithCacheTTL(d time.Duration) Option { return func(o *options) { o.cacheTTL = d } }
