package chatstream

import (
	"context"
	"errors"
	"strconv"
)

// Errors of a [Cluster].
var (
	// ErrTurnElsewhere is wrapped by the error [Cluster.Claim] returns when
	// another process holds a live claim on the thread; the error is a
	// [*TurnElsewhereError] that names the user of the running turn.
	ErrTurnElsewhere = errors.New("chatstream: a turn of this chat is running on another replica")
	// ErrTurnLost is returned by [RemoteTurn.Next] when the process running
	// the turn stopped renewing its claim (it crashed or lost the database)
	// before ending the turn, and by [ClaimedTurn.Release] when the claim was
	// taken over meanwhile. The turn's end is unknown; a stream ends there and
	// the thread's stored state is the truth.
	ErrTurnLost = errors.New("chatstream: the turn's process stopped before ending it")
)

// TurnElsewhereError is the error of a [Cluster.Claim] that found a live
// claim of another process. It wraps [ErrTurnElsewhere]. The handler answers
// 409 when UserID is the caller's user and 403 otherwise.
type TurnElsewhereError struct {
	UserID int64 // the user of the running turn
}

// Error implements error.
func (e *TurnElsewhereError) Error() string {
	return ErrTurnElsewhere.Error() + " (user " + strconv.FormatInt(e.UserID, 10) + ")"
}

// Unwrap returns [ErrTurnElsewhere].
func (e *TurnElsewhereError) Unwrap() error { return ErrTurnElsewhere }

// TurnLimits caps the turns running at once, across every process that
// shares a [Cluster]. A zero field is no limit.
type TurnLimits struct {
	Account int // running turns of the thread's account
	User    int // running turns of the claiming user
}

// ErrTurnLimit is wrapped by the [*TurnLimitError] of a [Cluster.Claim]
// over its [TurnLimits].
var ErrTurnLimit = errors.New("chatstream: running turn limit reached")

// TurnLimitError is the error of a claim over its [TurnLimits]; the handler
// answers 429 with it.
type TurnLimitError struct {
	PerUser bool // the user's limit, not the account's
	Max     int  // the limit that was reached
}

// Error implements error.
func (e *TurnLimitError) Error() string {
	who := "account"
	if e.PerUser {
		who = "user"
	}
	return ErrTurnLimit.Error() + " (" + strconv.Itoa(e.Max) + " per " + who + ")"
}

// Unwrap returns [ErrTurnLimit].
func (e *TurnLimitError) Unwrap() error { return ErrTurnLimit }

// ThreadKey names a thread: threads are keyed by account and chat id.
type ThreadKey struct {
	AccountID int64
	ChatID    string
}

// Line is one encoded line of a turn's log, as a stream writes it.
type Line struct {
	// Sort is the line's sort; a rejoining stream skips lines whose sort is
	// not above its resumeAfterSort.
	Sort int64
	// State marks the __state__ line, which a stream always writes.
	State bool
	// Data is the encoded line, newline included. Whoever receives a Line
	// must not modify Data.
	Data []byte
}

// Cluster shares running turns between the replicas of a server that use
// one database: at most one turn runs per thread across all of them, a
// stream on any replica can rejoin a turn running on another, and an abort
// received by any replica stops the turn where it runs. The handler checks
// its own running turns first and asks the Cluster only about the others.
//
// A Cluster is safe for concurrent use. Its methods' ctx bounds the call
// only; claims and turns outlive it.
type Cluster interface {
	// Claim records that this process runs a new turn of the thread for
	// userID. It succeeds when no claim of the thread is live: none exists,
	// the last one ended, or its process stopped renewing it for longer than
	// the lease (a crash). Otherwise it returns a [*TurnElsewhereError]
	// naming the running turn's user. It also fails, with a
	// [*TurnLimitError], when lim is exceeded: the live claims of the
	// account (of every process), with the agents that still run after
	// their claim was released ([ClaimedTurn.Linger]), number lim.Account
	// already, or those of userID lim.User; a zero field is no limit. A claim whose process
	// stopped renewing it counts no more once its lease ran out. The claim
	// lasts until [ClaimedTurn.Release] and is renewed in the background
	// meanwhile.
	Claim(ctx context.Context, key ThreadKey, userID int64, lim TurnLimits) (ClaimedTurn, error)

	// Join returns the live turn of the thread, whichever process runs it,
	// or ok false when none runs. The returned turn stays readable for a
	// while after it ends, so that a stream that joined late can finish.
	Join(ctx context.Context, key ThreadKey) (turn RemoteTurn, ok bool, err error)

	// Abort asks the process running the thread's turn to abort it; the
	// turn's [ClaimedTurn.AfterAbort] function runs there shortly after. ok is false
	// when no turn of the thread runs (nothing changes then). Abort is
	// idempotent.
	Abort(ctx context.Context, key ThreadKey) (ok bool, err error)
}

// ClaimedTurn is a turn this process runs, as seen by the [Cluster]. Its
// methods are safe for concurrent use.
type ClaimedTurn interface {
	// Publish shares log, the turn's log so far: each call's log holds the
	// previous call's lines, unchanged, and more after them. It never waits
	// for the database: the lines are shared with readers in batches for
	// all of the process's turns (pgcluster writes a turn's lines only once
	// a reader asked for them with [RemoteTurn.Next], then at most once per
	// publish interval, and at once when the turn ends). The Cluster keeps
	// log; callers must not modify its lines. Publish after Release does
	// nothing.
	Publish(log []Line)

	// AfterAbort arranges for f to run once, on a goroutine of its own,
	// when the turn must stop: another process (or this one) called
	// [Cluster.Abort] for the thread, or the claim was taken over after
	// its lease expired; at once when that already happened. Release never
	// runs it. stop deregisters f, as with [context.AfterFunc]: it reports
	// whether it stopped f from being run. Waiting costs no goroutine, so
	// a running turn keeps one goroutine, its agent's.
	AfterAbort(f func()) (stop func() bool)

	// Linger is called before Release for a turn that ends (aborted,
	// timed out) while its agent still runs: the Cluster goes on counting
	// the turn among the user's and the account's running turns, for
	// [Cluster.Claim]'s limits on every process, from the moment Release
	// frees its thread until returned is called (the agent returned) or
	// this process stops renewing it for longer than the lease (a crash,
	// or the Cluster closed). returned may be called more than once, and
	// before Release.
	Linger() (returned func())

	// Release publishes final (the turn's last lines, __state__ included,
	// after the published log), waits until every line a reader asked for
	// is written, marks the turn ended (its readers see done) and drops the
	// claim, so that the thread can run its next turn on any replica. Call
	// it after storing the turn's answer: a reader that asks for the lines
	// only after the end is told to serve what is stored. It retries
	// failed writes until ctx ends: give ctx a deadline. Renewal stops
	// whatever Release returns: on error the Cluster may still end the
	// turn later, or its claim expires after the lease. It returns an
	// error wrapping
	// [ErrTurnLost] when the claim was taken over meanwhile. Calls after the
	// first return nil and do nothing.
	Release(ctx context.Context, final []Line) error
}

// RemoteTurn is a turn read from the shared log, usually one running on
// another replica. It holds no goroutine and needs no closing. Its methods
// are safe for concurrent use.
type RemoteTurn interface {
	// UserID returns the user of the turn; a stream of another user is 403.
	UserID() int64

	// Next returns the turn's lines from index from on (0 for the first
	// line; then the count read so far), waiting until at least one exists,
	// the turn ended, or ctx ends. Its first call asks the turn's process
	// for the lines, the first included. done is true once the turn ended
	// and lines holds its last ones: there is nothing after them. A turn
	// that ended with no line read (it never started, or it ended before
	// its lines were asked for) has its answer stored: serve the thread's
	// stored state instead. When the turn's process stopped before ending it, Next
	// returns the lines it can and an error wrapping [ErrTurnLost]. Next
	// returns ctx's error when ctx ends first.
	Next(ctx context.Context, from int) (lines []Line, done bool, err error)

	// Wait waits until the turn ended, or its process stopped before
	// ending it, or ctx ends (it returns ctx's error then). Unlike Next it
	// does not ask for the turn's lines.
	Wait(ctx context.Context) error
}
