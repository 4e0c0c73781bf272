package chatstream

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Crash safety. A running turn stores a checkpoint (its completed messages
// and its answer so far, in final form) every checkpointInterval, so that a
// crash loses at most about that much of the answer. A completed message is
// stored once: later checkpoints and the turn's final write leave it out.
// The turn reserves a block of sort numbers in the thread
// (store.Thread.LastSort) with its echo, and a checkpoint reserves a new one
// when fewer than sortLow are left: the turn streams no line at or above the
// reserved mark, so that the next turn after a crash starts above every sort
// a client may have seen.
const (
	// checkpointInterval is how often a running turn that streamed
	// something since its last checkpoint stores one; with the write,
	// the stored answer stays less than a second behind.
	checkpointInterval = 500 * time.Millisecond
	// checkpointTimeout bounds the write of one checkpoint.
	checkpointTimeout = 5 * time.Second
	// sortBlock is how many sort numbers a turn reserves at its start and
	// at each checkpoint that finds fewer than sortLow of them left (it is
	// then due early), so that most turns need no write for sorts beyond
	// the echo's. A turn's __state__ carries its reserved
	// mark, so sorts jump by up to sortBlock from one turn to the next.
	sortBlock = 2048
	sortLow   = sortBlock / 4
)

// prepareCheckpoints sets the turn's reservation (stored with its echo);
// before begin.
func (t *turn) prepareCheckpoints(reserved int64) {
	t.reserved = reserved
	t.cond = sync.NewCond(&t.mu)
}

// A turn has no goroutine of its own for its checkpoints: one runs only
// while a checkpoint is stored, so that a turn that streams nothing (an
// agent waiting on a slow tool) costs no stack.

// dirtyLocked records that the turn streamed something: it is checkpointed
// at the registry clock's next tick.
func (t *turn) dirtyLocked() {
	if !t.ckptDue && !t.finishing {
		t.ckptDue = true
		t.reg.clock.schedule(t)
	}
}

// requestCheckpoint asks for a checkpoint now, ahead of the clock (few
// reserved sorts are left); one at a time. t.mu is held.
func (t *turn) requestCheckpoint() {
	if !t.ckptEarly && !t.finishing {
		t.ckptEarly = true
		t.goCheckpointLocked()
	}
}

// goCheckpointLocked stores a checkpoint on a goroutine counted by the
// registry, so that a shutdown waits for it. t.mu is held and the turn is
// not finishing: the registry still holds it, so the count cannot reach
// zero before the goroutine is counted.
func (t *turn) goCheckpointLocked() {
	r := t.reg
	r.mu.Lock()
	r.active++
	r.mu.Unlock()
	go func() {
		defer r.ended()
		t.checkpoint()
	}()
}

// checkpointClock ticks every checkpointInterval while turns wait for it.
// The running turns of a registry share it, so that their checkpoints reach
// the persister together and are stored in a few large transactions (one
// commit for many turns) rather than in many small ones spread over the
// interval. It has no goroutine: a timer starts one checkpoint goroutine per
// due turn at the tick, and a tick is pending only while some turn is due.
type checkpointClock struct {
	mu  sync.Mutex
	due []*turn // the turns to checkpoint at the pending tick
}

// schedule adds t to the turns checkpointed at the next tick.
func (c *checkpointClock) schedule(t *turn) {
	c.mu.Lock()
	if len(c.due) == 0 {
		time.AfterFunc(checkpointInterval, c.tick)
	}
	c.due = append(c.due, t)
	c.mu.Unlock()
}

// tick starts the checkpoints of the due turns.
func (c *checkpointClock) tick() {
	c.mu.Lock()
	due := c.due
	c.due = nil
	c.mu.Unlock()
	for _, t := range due {
		t.mu.Lock()
		if !t.finishing {
			t.goCheckpointLocked()
		}
		t.mu.Unlock()
	}
}

// checkpoint stores the turn's progress, and a new reservation when few
// sorts are left, unless the turn is finishing or has nothing new and
// enough sorts left. The answer so far keeps the reserved mark as its sort,
// so that it sorts after every line streamed.
func (t *turn) checkpoint() {
	t.ckptMu.Lock()
	defer t.ckptMu.Unlock()
	t.mu.Lock()
	// Lines streamed from here on are due at a later tick.
	t.ckptDue = false
	next := t.seq.next
	low := next >= t.reserved-sortLow
	if t.finishing || (next == t.ckptNext && !low) {
		t.ckptEarly = false
		t.mu.Unlock()
		return
	}
	reserve := t.reserved
	if low {
		reserve = next + sortBlock
	}
	msgs, done := t.seq.checkpoint(reserve)
	t.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), checkpointTimeout)
	err := t.persist(ctx, reserve, msgs)
	cancel()
	if err != nil {
		if t.reg.log != nil {
			t.reg.log.LogAttrs(ctx, slog.LevelWarn, "chat turn checkpoint not stored; streaming waits for the next one",
				slog.String("chatId", t.key.chatID), slog.String("error", err.Error()))
		}
		t.mu.Lock()
		t.ckptEarly = false
		t.dirtyLocked() // try again at the next tick
		t.mu.Unlock()
		return
	}
	t.mu.Lock()
	t.reserved = max(t.reserved, reserve)
	t.ckptNext = next
	t.ckptEarly = false
	t.seq.markStored(done)
	t.cond.Broadcast()
	t.mu.Unlock()
}
