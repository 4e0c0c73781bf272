package chatstream

// How to add an option to this package: write a With function that checks
// its argument first and panics with "chatstream: WithX: <what is wrong>,
// got <value>" when it is invalid (options are checked when the With
// function is called, never silently replaced by a default), then returns
// handlerOption (read by NewHandler), reaperOption (NewReaper) or
// sharedOption (both), wrapping a func that sets a field of config. Its doc
// comment states the default and the valid range; add a row to
// TestInvalidOptionsPanic.

import (
	"cmp"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/embedkit/embedkit/internal/nilarg"
	"github.com/embedkit/embedkit/internal/telemetry"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store"
)

// Defaults of the handler's options.
const (
	// DefaultTurnTimeout is the deadline of a turn unless [WithTurnTimeout]
	// says otherwise.
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
	// DefaultDataRowLimit caps the rows of one data query unless
	// [WithDataRowLimit] says otherwise.
	DefaultDataRowLimit = 100_000
	// DefaultDataTimeout bounds one data query unless [WithDataTimeout]
	// says otherwise.
	DefaultDataTimeout = 30 * time.Second
	// shutdownGrace is how long Shutdown waits for agents to return after
	// cancelling them.
	shutdownGrace = 5 * time.Second
)

// Option configures a [Handler] at [NewHandler]. Only this package's With
// functions make one, so an option that the handler does not read (one of
// [ReaperOption] alone) does not compile. An invalid value (see each
// option) panics when its With function is called, so a misconfigured
// server fails at start-up with a message naming the option.
type Option interface{ applyHandler(*config) }

// ReaperOption configures a [Reaper] at [NewReaper].
type ReaperOption interface{ applyReaper(*config) }

// SharedOption is an option read by both [NewHandler] and [NewReaper]:
// [WithLogger] and [WithClock].
type SharedOption interface {
	Option
	ReaperOption
}

type (
	handlerOption func(*config)
	reaperOption  func(*config)
	sharedOption  func(*config)
)

func (f handlerOption) applyHandler(c *config) { f(c) }
func (f reaperOption) applyReaper(c *config)   { f(c) }
func (f sharedOption) applyHandler(c *config)  { f(c) }
func (f sharedOption) applyReaper(c *config)   { f(c) }

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
	tp                 trace.TracerProvider // see telemetry.go
	mp                 metric.MeterProvider
	streamWriteTimeout time.Duration
	limits             store.Limits // the defaults; every field set
	dataRowLimit       int
	dataTimeout        time.Duration
	// flushWarning makes the warning about a ResponseWriter that cannot
	// flush a once-per-handler one.
	flushWarning *sync.Once
}

func defaultConfig() config {
	return config{
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

		dataRowLimit:       DefaultDataRowLimit,
		dataTimeout:        DefaultDataTimeout,
		streamWriteTimeout: DefaultStreamWriteTimeout,
		flushWarning:       new(sync.Once),
	}
}

func newConfig(opts []Option) config {
	c := defaultConfig()
	for _, o := range opts {
		o.applyHandler(&c)
	}
	return c
}

func newReaperConfig(opts []ReaperOption) config {
	c := defaultConfig()
	for _, o := range opts {
		o.applyReaper(&c)
	}
	return c
}

// mustPositive panics with the message of an invalid option when d ≤ 0.
func mustPositive[T time.Duration | int](option string, v T) {
	if v <= 0 {
		what := "count"
		if _, ok := any(v).(time.Duration); ok {
			what = "duration"
		}
		panic(fmt.Sprintf("chatstream: %s: %s must be positive, got %v", option, what, v))
	}
}

// WithDevelopment turns development mode on or off: in development mode the
// agent's thinking is streamed (and kept in the history); otherwise it is
// dropped. Default: off.
func WithDevelopment(on bool) Option { return handlerOption(func(c *config) { c.dev = on }) }

// WithTurnTimeout sets the deadline of every turn, after which the agent's
// context ends and the turn ends with state.error. Default:
// [DefaultTurnTimeout] (5 minutes). d must be positive; WithTurnTimeout
// panics otherwise.
func WithTurnTimeout(d time.Duration) Option {
	mustPositive("WithTurnTimeout", d)
	return handlerOption(func(c *config) { c.turnTimeout = d })
}

// WithCancelOnDisconnect makes a turn end (as if aborted) when the client of
// the request that started it disconnects before the turn is complete.
// Default: false: a turn belongs to the server and runs on to completion;
// its answer is stored and can be rejoined.
func WithCancelOnDisconnect(on bool) Option {
	return handlerOption(func(c *config) { c.cancelOnDisconnect = on })
}

// WithDefaultEphemeralTTL sets the lifetime of ephemeral users created by a
// request without sessionSettings.ephemeralTtlSeconds. Default:
// [DefaultEphemeralTTL] (one week). d must be positive;
// WithDefaultEphemeralTTL panics otherwise.
func WithDefaultEphemeralTTL(d time.Duration) Option {
	mustPositive("WithDefaultEphemeralTTL", d)
	return handlerOption(func(c *config) { c.ephemeralTTL = d })
}

// WithLogger sets where server faults (5xx, agent errors, failed stores,
// reaper failures) are logged. Secrets are never logged, and the value of
// any ?sessionId= query parameter is scrubbed from every line. Default:
// nothing is logged (leave the option out), except the one warning about a
// ResponseWriter that cannot flush (see [WithStreamWriteTimeout]), which
// goes to slog.Default(). l must not be nil; WithLogger panics otherwise.
// Read by [NewHandler] and [NewReaper].
func WithLogger(l *slog.Logger) SharedOption {
	if l == nil {
		panic("chatstream: WithLogger: logger must not be nil, got nil (leave the option out to log nothing)")
	}
	l = telemetry.Logger(l)
	return sharedOption(func(c *config) { c.log = l })
}

// WithClock sets the clock used for user expiry and token checks. Default:
// time.Now. Turn deadlines use the real clock. now must not be nil;
// WithClock panics otherwise. Read by [NewHandler] and [NewReaper].
func WithClock(now func() time.Time) SharedOption {
	if now == nil {
		panic("chatstream: WithClock: clock must not be nil, got nil")
	}
	return sharedOption(func(c *config) { c.now = now })
}

// WithReapBatch sets how many expired rows (users; session ids, tokens and
// quota counters) a [Reaper] deletes per store call. Default:
// [DefaultReapBatch] (500). n must be positive; WithReapBatch panics
// otherwise.
func WithReapBatch(n int) ReaperOption {
	mustPositive("WithReapBatch", n)
	return reaperOption(func(c *config) { c.reapBatch = n })
}

// WithMaxTurnBytes caps the encoded size of one turn's stream (every line
// a rejoining client would replay). An event that would take the stream
// past it (a content piece, a thought, a tool call's input or result) is
// refused: the agent's Emitter returns [ErrTurnTooLong] and the turn ends
// like an agent error, with a short final message. Default: [DefaultMaxTurnBytes] (64 MiB). n must be
// positive; WithMaxTurnBytes panics otherwise.
func WithMaxTurnBytes(n int) Option {
	mustPositive("WithMaxTurnBytes", n)
	return handlerOption(func(c *config) { c.maxTurnBytes = n })
}

// WithCluster shares running turns with the other replicas of the server
// that use the same database: a turn runs on one replica at a time per
// thread (input for a thread whose turn runs elsewhere is 409, or 403 for
// another user), a stream without input rejoins a turn running on another
// replica, and an abort received by any replica stops the turn where it
// runs. pgcluster.New returns one for PostgreSQL. The handler does not close
// it: the host closes it after [Handler.Shutdown] returns, so that the
// turns stopped by Shutdown can still release their claims. A request's
// calls to the cluster are bounded by 5 seconds (then 503). Default: no
// cluster, a single process (what SQLite deployments need; leave the option
// out). cl must not be nil, nor a nil *pgcluster.Cluster (an ignored error
// of pgcluster.New); WithCluster panics otherwise.
func WithCluster(cl Cluster) Option {
	if cl == nil {
		panic("chatstream: WithCluster: cluster must not be nil, got nil (leave the option out for a single process)")
	}
	nilarg.Check("chatstream: WithCluster", "cluster", cl)
	return handlerOption(func(c *config) { c.cluster = cl })
}

// WithKeyCache makes the handler's authentication remember a resolved API
// key (its account and admin flag) for ttl, saving two store reads per
// request (see middleware.WithKeyCache). The cache holds at most
// middleware.DefaultKeyCacheSize keys (least recently used evicted). A key
// revoked through this process is refused at once; a key removed by another process, or an account
// changed, is noticed at most ttl later. The handler also remembers, for
// ttl and as many of each, the agents it serves and the attribute and
// group definitions that sessionSettings name, saving a store read each:
// an agent removed, or a definition deleted, elsewhere (another handler
// or process, the operator) may still be used for up to ttl (a stored
// value of a deleted definition is ignored by every read, as definition
// IDs are never reused). Default: 0, no cache. ttl must be
// between 0 and middleware.MaxKeyCacheTTL (5 s); WithKeyCache panics
// otherwise.
func WithKeyCache(ttl time.Duration) Option {
	if ttl < 0 || ttl > middleware.MaxKeyCacheTTL {
		panic(fmt.Sprintf("chatstream: WithKeyCache: ttl must be between 0 and middleware.MaxKeyCacheTTL (%v), got %v", middleware.MaxKeyCacheTTL, ttl))
	}
	return handlerOption(func(c *config) { c.keyCacheTTL = ttl })
}

// DefaultStreamWriteTimeout is how long one line of a stream may take to
// reach a client that does not read before the stream is closed, unless
// [WithStreamWriteTimeout] says otherwise.
const DefaultStreamWriteTimeout = 30 * time.Second

// WithStreamWriteTimeout bounds the write of each stream line (and of each
// 64 KiB of a longer line): a client that reads nothing for d (its
// connection's buffers full) gets its stream closed, so that it holds
// neither a goroutine nor buffered output; the turn itself goes on and is stored, and can be rejoined. Set through
// http.ResponseController.SetWriteDeadline per line and cleared while the
// stream waits for the next line, so it also replaces http.Server's
// WriteTimeout for streams. A ResponseWriter wrapper of the host without
// Unwrap (nor Flush) methods cannot take a deadline or flush: its stream
// still delivers every line (when the wrapper flushes, or when the response
// ends) and the handler logs one warning naming the missing methods.
// Default: [DefaultStreamWriteTimeout] (30 seconds). d must be positive;
// WithStreamWriteTimeout panics otherwise.
func WithStreamWriteTimeout(d time.Duration) Option {
	mustPositive("WithStreamWriteTimeout", d)
	return handlerOption(func(c *config) { c.streamWriteTimeout = d })
}

// WithDefaultLimits sets the limits of accounts whose own limit
// (store.Account.Limits) is zero; a non-zero field of l replaces the
// package default, a zero one keeps it. Defaults: RunningTurns
// [DefaultMaxRunningTurns] (200 per account, across replicas; 429),
// RunningTurnsPerUser [DefaultMaxRunningTurnsPerUser] (3; 429),
// NewEphemeralUsersPerMinute [DefaultMaxNewEphemeralUsersPerMinute] (600;
// 429), ThreadTurns [DefaultMaxThreadTurns] (500; 409) and ThreadBytes
// [DefaultMaxThreadBytes] (4 MiB; 409). A negative value turns a limit
// off, so every value is valid. EmbedTenants is not read here:
// embedsession.WithMaxEmbedTenants sets its default.
func WithDefaultLimits(l store.Limits) Option {
	return handlerOption(func(c *config) {
		d := &c.limits
		d.RunningTurns = cmp.Or(l.RunningTurns, d.RunningTurns)
		d.RunningTurnsPerUser = cmp.Or(l.RunningTurnsPerUser, d.RunningTurnsPerUser)
		d.NewEphemeralUsersPerMinute = cmp.Or(l.NewEphemeralUsersPerMinute, d.NewEphemeralUsersPerMinute)
		d.ThreadTurns = cmp.Or(l.ThreadTurns, d.ThreadTurns)
		d.ThreadBytes = cmp.Or(l.ThreadBytes, d.ThreadBytes)
	})
}

// WithDataRowLimit caps the rows that one request of the data query API
// (POST .../agents/{agentId}/sql) returns: past n rows the result ends
// with "truncated": true (the Embedkit-Truncated trailer in CSV). Default:
// [DefaultDataRowLimit] (100,000). n must be positive; WithDataRowLimit
// panics otherwise.
func WithDataRowLimit(n int) Option {
	mustPositive("WithDataRowLimit", n)
	return handlerOption(func(c *config) { c.dataRowLimit = n })
}

// WithDataTimeout bounds one request of the data query API: the query and
// the streaming of its rows. A query that fails to produce its first row
// in time is a 400; one that runs out of time later ends its stream with
// an error. Default: [DefaultDataTimeout] (30 seconds). d must be
// positive; WithDataTimeout panics otherwise.
func WithDataTimeout(d time.Duration) Option {
	mustPositive("WithDataTimeout", d)
	return handlerOption(func(c *config) { c.dataTimeout = d })
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
