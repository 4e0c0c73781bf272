package chatstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/embedkit/embedkit/store"
)

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
	// startedCh, made for a caller that waits for the start
	// (registry.whenStarted), is closed as it starts. Guarded by reg.mu.
	startedCh chan struct{}
	// abortAtStart: an abort came while the turn opened; it is aborted as
	// it starts. Guarded by reg.mu.
	abortAtStart bool
	// agentRunning: the agent has not returned; lingering: the turn is
	// finished and unregistered but counted in reg.linger* until it does;
	// lingered, with a cluster, tells the cluster that it returned
	// (ClaimedTurn.Linger). All guarded by reg.mu.
	agentRunning, lingering bool
	lingered                func()

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
// registry; after timeout the turn is stopped with cause. user, when not
// nil, reads the turn's user (info.User) on that goroutine before the
// agent answers.
func (t *turn) begin(base context.Context, timeout time.Duration, cause error, agent instrumented, info *Turn, user userReader, echo, start Message) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(base))
	ctx, cancelDeadline := context.WithDeadlineCause(ctx, time.Now().Add(timeout), cause)
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
	if t.startedCh != nil {
		close(t.startedCh)
	}
	t.agentRunning = true
	r.active++ // the agent's goroutine below
	var stopped error
	switch {
	case r.stopped:
		stopped = errShutdown
	case t.abortAtStart:
		stopped = errAborted
	}
	r.mu.Unlock()

	go t.run(agent, info, user, stopped)
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
	case errors.Is(cause, errThreadDeleted):
		return outcomeDeleted
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
	var err error
	if o == outcomeDeleted {
		err = errThreadDeleted // nothing to store it in
	} else {
		err = t.reg.persist.final(threadWrite{ctx: t.ctx, accountID: t.key.accountID, chatID: t.key.chatID, lastSort: lastSort, msgs: msgs})
	}
	if err != nil {
		st := lines[len(lines)-1].State
		switch {
		case errors.Is(err, store.ErrNotFound):
			// The thread went with its user (deprovisioned, or expired and
			// reaped) while the turn ran; outcomeDeleted says so already.
			st.Error = errChatDeleted
		case st.Error == "":
			st.Error = errStoreFailed
		}
		if t.reg.log != nil && st.Error != errChatDeleted {
			t.reg.log.LogAttrs(t.ctx, slog.LevelError, "chat turn not stored",
				slog.String("chatId", t.key.chatID), slog.String("error", err.Error()))
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
		t.reg.linger(t)
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
