package pgcluster

// How to add an option to this package: write a With function that checks
// its argument first and panics with "pgcluster: WithX: <what is wrong>, got
// <value>" when it is invalid (options are checked when the With function is
// called, never silently replaced by a default), then returns an Option: a
// func that sets a field of config. A rule between two options is checked by
// New, which returns an error. Its doc comment states the default and the
// valid range; add a row to TestInvalidOptionsPanic.

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// Defaults of the options.
const (
	// DefaultHeartbeat is how often a replica renews its claims unless
	// [WithHeartbeat] says otherwise.
	DefaultHeartbeat = time.Second
	// DefaultLeaseTimeout is how long a claim outlives its last heartbeat
	// unless [WithLeaseTimeout] says otherwise.
	DefaultLeaseTimeout = 5 * time.Second
	// DefaultPublishInterval is the least time between two writes of
	// published lines unless [WithPublishInterval] says otherwise.
	DefaultPublishInterval = 50 * time.Millisecond
	// DefaultPollInterval is how often abort requests, readers' requests
	// for lines and idle remote turns are polled, as a fallback to
	// notifications, unless [WithPollInterval] says otherwise.
	DefaultPollInterval = 500 * time.Millisecond
	// DefaultRetention is how long the lines of an ended turn stay readable
	// unless [WithRetention] says otherwise.
	DefaultRetention = time.Minute
)

// Option configures a [Cluster] at [New]. An invalid value (see each
// option) panics when its With function is called, with a message naming
// the option.
type Option func(*config)

type config struct {
	replicaID       string
	heartbeat       time.Duration
	lease           time.Duration
	publishInterval time.Duration
	pollInterval    time.Duration
	retention       time.Duration
	listen          bool
	listenPing      time.Duration // idle time before the LISTEN connection is pinged
	log             *slog.Logger
}

func newConfig(opts []Option) config {
	c := config{
		heartbeat:       DefaultHeartbeat,
		lease:           DefaultLeaseTimeout,
		publishInterval: DefaultPublishInterval,
		pollInterval:    DefaultPollInterval,
		retention:       DefaultRetention,
		listen:          true,
		listenPing:      15 * time.Second,
	}
	for _, o := range opts {
		o(&c)
	}
	if c.replicaID == "" {
		c.replicaID = defaultReplicaID()
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c
}

// defaultReplicaID is the host name (when known) and 48 random bits.
func defaultReplicaID() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // never fails (Go 1.24+)
	id := hex.EncodeToString(b[:])
	if h, err := os.Hostname(); err == nil && h != "" {
		if len(h) > 40 {
			h = h[:40]
		}
		id = h + "-" + id
	}
	return id
}

// WithReplicaID names this process in the claims it writes (the owner
// column) and in the application_name of its LISTEN connection. Each
// process must have its own. Default: the host name and a random suffix,
// new at every [New]. id must not be empty; WithReplicaID panics
// otherwise.
func WithReplicaID(id string) Option {
	if id == "" {
		panic(`pgcluster: WithReplicaID: id must not be empty, got ""`)
	}
	return func(c *config) { c.replicaID = id }
}

// WithHeartbeat sets how often the replica renews all of its live claims
// (one UPDATE per heartbeat). Default: [DefaultHeartbeat] (1 s). d must be
// positive; WithHeartbeat panics otherwise. It must also be shorter than the
// lease timeout; [New] returns an error otherwise.
func WithHeartbeat(d time.Duration) Option {
	mustPositive("WithHeartbeat", d)
	return func(c *config) { c.heartbeat = d }
}

// WithLeaseTimeout sets how long after its last heartbeat a claim counts as
// dead (its replica crashed or lost the database): the thread can then run
// a new turn anywhere, and readers of the dead turn end with
// [chatstream.ErrTurnLost]. Use the same value on every replica. Default:
// [DefaultLeaseTimeout] (5 s). d must be positive; it panics
// otherwise.
func WithLeaseTimeout(d time.Duration) Option {
	mustPositive("WithLeaseTimeout", d)
	return func(c *config) { c.lease = d }
}

// WithPublishInterval sets the least time between two writes of published
// lines (one multi-row INSERT for all of the replica's turns whose lines
// a reader asked for), unless a turn ends: its release is written at once,
// with the lines unwritten then. Once the owner learned of the reader (a
// notification, or at worst the poll interval), remote readers see lines
// this much later at most, plus the write. Default:
// [DefaultPublishInterval] (50 ms). d must be positive; it panics
// otherwise.
func WithPublishInterval(d time.Duration) Option {
	mustPositive("WithPublishInterval", d)
	return func(c *config) { c.publishInterval = d }
}

// WithPollInterval sets how often the replica polls the abort requests of
// its turns and the requests for lines of readers on other replicas, and how long a
// remote reader waits for a notification before it reads again: the
// fallback when a notification is lost. Default:
// [DefaultPollInterval] (500 ms). d must be positive; it panics
// otherwise.
func WithPollInterval(d time.Duration) Option {
	mustPositive("WithPollInterval", d)
	return func(c *config) { c.pollInterval = d }
}

// WithRetention sets how long the lines of an ended (or dead) turn stay in
// the database, for readers that joined late. Default: [DefaultRetention]
// (1 minute). d must be positive; it panics
// otherwise.
func WithRetention(d time.Duration) Option {
	mustPositive("WithRetention", d)
	return func(c *config) { c.retention = d }
}

// WithListen turns LISTEN on or off. Off, the replica holds no dedicated
// connection and learns of aborts and new lines by polling alone
// ([WithPollInterval]); use it behind a pooler in transaction mode
// (PgBouncer), which cannot hold a LISTEN. Notifications are sent either
// way. Default: on.
func WithListen(on bool) Option { return func(c *config) { c.listen = on } }

// WithLogger sets where background failures (heartbeats, writes of lines,
// the LISTEN connection) are logged. The DSN is never logged. Default:
// nothing is logged (leave the option out). l must not be nil; WithLogger
// panics otherwise.
func WithLogger(l *slog.Logger) Option {
	if l == nil {
		panic("pgcluster: WithLogger: logger must not be nil, got nil (leave the option out to log nothing)")
	}
	return func(c *config) { c.log = l }
}

func mustPositive(option string, d time.Duration) {
	if d <= 0 {
		panic(fmt.Sprintf("pgcluster: %s: duration must be positive, got %v", option, d))
	}
}
