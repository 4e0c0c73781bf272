package chatstream

import (
	"cmp"
	"log/slog"
	"time"

	"github.com/embedkit/embedkit/store"
)

// Defaults of the handler's options.
const (
	// DefaultTurnTimeout is the deadline of a turn unless [WithTurnTimeout]
	// says otherwise (decisions.md §5).
	DefaultTurnTimeout = 5 * time.Minute
	// DefaultEphemeralTTL is the lifetime of a new ephemeral user when the
	// request names none, unless [WithDefaultEphemeralTTL] says otherwise.
	DefaultEphemeralTTL = 7 * 24 * time.Hour
	// DefaultReapInterval is how often a [Reaper] looks for expired
	// ephemeral users unless its constructor is given another interval.
	DefaultReapInterval = time.Minute
	// DefaultReapBatch is how many rows a [Reaper] deletes per statement
	// unless [WithReapBatch] says otherwise.
	DefaultReapBatch = 500
	// DefaultMaxTurnBytes caps the encoded stream of one turn unless
	// [WithMaxTurnBytes] says otherwise.
	DefaultMaxTurnBytes = 64 << 20
	// DefaultMaxRunningTurns is the default of store.Limits.RunningTurns:
	// running turns per account, across replicas.
	DefaultMaxRunningTurns = 200
	// DefaultMaxRunningTurnsPerUser is the default of
	// store.Limits.RunningTurnsPerUser.
	DefaultMaxRunningTurnsPerUser = 3
	// DefaultMaxNewEphemeralUsersPerMinute is the default of
	// store.Limits.NewEphemeralUsersPerMinute.
	DefaultMaxNewEphemeralUsersPerMinute = 600
	// DefaultMaxThreadTurns is the default of store.Limits.ThreadTurns.
	DefaultMaxThreadTurns = 500
	// DefaultMaxThreadBytes is the default of store.Limits.ThreadBytes
	// (4 MiB).
	DefaultMaxThreadBytes = 4 << 20
	// shutdownGrace is how long Shutdown waits for agents to return after
	// cancelling them.
	shutdownGrace = 5 * time.Second
)

// Option configures a [Handler] or a [Reaper]. Each option says which one
// reads it; the other ignores it.
type Option func(*config)

type config struct {
	dev                bool
	turnTimeout        time.Duration
	cancelOnDisconnect bool
	ephemeralTTL       time.Duration
	log                *slog.Logger
	now                func() time.Time
	reapBatch          int
	maxTurnBytes       int
	cluster            Cluster
	keyCacheTTL        time.Duration
	limits             store.Limits // the defaults; every field set
}

func newConfig(opts []Option) config {
	c := config{
		turnTimeout:  DefaultTurnTimeout,
		ephemeralTTL: DefaultEphemeralTTL,
		now:          time.Now,
		reapBatch:    DefaultReapBatch,
		maxTurnBytes: DefaultMaxTurnBytes,
		limits: store.Limits{
			RunningTurns:               DefaultMaxRunningTurns,
			RunningTurnsPerUser:        DefaultMaxRunningTurnsPerUser,
			NewEphemeralUsersPerMinute: DefaultMaxNewEphemeralUsersPerMinute,
			ThreadTurns:                DefaultMaxThreadTurns,
			ThreadBytes:                DefaultMaxThreadBytes,
		},
	}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// WithDevelopment turns development mode on or off: in development mode the
// agent's thinking is streamed (and kept in the history); otherwise it is
// dropped. Default: off. Read by [Handler].
func WithDevelopment(on bool) Option { return func(c *config) { c.dev = on } }

// WithTurnTimeout sets the deadline of every turn, after which the agent's
// context ends and the turn ends with state.error. Default:
// [DefaultTurnTimeout] (5 minutes). Values ≤ 0 are ignored. Read by
// [Handler].
func WithTurnTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.turnTimeout = d
		}
	}
}

// WithCancelOnDisconnect makes a turn end (as if aborted) when the client of
// the request that started it disconnects before the turn is complete.
// Default: false: a turn belongs to the server and runs on to completion;
// its answer is stored and can be rejoined. Read by [Handler].
func WithCancelOnDisconnect(on bool) Option { return func(c *config) { c.cancelOnDisconnect = on } }

// WithDefaultEphemeralTTL sets the lifetime of ephemeral users created by a
// request without sessionSettings.ephemeralTtlSeconds. Default:
// [DefaultEphemeralTTL] (one week). Values ≤ 0 are ignored. Read by
// [Handler].
func WithDefaultEphemeralTTL(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.ephemeralTTL = d
		}
	}
}

// WithLogger sets where server faults (5xx, agent errors, failed stores,
// reaper failures) are logged. Secrets are never logged. Default: nothing is
// logged. Read by [Handler] and [Reaper].
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithClock sets the clock used for user expiry and token checks. Default:
// time.Now. Turn deadlines use the real clock. Read by [Handler] and
// [Reaper].
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.now = now
		}
	}
}

// WithReapBatch sets how many expired rows (users; session ids, tokens and
// counters) a [Reaper] deletes per store call. Default: [DefaultReapBatch]. Values ≤ 0 are ignored. Read by
// [Reaper].
func WithReapBatch(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.reapBatch = n
		}
	}
}

// WithMaxTurnBytes caps the encoded size of one turn's stream (every line
// a rejoining client would replay). Once it is exceeded, the agent's Emitter
// returns [ErrTurnTooLong] and the turn ends like an agent error, with a
// short final message. Default: [DefaultMaxTurnBytes] (64 MiB). Values ≤ 0
// are ignored. Read by [Handler].
func WithMaxTurnBytes(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxTurnBytes = n
		}
	}
}

// WithCluster shares running turns with the other replicas of the server
// that use the same database: a turn runs on one replica at a time per
// thread (input for a thread whose turn runs elsewhere is 409, or 403 for
// another user), a stream without input rejoins a turn running on another
// replica, and an abort received by any replica stops the turn where it
// runs. pgcluster.New returns one for PostgreSQL. The handler does not close
// it: the host closes it after [Handler.Shutdown] returns, so that the
// turns stopped by Shutdown can still release their claims. A request's
// calls to the cluster are bounded by 5 seconds (then 503). Default: nil, a
// single process (what SQLite deployments need). Read by [Handler].
func WithCluster(c Cluster) Option { return func(cfg *config) { cfg.cluster = c } }

// WithKeyCache makes the handler's authentication remember a resolved API
// key (its account and admin flag) for ttl, saving two store reads per
// request (see middleware.WithKeyCache). A key removed, or an account
// changed, in the store is noticed at most ttl later. Default: 0, no cache.
func WithKeyCache(ttl time.Duration) Option { return func(c *config) { c.keyCacheTTL = ttl } }

// WithDefaultLimits sets the limits of accounts whose own limit
// (store.Account.Limits) is zero; a non-zero field of l replaces the
// package default, a zero one keeps it. Defaults: RunningTurns
// [DefaultMaxRunningTurns] (200 per account, across replicas; 429),
// RunningTurnsPerUser [DefaultMaxRunningTurnsPerUser] (3; 429),
// NewEphemeralUsersPerMinute [DefaultMaxNewEphemeralUsersPerMinute] (600;
// 429), ThreadTurns [DefaultMaxThreadTurns] (500; 409) and ThreadBytes
// [DefaultMaxThreadBytes] (4 MiB; 409). A negative value turns a limit
// off. EmbedTenants is not read here: embedsession.WithMaxEmbedTenants
// sets its default. Read by [Handler].
func WithDefaultLimits(l store.Limits) Option {
	return func(c *config) {
		d := &c.limits
		d.RunningTurns = cmp.Or(l.RunningTurns, d.RunningTurns)
		d.RunningTurnsPerUser = cmp.Or(l.RunningTurnsPerUser, d.RunningTurnsPerUser)
		d.NewEphemeralUsersPerMinute = cmp.Or(l.NewEphemeralUsersPerMinute, d.NewEphemeralUsersPerMinute)
		d.ThreadTurns = cmp.Or(l.ThreadTurns, d.ThreadTurns)
		d.ThreadBytes = cmp.Or(l.ThreadBytes, d.ThreadBytes)
	}
}

// limitsOf returns the limits of an account: its own non-zero fields, the
// defaults for the others. A negative field means no limit.
func (c *config) limitsOf(a store.Account) store.Limits {
	own, d := a.Limits, c.limits
	return store.Limits{
		RunningTurns:               cmp.Or(own.RunningTurns, d.RunningTurns),
		RunningTurnsPerUser:        cmp.Or(own.RunningTurnsPerUser, d.RunningTurnsPerUser),
		NewEphemeralUsersPerMinute: cmp.Or(own.NewEphemeralUsersPerMinute, d.NewEphemeralUsersPerMinute),
		ThreadTurns:                cmp.Or(own.ThreadTurns, d.ThreadTurns),
		ThreadBytes:                cmp.Or(own.ThreadBytes, d.ThreadBytes),
	}
}
