package gormstore

// An option's With function checks its argument and panics with
// "gormstore: WithX: <what is wrong>, got <value>" when it is invalid; add
// a row to TestInvalidOptionsPanic.

import (
	"fmt"
	"time"
)

// Option configures a [Store] at [OpenDB] (and the DSN conveniences of the
// sqlite and postgres sub-packages). Options apply in order; an invalid
// value panics when its With function is called.
type Option func(*config)

type config struct {
	queryTimeout time.Duration
	maxRetries   int
	closeDB      bool
}

func defaultConfig() config { return config{queryTimeout: 5 * time.Second, maxRetries: 10} }

// WithCloseDB makes [Store.Close] close the pool of the *gorm.DB given to
// [OpenDB], as the DSN conveniences do. Default: it stays open.
func WithCloseDB() Option {
	return func(c *config) { c.closeDB = true }
}

// WithQueryTimeout bounds every statement and transaction attempt: a call
// without a connection, the SQLite write lock or an answer within d is
// [store.ErrUnavailable]. Default: 5 seconds; d must be positive.
func WithQueryTimeout(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("gormstore: WithQueryTimeout: duration must be positive, got %v", d))
	}
	return func(c *config) { c.queryTimeout = d }
}

// WithMaxRetries sets how many times [Store.InTx] retries a transaction
// that failed on SQLite busy, PostgreSQL serialization failure or
// deadlock, backing off from 1 ms to 50 ms within the query timeout.
// Default: 10; zero disables retries; n must not be negative.
func WithMaxRetries(n int) Option {
	if n < 0 {
		panic(fmt.Sprintf("gormstore: WithMaxRetries: count must not be negative, got %d", n))
	}
	return func(c *config) { c.maxRetries = n }
}
