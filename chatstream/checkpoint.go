package chatstream

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/embedkit/embedkit/store"
)

// Crash safety. A running turn stores a checkpoint (its completed messages
// and its answer so far, in final form) every checkpointInterval, so that a
// crash loses at most about that much of the answer. A completed message is
// stored once: later checkpoints and the turn's final write leave it out.
// The turn reserves a block of sort numbers in the thread
// (store.Thread.LastSort) with its echo, and a checkpoint reserves a new one
// when fewer than sortLow are left: no line within finalSlots of the
// reserved mark reaches a client (such lines wait in the turn's log until
// a checkpoint raises the mark), so that the next turn after a crash, or
// after a final write that failed, starts above every sort a client may
// have seen. Emitters never wait for a write.
const (
	// checkpointInterval is how often a running turn that streamed
	// something since its last checkpoint stores one; with the write,
	// the stored answer stays less than a second behind.
	checkpointInterval = 500 * time.Millisecond
	// sortBlock is how many sort numbers a turn reserves at its start and
	// at each checkpoint that finds fewer than sortLow of them left (it is
	// then due early), so that most turns need no write for sorts beyond
	// the echo's. A turn's __state__ carries its reserved mark, so sorts
	// jump by up to sortBlock from one turn to the next.
	sortBlock = 2048
	sortLow   = sortBlock / 4
)

// A turn has no goroutine of its own for its checkpoints: the registry's
// clock takes those of every due turn at its tick, and the persister
// writes them in a few transactions; one asked for ahead of the clock runs
// on a goroutine of its own while it is stored.

// dirtyLocked records that the turn streamed something: it is checkpointed
// at the registry clock's next tick. t.mu is held.
func (t *turn) dirtyLocked() {
	if !t.ckptDue && !t.finishing {
		t.ckptDue = true
		t.reg.clock.schedule(t)
	}
}

// requestCheckpoint asks for a checkpoint now, ahead of the clock (few
// reserved sorts are left); one at a time. t.mu is held and the turn is not
// finishing: the registry still holds it, so its count of goroutines
// cannot reach zero before this one is counted.
func (t *turn) requestCheckpoint() {
	if t.ckptEarly || t.finishing {
		return
	}
	t.ckptEarly = true
	r := t.reg
	r.mu.Lock()
	r.active++
	r.mu.Unlock()
	go func() {
		defer r.ended()
		r.persist.checkpoint([]*turn{t})
	}()
}

// checkpointClock ticks every checkpointInterval while turns wait for it.
// The running turns of a registry share it, so that their checkpoints are
// stored together in a few large transactions rather than in many small
// ones spread over the interval. It has no goroutine: a timer runs the
// tick, and a tick is pending only while some turn is due. Ticks do not
// overlap: turns that fall due while a tick writes wait for the next,
// which follows at once when the writes took longer than the interval.
type checkpointClock struct {
	reg     *registry
	mu      sync.Mutex
	due     []*turn // the turns to checkpoint at the pending tick
	writing bool    // a tick is storing its checkpoints
}

// schedule adds t to the turns checkpointed at the next tick.
func (c *checkpointClock) schedule(t *turn) {
	c.mu.Lock()
	if len(c.due) == 0 && !c.writing {
		c.startLocked(checkpointInterval)
	}
	c.due = append(c.due, t)
	c.mu.Unlock()
}

// startLocked arms the next tick. The pending tick counts as a goroutine
// of the registry, so that a shutdown waits for its writes.
func (c *checkpointClock) startLocked(d time.Duration) {
	c.reg.mu.Lock()
	c.reg.active++
	c.reg.mu.Unlock()
	time.AfterFunc(d, c.tick)
}

// tick stores the checkpoints of the due turns.
func (c *checkpointClock) tick() {
	defer c.reg.ended()
	start := time.Now()
	c.mu.Lock()
	due := c.due
	c.due, c.writing = nil, true
	c.mu.Unlock()
	c.reg.persist.checkpoint(due)
	c.mu.Lock()
	if c.writing = false; len(c.due) > 0 {
		c.startLocked(max(0, checkpointInterval-time.Since(start)))
	}
	c.mu.Unlock()
}

// queueCheckpoint reports whether the turn's checkpoint is to be stored:
// it is not finishing and not queued already. Lines streamed from here on
// are due at a later tick. While one of its checkpoints is being written
// (by an earlier tick, or ahead of the clock), the turn is due at the next
// tick instead: a turn's checkpoints are stored one after the other.
func (t *turn) queueCheckpoint() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ckptDue = false
	if t.finishing || t.ckptQueued {
		return false
	}
	if t.ckptWriting != nil {
		t.dirtyLocked()
		return false
	}
	t.ckptQueued = true
	return true
}

// checkpointWrite returns the turn's checkpoint, taken as its batch is
// written: its completed messages not stored yet and the answer so far, at
// the reserved mark (raised when few sorts are left), so that it sorts
// after every line streamed. ok is false when there is nothing to store or
// the turn is finishing (its final messages replace any checkpoint).
func (t *turn) checkpointWrite() (w threadWrite, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ckptQueued = false
	next := t.seq.next
	low := next >= t.reserved-sortLow
	if t.finishing || (next == t.ckptNext && !low) {
		t.ckptEarly = false
		return threadWrite{}, false
	}
	reserve, raise := t.reserved, int64(0) // t.reserved is stored: no need to raise it
	if low {
		reserve = next + sortBlock
		raise = reserve
	}
	msgs, done := t.seq.checkpoint(reserve)
	t.ckptWriting = make(chan struct{})
	return threadWrite{ctx: t.ctx, accountID: t.key.accountID, chatID: t.key.chatID, lastSort: raise, msgs: msgs,
		t: t, next: next, done: done}, true
}

// checkpointed records the outcome of the turn's checkpoint w: stored, its
// reservation lets the lines below it reach the clients; failed, the turn
// is due again at the next tick; its thread missing, deleted with its user
// (deprovisioned, or expired and reaped), the turn is stopped: it would
// otherwise run its agent and tools on for a user that is gone.
func (t *turn) checkpointed(w *threadWrite) {
	if errors.Is(w.err, store.ErrNotFound) {
		defer t.cancel(errThreadDeleted) // after t.mu is released
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ckptEarly = false
	close(t.ckptWriting)
	t.ckptWriting = nil
	if errors.Is(w.err, store.ErrNotFound) {
		return
	}
	if w.err != nil {
		if t.reg.log != nil {
			t.reg.log.LogAttrs(context.Background(), slog.LevelWarn, "chat turn checkpoint not stored; the next tick tries again",
				slog.String("chatId", t.key.chatID), slog.String("error", w.err.Error()))
		}
		t.dirtyLocked()
		return
	}
	t.reserved = max(t.reserved, w.lastSort)
	t.ckptNext = max(t.ckptNext, w.next)
	t.seq.markStored(w.done)
	t.publishLocked()
}
