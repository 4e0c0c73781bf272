package chatstream

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/embedkit/embedkit/middleware"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/embedkit/embedkit/internal/telemetry"
)

// Defaults of the handler's options.
const (
	// DefaultTurnTimeout is the deadline of a turn unless [WithTurnTimeout]
	// says otherwise.
	DefaultTurnTimeout = 5 * time.Minute
	// DefaultEphemeralTTL is the lifetime of a new ephemeral user when the
	// request names none, unless [WithDefaultEphemeralTTL] says otherwise.
	DefaultEphemeralTTL = 7 * 24 * time.Hour
	// DefaultMaxExternalUsers is the limit of persistent external users of
	// an account whose own limit is 0, unless [WithMaxExternalUsers] says
	// otherwise.
	DefaultMaxExternalUsers = 10000
	// DefaultReapInterval is how often a [Reaper] looks for expired
	// ephemeral users unless its constructor is given another interval.
	DefaultReapInterval = time.Minute
	// DefaultReapBatch is how many users a [Reaper] deletes per statement
	// unless [WithReapBatch] says otherwise.
	DefaultReapBatch = 500
	// DefaultMaxTurnBytes caps the encoded stream of one turn unless
	// [WithMaxTurnBytes] says otherwise.
	DefaultMaxTurnBytes = 64 << 20
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
	maxExternalUsers   int
	log                *slog.Logger
	now                func() time.Time
	reapBatch          int
	maxTurnBytes       int
	cluster            Cluster
	keyCacheTTL        time.Duration
	tp                 trace.TracerProvider // see telemetry.go
	mp                 metric.MeterProvider
	streamWriteTimeout time.Duration
	// flushWarning makes the warning about a ResponseWriter that cannot
	// flush a once-per-handler one.
	flushWarning *sync.Once
}

func newConfig(opts []Option) config {
	c := config{
		turnTimeout:      DefaultTurnTimeout,
		ephemeralTTL:     DefaultEphemeralTTL,
		maxExternalUsers: DefaultMaxExternalUsers,
		now:              time.Now,
		reapBatch:        DefaultReapBatch,
		maxTurnBytes:     DefaultMaxTurnBytes,

		streamWriteTimeout: DefaultStreamWriteTimeout,
		flushWarning:       new(sync.Once),
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

// WithMaxExternalUsers sets the limit of persistent external users of
// accounts whose own limit (store.Account.MaxExternalUsers) is 0; an
// account's own positive limit always wins. Ephemeral users do not count.
// Default: [DefaultMaxExternalUsers] (10,000). Values ≤ 0 are ignored. Read
// by [Handler].
func WithMaxExternalUsers(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxExternalUsers = n
		}
	}
}

// WithLogger sets where server faults (5xx, agent errors, failed stores,
// reaper failures) are logged. Secrets are never logged, and the value of
// any ?sessionId= query parameter is scrubbed from every line. Default:
// nothing is logged, except the one warning about a ResponseWriter that
// cannot flush (see [WithStreamWriteTimeout]), which goes to
// slog.Default(). Read by [Handler] and [Reaper].
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = telemetry.Logger(l) } }

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

// WithReapBatch sets how many expired users a [Reaper] deletes per store
// call. Default: [DefaultReapBatch]. Values ≤ 0 are ignored. Read by
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
// request (see middleware.WithKeyCache). The cache holds at most
// middleware.DefaultKeyCacheSize keys (least recently used evicted). A key revoked through this process
// is refused at once; a key removed by another process, or an account
// changed, is noticed at most ttl later. ttl must be between 0 and
// middleware.MaxKeyCacheTTL (5 s); WithKeyCache panics otherwise. Default:
// 0, no cache.
func WithKeyCache(ttl time.Duration) Option {
	if ttl < 0 || ttl > middleware.MaxKeyCacheTTL {
		panic(fmt.Sprintf("chatstream.WithKeyCache: ttl %v is outside 0 to middleware.MaxKeyCacheTTL (%v)", ttl, middleware.MaxKeyCacheTTL))
	}
	return func(c *config) { c.keyCacheTTL = ttl }
}

// DefaultStreamWriteTimeout is how long one line of a stream may take to
// reach a client that does not read before the stream is closed, unless
// [WithStreamWriteTimeout] says otherwise.
const DefaultStreamWriteTimeout = 30 * time.Second

// WithStreamWriteTimeout bounds the write of each stream line (and of each
// 64 KiB of a longer line): a client that reads nothing for d (its
// connection's buffers full) gets its stream closed, so that it holds neither a goroutine nor buffered output; the
// turn itself goes on and is stored, and can be rejoined. Set through
// http.ResponseController.SetWriteDeadline per line and cleared while the
// stream waits for the next line, so it also replaces http.Server's
// WriteTimeout for streams. A ResponseWriter wrapper of the host without
// Unwrap (nor Flush) methods cannot take a deadline or flush: its stream
// still delivers every line (when the wrapper flushes, or when the response
// ends) and the handler logs one warning naming the missing methods.
// Default: [DefaultStreamWriteTimeout] (30 seconds). Values ≤ 0 are
// ignored. Read by [Handler].
func WithStreamWriteTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.streamWriteTimeout = d
		}
	}
}
