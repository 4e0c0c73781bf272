package gormstore

import "time"

// Option configures a [Store] at [OpenDB]. Options are applied in
// order; a later option overrides an earlier one.
type Option func(*config)

type config struct {
	queryTimeout time.Duration
	maxRetries   int
	closeDB      bool
	noPipelining bool
}

func defaultConfig() config {
	return config{
		queryTimeout: 5 * time.Second,
		maxRetries:   10,
	}
}

// WithCloseDB makes [Store.Close] close the connection pool of the
// *gorm.DB given to [OpenDB] too. The DSN conveniences
// (github.com/embedkit/embedkit/store/gormstore/sqlite and .../postgres) set
// it, since the store owns the handle they open. Default: Close leaves the
// host's handle open.
func WithCloseDB() Option {
	return func(c *config) { c.closeDB = true }
}

// WithoutPipelining makes PostgreSQL transactions run every statement
// through GORM's callback chain, as everything else does, instead of
// pipelining them on the pgx connection (see the package documentation):
// for a host whose tracing or metrics plugins hook GORM's callbacks and
// must see every statement. It costs generate-session about 18% of its
// throughput. Default: pipelining on, when the driver is pgx.
func WithoutPipelining() Option {
	return func(c *config) { c.noPipelining = true }
}

// WithQueryTimeout bounds every statement and every transaction attempt: a
// call that cannot get a connection, the SQLite writer or an answer within d
// fails with an error wrapping [store.ErrUnavailable]. SQLite waits up to d/2
// (at most 2.5 s) for another process's write lock. A d of zero or less keeps
// the default of 5 seconds.
func WithQueryTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.queryTimeout = d
		}
	}
}

// WithMaxRetries sets how many times [Store.InTx] retries a transaction that
// failed on a transient condition (SQLite busy or locked, PostgreSQL
// serialization failure or deadlock) before it returns the error, which then
// wraps [store.ErrUnavailable]. Retries back off from 1 ms to 50 ms and stop
// when the context ends or the query timeout has passed since the first
// attempt. A negative n keeps the default of 10; zero disables retries.
func WithMaxRetries(n int) Option {
	return func(c *config) {
		if n >= 0 {
			c.maxRetries = n
		}
	}
}
