package gormstore

// How to add an option to this package: write a With function that checks
// its argument first and panics with "gormstore: WithX: <what is wrong>, got
// <value>" when it is invalid (options are checked when the With function is
// called, never silently replaced by a default), then returns an Option: a
// func that sets a field of config. Its doc comment states the default and
// the valid range; add a row to TestInvalidOptionsPanic.

import (
	"fmt"
	"time"
)

// Option configures a [Store] at [OpenDB] (and at the DSN conveniences of
// store/gormstore/sqlite and store/gormstore/postgres, which call it).
// Options are applied in order; a later option overrides an earlier one. An
// invalid value (see each option) panics when its With function is called,
// with a message naming the option.
type Option func(*config)

type config struct {
	queryTimeout time.Duration
	maxRetries   int
	closeDB      bool
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

// WithQueryTimeout bounds every statement and every transaction attempt: a
// call that cannot get a connection, the SQLite writer or an answer within d
// fails with an error wrapping [store.ErrUnavailable]. Default: 5 seconds. d
// must be positive; WithQueryTimeout panics otherwise.
func WithQueryTimeout(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("gormstore: WithQueryTimeout: duration must be positive, got %v", d))
	}
	return func(c *config) { c.queryTimeout = d }
}

// WithMaxRetries sets how many times [Store.InTx] retries a transaction that
// failed on a transient condition (SQLite busy or locked, PostgreSQL
// serialization failure or deadlock) before it returns the error, which then
// wraps [store.ErrUnavailable]. Retries back off from 1 ms to 50 ms and stop
// when the context ends or the query timeout has passed since the first
// attempt. Default: 10. Zero disables retries; n must not be negative, and
// WithMaxRetries panics otherwise.
func WithMaxRetries(n int) Option {
	if n < 0 {
		panic(fmt.Sprintf("gormstore: WithMaxRetries: count must not be negative, got %d", n))
	}
	return func(c *config) { c.maxRetries = n }
}
