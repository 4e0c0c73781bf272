package chatstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/embedkit/embedkit/internal/wire"
	"github.com/embedkit/embedkit/store"
)

// Causes of a turn's cancellation, told apart with context.Cause.
var (
	errAborted      = errors.New("chatstream: turn aborted")
	errDisconnected = errors.New("chatstream: client disconnected")
	errShutdown     = errors.New("chatstream: handler shut down")
	// errThreadDeleted stops a turn whose thread a checkpoint found
	// deleted: its user was deprovisioned, or expired and reaped.
	errThreadDeleted = errors.New("chatstream: the thread was deleted")
	errDeadline      = errors.New("chatstream: turn deadline exceeded")
)

var (
	errTurnRunning = wire.Errorf(http.StatusConflict, "a turn of this chat is running: wait for it to end or abort it")
	errChatBusy    = wire.Errorf(http.StatusConflict, "another request on this chat is being refused: try again")
	// A reservation of the thread by another user's (or agent's) opening
	// that has not started; answered as its turn would be unless open
	// finds the thread is the caller's (othersOpening).
	errOthersOpening      = wire.Errorf(http.StatusForbidden, "the chat belongs to another user")
	errOthersOpeningAgent = wire.Errorf(http.StatusNotFound, "chat not found")
	// The caller's own opening of the thread, not started: it may be of
	// another user's chat, which the store is about to refuse (othersOpening).
	errOwnOpening   = wire.Errorf(http.StatusConflict, "a turn of this chat is running: wait for it to end or abort it")
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
	// working (a query that ignores its context). With a Cluster they are
	// counted there instead (ClaimedTurn.Linger), on every replica.
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
//
// An opening that has not started is errOthersOpening or
// errOthersOpeningAgent when it is another user's (or agent's), and
// errOwnOpening when it is the caller's: it was reserved before the store
// said whose the thread is, and the thread may be the caller's, or
// another's, which only the store can tell (see othersOpening).
func (r *registry) reserve(ctx context.Context, key turnKey, userID int64, externalID, agentID string, maxSize int, lim TurnLimits) (*turn, error) {
	r.mu.Lock()
	if r.closing {
		r.mu.Unlock()
		return nil, errShuttingDown
	}
	if t, ok := r.turns[key]; ok {
		otherAgent, otherUser, started := t.agentID != agentID, t.userID != userID, t.started
		r.mu.Unlock()
		switch {
		case otherAgent && !started:
			return nil, errOthersOpeningAgent
		case otherAgent:
			return nil, errChatGone // a thread of another agent
		case otherUser && !started:
			return nil, errOthersOpening
		case otherUser:
			return nil, errNotOwner
		case !started:
			return nil, errOwnOpening
		}
		return nil, errTurnRunning
	}
	var user, account int // a Cluster counts them itself
	if r.cluster == nil {
		user = r.lingerUser[userID] + r.perUser[userID]
		account = r.lingerAccount[key.accountID] + r.perAccount[key.accountID]
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
	if err := r.claim(ctx, t, lim); err != nil {
		return nil, err
	}
	return t, nil
}

// claim claims t's thread in the cluster, if any, for t's user. A refused
// claim drops t.
func (r *registry) claim(ctx context.Context, t *turn, lim TurnLimits) error {
	if r.cluster == nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, clusterTimeout)
	claim, err := r.cluster.Claim(cctx, ThreadKey{AccountID: t.key.accountID, ChatID: t.key.chatID}, t.userID, lim)
	cancel()
	if err != nil {
		r.drop(t)
		if e, ok := errors.AsType[*TurnLimitError](err); ok {
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
	r.mu.Unlock()
	if old != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseQuick)
		if err := old.Release(rctx, nil); err != nil {
			r.logReleaseFailure(rctx, t, err)
		}
		cancel()
	}
	return r.claim(ctx, t, lim)
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

// abort finds the turn that holds key in this process, if any, and
// reports whether it is o's. o's turn, started, is for the caller to stop;
// o's opening is marked to be aborted as it starts; the thread is free
// again once its done is closed (the turn aborted and stored, or the
// opening refused). Another user's or agent's turn is left alone: the
// caller's checks came before, and between them and this the caller's
// opening may have been refused and another's reserved the chat id.
func (r *registry) abort(key turnKey, o turnOwner) (t *turn, started, mine bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t = r.turns[key]
	if t == nil {
		return nil, false, false
	}
	if mine = o.owns(t); mine && !t.started {
		t.abortAtStart = true
	}
	return t, t.started, mine
}

// whenStarted returns a channel closed once t has started.
func (r *registry) whenStarted(t *turn) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t.startedCh == nil {
		t.startedCh = make(chan struct{})
		if t.started {
			close(t.startedCh)
		}
	}
	return t.startedCh
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

// linger has the cluster count t, whose claim is about to be released,
// among the running turns for as long as its agent runs.
func (r *registry) linger(t *turn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t.agentRunning && t.lingered == nil {
		t.lingered = t.claim.Linger()
	}
}

// remove unregisters a finished turn: its thread is free. While its agent
// still runs, the turn goes on counting against the limits: here, or in
// the cluster (linger).
func (r *registry) remove(t *turn) {
	r.mu.Lock()
	if r.turns[t.key] == t {
		r.deleteLocked(t)
		if t.agentRunning && r.cluster == nil {
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
	returned := t.lingered
	r.mu.Unlock()
	if returned != nil {
		returned()
	}
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
