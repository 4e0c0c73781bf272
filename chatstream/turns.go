package chatstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/embedkit/embedkit/internal/wire"
	"github.com/embedkit/embedkit/store"
)

// Causes of a turn's cancellation, told apart with context.Cause.
var (
	errAborted      = errors.New("chatstream: turn aborted")
	errDisconnected = errors.New("chatstream: client disconnected")
	errShutdown     = errors.New("chatstream: handler shut down")
	errDeadline     = errors.New("chatstream: turn deadline exceeded")
)

var (
	errTurnRunning  = wire.Errorf(http.StatusConflict, "a turn of this chat is running: wait for it to end or abort it")
	errNotOwner     = wire.Errorf(http.StatusForbidden, "the chat belongs to another user")
	errShuttingDown = wire.Errorf(http.StatusServiceUnavailable, "the server is shutting down")
)

// clusterUnavailable is the 503 of a failed [Cluster] call; the cause is
// logged, never sent. A call canceled with its request (the client went
// away) is not a failure of the cluster: it stays a cancellation, which is
// answered 499 to nobody and not logged.
func clusterUnavailable(err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	return &wire.Error{Status: http.StatusServiceUnavailable, Message: "the chat service is temporarily unavailable", Err: err}
}

const (
	// persistTimeout bounds a transaction of the persister (a turn's final
	// messages with other writes), and the release of a turn's claim.
	persistTimeout = 10 * time.Second
	// releaseQuick bounds the release of a claim after a failure (the
	// store failed, or the request did before its turn started), so that
	// an unreachable database does not hold the answer: the claim expires
	// after its lease anyway.
	releaseQuick = time.Second
	// clusterTimeout bounds a request's Claim, Join and Abort, so that an
	// unreachable database is a prompt 503, never a hang.
	clusterTimeout = 5 * time.Second
)

type turnKey struct {
	accountID int64
	chatID    string
}

// registry owns the running turns, at most one per thread, and every
// goroutine that runs one.
type registry struct {
	log     *slog.Logger
	cluster Cluster // nil: a single process
	// persist stores the turns' checkpoints and final messages; clock
	// paces the checkpoints.
	persist *persister
	clock   checkpointClock

	// halt ends when a shutdown has ended this process's turns: streams
	// following a turn of another replica end then.
	halt    context.Context
	haltNow context.CancelFunc

	mu    sync.Mutex
	turns map[turnKey]*turn
	// Turns reserved or running per account and per user: the limits of a
	// single process (a Cluster counts across replicas instead).
	perAccount map[int64]int
	perUser    map[int64]int
	// Turns that ended (aborted, timed out) while their agent still runs,
	// per account and per user: they free their thread but still count
	// against the limits until the agent returns, since it may still be
	// working (a query that ignores its context). A Cluster does not see
	// them: they count here, on top of its count.
	lingerAccount map[int64]int
	lingerUser    map[int64]int
	active        int           // turn goroutines and detached streams running
	idle          chan struct{} // closed and cleared when a turn ends; nil when nobody waits
	closing       bool          // no new turns
	stopped       bool          // turns are cancelled as they start
	// drained: a shutdown found nothing running and returned; no stream
	// is detached any more (enterStream).
	drained bool
	// streams are the detached streams (see "Detaching a stream").
	streams map[*lineWriter]struct{}
	// cutAt is when the detached streams' writes give up once a shutdown
	// stopped the turns (zero before).
	cutAt time.Time
}

func newRegistry(log *slog.Logger, cluster Cluster, st store.Store) *registry {
	halt, haltNow := context.WithCancel(context.Background())
	r := &registry{log: log, cluster: cluster, persist: newPersister(st), halt: halt, haltNow: haltNow, turns: make(map[turnKey]*turn),
		perAccount: make(map[int64]int), perUser: make(map[int64]int),
		lingerAccount: make(map[int64]int), lingerUser: make(map[int64]int)}
	r.clock.reg = r
	return r
}

// reserve claims the thread key for a new turn of userID: in this process,
// then in the cluster, if any. A thread with a turn already reserved or
// running, here or on another replica, is 409 for its user and 403 for
// anyone else (404 when the turn here is another agent's; open checks a
// turn of another replica); a closing registry is 503, and so is a failed cluster. More
// running turns than lim allows (counted here, or by the cluster across
// replicas) is 429. ctx bounds the cluster's claim, which runs without the
// registry's lock.
func (r *registry) reserve(ctx context.Context, key turnKey, userID int64, externalID, agentID string, maxSize int, lim TurnLimits) (*turn, error) {
	r.mu.Lock()
	if r.closing {
		r.mu.Unlock()
		return nil, errShuttingDown
	}
	if t, ok := r.turns[key]; ok {
		r.mu.Unlock()
		switch {
		case t.agentID != agentID:
			return nil, errChatGone // a thread of another agent, running or not
		case t.userID != userID:
			return nil, errNotOwner
		}
		return nil, errTurnRunning
	}
	// The turns of this process the cluster does not count: those whose
	// agent outlived the turn.
	user, account := r.lingerUser[userID], r.lingerAccount[key.accountID]
	if r.cluster == nil {
		user += r.perUser[userID]
		account += r.perAccount[key.accountID]
	}
	switch {
	case lim.User > 0 && user >= lim.User:
		r.mu.Unlock()
		return nil, turnLimitError(&TurnLimitError{PerUser: true, Max: lim.User})
	case lim.Account > 0 && account >= lim.Account:
		r.mu.Unlock()
		return nil, turnLimitError(&TurnLimitError{Max: lim.Account})
	}
	t := &turn{reg: r, key: key, userID: userID, externalID: externalID, agentID: agentID, maxSize: maxSize, done: make(chan struct{})}
	r.addLocked(t)
	r.mu.Unlock()
	if err := r.claim(ctx, t, lim, user, account); err != nil {
		return nil, err
	}
	return t, nil
}

// claim claims t's thread in the cluster, if any, for t's user; lingering
// are this process's turns of the user and account that the cluster does
// not count. A refused claim drops t.
func (r *registry) claim(ctx context.Context, t *turn, lim TurnLimits, lingerUser, lingerAccount int) error {
	if r.cluster == nil {
		return nil
	}
	// The cluster counts the live claims; the lingering agents of this
	// process take their share of the limits.
	clim := lim
	if clim.User > 0 {
		clim.User -= lingerUser
	}
	if clim.Account > 0 {
		clim.Account -= lingerAccount
	}
	cctx, cancel := context.WithTimeout(ctx, clusterTimeout)
	claim, err := r.cluster.Claim(cctx, ThreadKey{AccountID: t.key.accountID, ChatID: t.key.chatID}, t.userID, clim)
	cancel()
	if err != nil {
		r.drop(t)
		if e, ok := errors.AsType[*TurnLimitError](err); ok {
			e.Max = lim.User // the limit, not what remained of it here
			if !e.PerUser {
				e.Max = lim.Account
			}
			return turnLimitError(e)
		}
		if e, ok := errors.AsType[*TurnElsewhereError](err); ok {
			if e.UserID != t.userID {
				return errNotOwner
			}
			return errTurnRunning
		}
		return clusterUnavailable(err)
	}
	r.mu.Lock()
	t.claim = claim
	r.mu.Unlock()
	return nil
}

// rebind gives t, reserved and not started, to userID: the opening's
// transaction ran again and created its user under another id. t stays
// reserved, so an abort that marked it still aborts it as it starts; the
// cluster's claim is made again for userID (a refused one drops t).
func (r *registry) rebind(ctx context.Context, t *turn, userID int64, lim TurnLimits) error {
	r.mu.Lock()
	if r.cluster == nil && lim.User > 0 && r.lingerUser[userID]+r.perUser[userID] >= lim.User {
		r.mu.Unlock()
		r.drop(t) // the user the transaction found has its turns already
		return turnLimitError(&TurnLimitError{PerUser: true, Max: lim.User})
	}
	decr(r.perUser, t.userID)
	t.userID = userID
	r.perUser[userID]++
	old := t.claim
	t.claim = nil
	lingerUser, lingerAccount := r.lingerUser[userID], r.lingerAccount[t.key.accountID]
	r.mu.Unlock()
	if old != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseQuick)
		if err := old.Release(rctx, nil); err != nil {
			r.logReleaseFailure(rctx, t, err)
		}
		cancel()
	}
	return r.claim(ctx, t, lim, lingerUser, lingerAccount)
}

// count returns how many turns are reserved or running.
func (r *registry) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.turns)
}

// isClosing reports whether the registry takes no new turns.
func (r *registry) isClosing() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closing
}

// addLocked registers t and counts it.
func (r *registry) addLocked(t *turn) {
	r.turns[t.key] = t
	r.perAccount[t.key.accountID]++
	r.perUser[t.userID]++
}

// deleteLocked unregisters t, which is registered, and uncounts it.
func (r *registry) deleteLocked(t *turn) {
	delete(r.turns, t.key)
	decr(r.perAccount, t.key.accountID)
	decr(r.perUser, t.userID)
}

func decr(m map[int64]int, k int64) {
	if m[k] <= 1 {
		delete(m, k)
	} else {
		m[k]--
	}
}

// turnRetryAfter is the Retry-After of a 429 for too many running turns.
const turnRetryAfter = time.Second

// turnLimitError is the 429 of a reservation over its limits.
func turnLimitError(e *TurnLimitError) error {
	if e.PerUser {
		return wire.Limited("runningTurnsPerUser", wire.TooMany(turnRetryAfter, "running turn limit of %d per user reached: wait for a turn to end", e.Max))
	}
	return wire.Limited("runningTurns", wire.TooMany(turnRetryAfter, "running turn limit of %d reached for this account: try again later", e.Max))
}

// release drops a reservation whose turn never started, and its claim.
func (r *registry) release(ctx context.Context, t *turn) {
	r.mu.Lock()
	claim, started := t.claim, t.started
	r.mu.Unlock()
	if claim != nil && !started {
		// The claim goes first, so that the thread is free everywhere once
		// it is free here.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseQuick)
		if err := claim.Release(ctx, nil); err != nil {
			r.logReleaseFailure(ctx, t, err)
		}
		cancel()
	}
	r.drop(t)
}

// drop removes a reservation whose turn never started.
func (r *registry) drop(t *turn) {
	r.mu.Lock()
	if r.turns[t.key] == t && !t.started {
		r.deleteLocked(t)
		r.wakeLocked()
		close(t.done) // an abort waiting for the thread to be free
	}
	r.mu.Unlock()
}

func (r *registry) logReleaseFailure(ctx context.Context, t *turn, err error) {
	if r.log != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "chat turn not released from the cluster in time; it is ended later or its claim expires after the lease",
			slog.String("chatId", t.key.chatID), slog.String("error", err.Error()))
	}
}

// followContext returns a context for a stream following a turn of another
// replica: it ends with parent, or once a shutdown has ended this process's
// turns.
func (r *registry) followContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	stop := context.AfterFunc(r.halt, func() { cancel(errShutdown) })
	return ctx, func() { stop(); cancel(context.Canceled) }
}

// abort finds the turn of key to abort when it is o's and this process
// holds the thread: a started one, which the caller stops, or one still
// opening, which is marked to be aborted as it starts; the thread is free
// again once its done is closed (the turn aborted and stored, or the
// opening refused). held reports whether this process holds the thread,
// for o or for another user: the caller's checks came before, and between
// them and this the caller's opening may have been refused and another
// user's have reserved the chat id, which is not aborted.
func (r *registry) abort(key turnKey, o turnOwner) (t *turn, started, held bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t = r.turns[key]
	if t == nil || !o.owns(t) {
		return nil, false, t != nil
	}
	if !t.started {
		t.abortAtStart = true
	}
	return t, t.started, true
}

// turnOwner is the user and agent whose turn an abort may stop: a stored
// user, or a new one that the first turn of a new chat creates as it
// opens, known by its external id.
type turnOwner struct {
	userID     int64
	externalID string
	agentID    string
}

// owns reports whether t is o's.
func (o turnOwner) owns(t *turn) bool {
	if t.agentID != o.agentID {
		return false
	}
	if o.userID != 0 {
		return t.userID == o.userID
	}
	return o.externalID != "" && t.externalID == o.externalID
}

// hasStarted reports whether t started; once t.done is closed, false
// means its opening was refused.
func (r *registry) hasStarted(t *turn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return t.started
}

// opening reports whether the turn of key is reserved for o and not
// started yet.
func (r *registry) opening(key turnKey, o turnOwner) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.turns[key]
	return t != nil && !t.started && o.owns(t)
}

// running returns the started turn of key, if any.
func (r *registry) running(key turnKey) (*turn, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.turns[key]
	if !ok || !t.started {
		return nil, false
	}
	return t, true
}

// remove unregisters a finished turn: its thread is free. While its agent
// still runs, the turn goes on counting against the limits.
func (r *registry) remove(t *turn) {
	r.mu.Lock()
	if r.turns[t.key] == t {
		r.deleteLocked(t)
		if t.agentRunning {
			t.lingering = true
			r.lingerAccount[t.key.accountID]++
			r.lingerUser[t.userID]++
		}
		r.wakeLocked()
	}
	r.mu.Unlock()
}

// agentReturned records that t's agent returned: a finished turn stops
// counting against the limits.
func (r *registry) agentReturned(t *turn) {
	r.mu.Lock()
	t.agentRunning = false
	if t.lingering {
		t.lingering = false
		decr(r.lingerAccount, t.key.accountID)
		decr(r.lingerUser, t.userID)
	}
	r.mu.Unlock()
}

// enterStream counts a stream about to be detached among what shutdown
// waits for; it reports false when a shutdown already found nothing
// running and returned (the stream then stays on the request's goroutine,
// which the HTTP server's shutdown waits for). The caller calls
// leaveStream when the stream ends.
func (r *registry) enterStream() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.drained {
		return false
	}
	r.active++
	return true
}

// trackStream records lw, just detached: a shutdown that stops the turns
// bounds its writes.
func (r *registry) trackStream(lw *lineWriter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.streams == nil {
		r.streams = make(map[*lineWriter]struct{})
	}
	r.streams[lw] = struct{}{}
	if !r.cutAt.IsZero() {
		lw.cut(r.cutAt)
	}
}

// leaveStream records the end of a stream counted by enterStream.
func (r *registry) leaveStream(lw *lineWriter) {
	r.mu.Lock()
	delete(r.streams, lw)
	r.mu.Unlock()
	r.ended()
}

// ended records the end of a turn goroutine or a detached stream.
func (r *registry) ended() {
	r.mu.Lock()
	r.active--
	r.wakeLocked()
	r.mu.Unlock()
}

func (r *registry) wakeLocked() {
	if r.idle != nil {
		close(r.idle)
		r.idle = nil
	}
}

// waitIdle waits until no turn is reserved or running, or ctx ends.
func (r *registry) waitIdle(ctx context.Context) bool {
	for {
		r.mu.Lock()
		if r.active == 0 && len(r.turns) == 0 {
			r.drained = r.closing
			r.mu.Unlock()
			return true
		}
		if r.idle == nil {
			r.idle = make(chan struct{})
		}
		ch := r.idle
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// started returns the started turns.
func (r *registry) startedTurns() []*turn {
	r.mu.Lock()
	defer r.mu.Unlock()
	ts := make([]*turn, 0, len(r.turns))
	for _, t := range r.turns {
		if t.started {
			ts = append(ts, t)
		}
	}
	return ts
}

// shutdown stops new turns and waits for running ones until ctx ends; then
// it cancels the rest and waits for their agents to return, at most grace
// longer.
func (r *registry) shutdown(ctx context.Context, grace time.Duration) error {
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	// Streams of other replicas' turns end once this process's turns have.
	defer r.haltNow()
	if r.waitIdle(ctx) {
		return nil
	}
	r.mu.Lock()
	r.stopped = true
	// A detached stream whose client reads nothing would hold its write
	// for the stream write timeout: its writes give up halfway through
	// the grace, so that a reading client still gets the last lines.
	r.cutAt = time.Now().Add(grace / 2)
	for lw := range r.streams {
		lw.cut(r.cutAt)
	}
	r.mu.Unlock()
	// All at once: each turn finishes on its own goroutine
	// (finishOnCancel), so that final writes waiting on a slow database
	// overlap and grace bounds them all.
	for _, t := range r.startedTurns() {
		t.cancel(errShutdown)
	}
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	if r.waitIdle(gctx) {
		return nil
	}
	return fmt.Errorf("chatstream: turns or their streams did not end after shutdown: %w", ctx.Err())
}

// turn is one running turn: its context, its sequence and its append-only
// log of encoded lines, which any number of streams read.
type turn struct {
	reg     *registry
	key     turnKey
	userID  int64
	agentID string
	// externalID is the request's external user id (""), by which an
	// abort finds the opening of a user not committed yet.
	externalID string
	started    bool // guarded by reg.mu
	// abortAtStart: an abort came while the turn opened; it is aborted as
	// it starts. Guarded by reg.mu.
	abortAtStart bool
	// agentRunning: the agent has not returned; lingering: the turn is
	// finished and unregistered but counted in reg.linger* until it does.
	// Both guarded by reg.mu.
	agentRunning, lingering bool

	ctx    context.Context
	cancel context.CancelCauseFunc

	// claim is the turn's claim in the cluster (nil without one). It is
	// set by reserve before the turn starts and read-only afterwards.
	claim ClaimedTurn
	// unwatch deregisters the claim's abort function (nil without one).
	// Guarded by mu.
	unwatch func() bool

	mu  sync.Mutex
	seq *sequence
	// reserved is the thread's stored sort high-water mark: every line
	// that reaches a client has a lower sort, so that after a crash the
	// next turn starts above whatever a client saw. Lines at or above it
	// wait in lines, unpublished, until a checkpoint raises it.
	reserved int64
	ckptNext int64 // seq.next at the last checkpoint
	// ckptDue: the turn waits for the clock's next tick; ckptQueued: the
	// persister holds it for a checkpoint; ckptEarly: a checkpoint asked
	// for ahead of the clock has not ended yet.
	ckptDue, ckptQueued, ckptEarly bool
	ckptWriting                    chan struct{} // closed when the checkpoint being written is stored or failed
	lines                          []Line
	pub                            int             // lines[:pub] are published: below reserved
	size                           int             // bytes in lines
	maxSize                        int             // cap on size for agent events
	tooLong                        bool            // the agent hit maxSize
	closed                         bool            // the log is complete
	waiters                        []chan struct{} // one per follower (capacity 1): signaled on append
	finishing                      bool            // no more agent events
	done                           chan struct{}   // closed once finished (stored, log closed), or the reservation dropped
}

// appendLocked encodes m into the log.
func (t *turn) appendLocked(m Message) {
	t.addLocked(encodeMessage(&m))
}

// emitLocked appends an agent's line: it is due at the next checkpoint.
func (t *turn) emitLocked(m Message) {
	t.appendLocked(m)
	t.dirtyLocked()
}

// encodeMessage encodes m as a line of a turn's log.
func encodeMessage(m *Message) Line {
	return Line{Sort: m.Sort, State: m.ID == StateID, Data: encodeLine(m)}
}

// addLocked appends an encoded line to the log and publishes it when its
// sort is below the reserved mark's final slots.
func (t *turn) addLocked(l Line) {
	t.size += len(l.Data)
	t.lines = append(t.lines, l)
	t.publishLocked()
}

// publishLocked publishes the lines below the reserved mark's final slots
// (see finalSlots) that are not yet: to the cluster (which never waits) and to the readers, whom it
// wakes. Lines are in sort order, so the published ones are a prefix.
func (t *turn) publishLocked() {
	n := t.pub
	for n < len(t.lines) && t.lines[n].Sort < t.reserved-finalSlots {
		n++
	}
	if n == t.pub {
		return
	}
	if t.claim != nil {
		t.claim.Publish(t.lines[:n:n])
	}
	t.pub = n
	for _, w := range t.waiters {
		select {
		case w <- struct{}{}:
		default: // already signaled
		}
	}
}

// begin starts the turn: it registers it as running, logs the user echo and
// the assistant start, and runs the agent on a goroutine owned by the
// registry. user, when not nil, reads the turn's user (info.User) on that
// goroutine before the agent answers.
func (t *turn) begin(base context.Context, timeout time.Duration, agent instrumented, info *Turn, user userReader, echo, start Message) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(base))
	ctx, cancelDeadline := context.WithDeadlineCause(ctx, time.Now().Add(timeout), errDeadline)
	t.ctx = ctx
	t.cancel = func(cause error) { cancel(cause); cancelDeadline() }

	t.mu.Lock()
	if t.claim != nil {
		// An abort received by another replica (or a claim taken over)
		// stops the turn here.
		t.unwatch = t.claim.AfterAbort(func() { t.stop(errAborted, outcomeAborted) })
	}
	t.appendLocked(echo)
	t.appendLocked(start)
	// The echo is stored; an answer that is still empty needs no
	// checkpoint.
	t.ckptNext = t.seq.next
	t.mu.Unlock()

	r := t.reg
	r.mu.Lock()
	t.started = true
	t.agentRunning = true
	r.active++ // the agent's goroutine below
	var cause error
	switch {
	case r.stopped:
		cause = errShutdown
	case t.abortAtStart:
		cause = errAborted
	}
	r.mu.Unlock()

	go t.run(agent, info, user, cause)
}

// run is the turn's goroutine: it runs the agent, then ends the turn. The
// agent's goroutine lives as long as the turn, and the runtime shrinks a
// parked goroutine's stack only to four times what it uses: the frames
// under the agent (run, runAgent, instrumented.answer) stay small, and
// what runs before and after the agent is in functions of their own.
func (t *turn) run(agent instrumented, info *Turn, user userReader, stopped error) {
	defer t.reg.ended()
	defer t.cancel(nil)
	stop := context.AfterFunc(t.ctx, t.finishOnCancel)
	if stopped != nil { // a shutdown, or an abort, while it opened
		t.cancel(stopped)
	}
	err := runAgent(t.ctx, agent, info, user, &emitter{t: t})
	t.agentDone(err, stop)
}

// finishOnCancel finishes the turn once its context ends.
func (t *turn) finishOnCancel() { t.finish(causeOutcome(context.Cause(t.ctx))) }

// agentDone ends the turn once its agent returned err; stop undoes
// finishOnCancel.
func (t *turn) agentDone(err error, stop func() bool) {
	r, ctx := t.reg, t.ctx
	r.agentReturned(t)
	stop()
	t.mu.Lock()
	tooLong := t.tooLong
	t.mu.Unlock()
	if tooLong && err == nil {
		err = ErrTurnTooLong
	}
	o := outcomeDone
	switch {
	case ctx.Err() != nil:
		o = causeOutcome(context.Cause(ctx))
	case err != nil:
		o = outcomeError
		if r.log != nil {
			r.log.LogAttrs(ctx, slog.LevelError, "chat agent failed",
				slog.String("chatId", t.key.chatID), slog.String("error", err.Error()))
		}
	}
	t.finish(o)
}

// runAgent calls the agent, turning a panic into an error so that one bad
// turn cannot take the server down.
func runAgent(ctx context.Context, agent instrumented, info *Turn, user userReader, e Emitter) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("chatstream: agent panicked: %v", p)
		}
	}()
	return agent.answer(ctx, info, user, e)
}

func causeOutcome(cause error) outcome {
	switch {
	case errors.Is(cause, errAborted), errors.Is(cause, errDisconnected):
		return outcomeAborted
	case errors.Is(cause, errShutdown):
		return outcomeShutdown
	default:
		return outcomeTimeout
	}
}

// stop cancels the turn with cause and finishes it; it returns once the
// turn's final messages are stored and its log is complete.
func (t *turn) stop(cause error, o outcome) {
	t.cancel(cause)
	t.finish(o)
}

// finish ends the turn once: it completes the in-process messages, stores
// them, releases the turn's claim with its last lines, removes the turn from
// the registry and closes the log. Later calls wait for the first to
// complete.
func (t *turn) finish(o outcome) {
	t.mu.Lock()
	if t.finishing {
		t.mu.Unlock()
		<-t.done
		return
	}
	t.finishing = true
	if t.unwatch != nil {
		t.unwatch()
	}
	lines, msgs, lastSort := t.seq.finish(o, t.reserved)
	if lastSort <= t.reserved {
		lastSort = 0 // stored already (t.reserved rises only once stored): the thread's row is not written
	}
	writing := t.ckptWriting
	t.mu.Unlock()
	// No checkpoint of the turn is taken from here on; one being written
	// is stored before the final messages.
	if writing != nil {
		<-writing
	}
	err := t.reg.persist.final(threadWrite{ctx: t.ctx, accountID: t.key.accountID, chatID: t.key.chatID, lastSort: lastSort, msgs: msgs})
	if err != nil {
		if t.reg.log != nil {
			t.reg.log.LogAttrs(t.ctx, slog.LevelError, "chat turn not stored",
				slog.String("chatId", t.key.chatID), slog.String("error", err.Error()))
		}
		st := lines[len(lines)-1].State
		if st.Error == "" {
			st.Error = errStoreFailed
		}
		// Nothing above the stored mark reaches a client: the next turn
		// continues above it.
		t.mu.Lock()
		if lines[len(lines)-1].Sort > t.reserved {
			// The lines waiting in the log are left out, but the end of
			// a tool call whose start was streamed: the first completed
			// tool call among them (one that comes later started after
			// it, so its start waits too).
			if t.pub < len(t.lines) {
				held := t.lines[t.pub].Sort
				for _, m := range t.seq.done {
					if m.Sort >= held && m.Sort < lines[0].Sort && m.ToolCall != nil {
						lines = append([]Message{m}, lines...)
						break
					}
				}
				t.lines = t.lines[:t.pub]
			}
			withinMark(lines, t.reserved)
		}
		t.mu.Unlock()
	}
	final := make([]Line, len(lines))
	for i := range lines {
		final[i] = encodeMessage(&lines[i])
	}
	// What the readers here get, the cluster's get: the lines still
	// waiting in the log and the last ones.
	t.mu.Lock()
	last := append(slices.Clone(t.lines[t.pub:]), final...)
	t.mu.Unlock()
	// Release and remove before the log closes, so that a client that has
	// read __state__ can start the next turn at once, on any replica.
	if t.claim != nil {
		timeout := persistTimeout
		if err != nil {
			timeout = releaseQuick
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), timeout)
		if err := t.claim.Release(rctx, last); err != nil {
			t.reg.logReleaseFailure(rctx, t, err)
		}
		cancel()
	}
	t.reg.remove(t)

	t.mu.Lock()
	t.reserved = math.MaxInt64 // the whole log is stored
	for _, l := range final {
		t.addLocked(l)
	}
	t.publishLocked() // when final is empty
	t.closed = true
	t.mu.Unlock()
	close(t.done)
}

// finalSlots is how many sorts below the reserved mark no streamed line
// takes: a turn's last lines (the end of a tool call whose start was
// streamed, an open tool call's end and the final message; __state__
// takes the mark itself) fit there when its final write fails, so that
// they stay within what the store covers.
const finalSlots = 3

// withinMark renumbers the last lines of a turn whose final write failed
// and went above mark, the thread's stored last sort (where the next turn
// continues): they take the last sorts up to mark, above every line
// streamed (those stay below mark-finalSlots), and the history in
// __state__ follows (a completed message whose line was left out sorts
// with the first of them).
func withinMark(lines []Message, mark int64) {
	first := mark - int64(len(lines)) + 1
	moved := make(map[string]int64, len(lines))
	for i := range lines {
		lines[i].Sort = first + int64(i)
		moved[lines[i].ID] = lines[i].Sort
	}
	hist := lines[len(lines)-1].State.Messages
	for i := range hist {
		if s, ok := moved[hist[i].ID]; ok {
			hist[i].Sort = s
		} else {
			hist[i].Sort = min(hist[i].Sort, first)
		}
	}
	slices.SortStableFunc(hist, func(a, b Message) int { return cmp.Compare(a.Sort, b.Sort) })
}

// follow writes the turn's log to lw, the lines so far and then the live
// ones, skipping lines whose sort is not above after (but never __state__,
// so that every stream ends with one), until the log is
// complete or the client goes away. It reports whether the whole log was
// written.
func (t *turn) follow(ctx context.Context, lw *lineWriter, after int64) bool {
	// One wake-up channel for the whole stream, not one per line.
	wake := make(chan struct{}, 1)
	t.mu.Lock()
	t.waiters = append(t.waiters, wake)
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.waiters = slices.DeleteFunc(t.waiters, func(w chan struct{}) bool { return w == wake })
		t.mu.Unlock()
	}()
	pos := 0
	for {
		t.mu.Lock()
		batch := t.lines[pos:t.pub:t.pub]
		closed := t.closed
		t.mu.Unlock()

		if len(batch) > 0 {
			for _, l := range batch {
				if (l.Sort > after || l.State) && !lw.write(l.Data) {
					return false
				}
			}
			if !lw.flush() {
				return false
			}
			pos += len(batch)
			continue
		}
		if closed {
			return true
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return false
		}
	}
}

// emitter is the [Emitter] of a turn.
type emitter struct{ t *turn }

// lineOverhead bounds what a line adds to the text it carries: its id,
// role, flags, sort and field names.
const lineOverhead = 512

// encodedLen is the length of s as a JSON string's contents: what its
// escapes add (a control character takes six bytes, an invalid byte the
// six of \ufffd) counts, so that a check before encoding holds.
func encodedLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
			n += 2
		case c < 0x20:
			n += 6
		case c < utf8.RuneSelf:
			n++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			switch {
			case r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029':
				n += 6
			default:
				n += size
			}
			i += size
			continue
		}
		i++
	}
	return n
}

// checkLocked returns the error of an emitter call that must not proceed:
// the turn is over, or a line carrying texts would take its stream past
// its cap.
func (e *emitter) checkLocked(texts ...string) error {
	if e.t.finishing {
		return e.over()
	}
	n := lineOverhead
	for _, s := range texts {
		n += encodedLen(s)
	}
	if e.t.size+n > e.t.maxSize {
		e.t.tooLong = true
		return ErrTurnTooLong
	}
	return nil
}

// reserveLocked asks for a checkpoint ahead of the clock when few
// reserved sorts are left; it never waits (lines past the mark wait in the
// log instead).
func (e *emitter) reserveLocked() {
	if t := e.t; t.seq.next >= t.reserved-sortLow {
		t.requestCheckpoint()
	}
}

func (e *emitter) over() error {
	if c := context.Cause(e.t.ctx); c != nil {
		return fmt.Errorf("%w: %w", ErrTurnOver, c)
	}
	return ErrTurnOver
}

// Thinking implements [Emitter].
func (e *emitter) Thinking(text string) error {
	t := e.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := e.checkLocked(text); err != nil {
		return err
	}
	e.reserveLocked()
	m, ok, err := t.seq.think(text)
	if err != nil || !ok {
		return err
	}
	t.emitLocked(m)
	return nil
}

// Content implements [Emitter].
func (e *emitter) Content(piece string) error {
	t := e.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := e.checkLocked(piece); err != nil {
		return err
	}
	if piece == "" {
		return nil
	}
	e.reserveLocked()
	m, err := t.seq.piece(piece)
	if err != nil {
		return err
	}
	t.emitLocked(m)
	return nil
}

// ToolCall implements [Emitter].
func (e *emitter) ToolCall(name string, input any) (ToolCall, error) {
	if name == "" {
		return nil, errors.New("chatstream: tool call without a name")
	}
	in, err := marshalNoEscape(input)
	if err != nil {
		return nil, fmt.Errorf("chatstream: encode tool input: %w", err)
	}
	t := e.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := e.checkLocked(name, string(in)); err != nil {
		return nil, err
	}
	e.reserveLocked()
	id := newID()
	m, err := t.seq.toolStart(id, name, string(in))
	if err != nil {
		return nil, err
	}
	t.emitLocked(m)
	return &toolCall{e: e, id: id, name: name, input: string(in)}, nil
}

// toolCall is the [ToolCall] of an emitter.
type toolCall struct {
	e           *emitter
	id          string
	name, input string // repeated in the result's line
}

// Result implements [ToolCall].
func (c *toolCall) Result(v any) error {
	b, err := marshalNoEscape(v)
	if err != nil {
		return fmt.Errorf("chatstream: encode tool result: %w", err)
	}
	return c.end(string(b))
}

// Fail implements [ToolCall].
func (c *toolCall) Fail(msg string) error { return c.end(errorResult(msg)) }

func (c *toolCall) end(result string) error {
	t := c.e.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := c.e.checkLocked(c.name, c.input, result); err != nil {
		return err
	}
	c.e.reserveLocked()
	m, err := t.seq.toolEnd(c.id, result)
	if err != nil {
		return err
	}
	t.emitLocked(m)
	return nil
}
