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

// prepareCheckpoints sets the turn's reservation (stored with its echo) and
// what the checkpointer needs; before begin.
func (t *turn) prepareCheckpoints(reserved int64) {
	t.reserved = reserved
	t.cond = sync.NewCond(&t.mu)
	t.ckptReq = make(chan struct{}, 1)
}

// requestCheckpoint asks the checkpointer for a checkpoint now.
func (t *turn) requestCheckpoint() {
	select {
	case t.ckptReq <- struct{}{}:
	default:
	}
}

// checkpointLoop stores checkpoints until the turn is done, at the ticks of
// the registry's clock.
func (t *turn) checkpointLoop() {
	for {
		select {
		case <-t.done:
			return
		case <-t.reg.clock.next():
		case <-t.ckptReq:
		}
		t.checkpoint()
	}
}

// checkpointClock ticks every checkpointInterval while turns wait for it.
// The running turns of a registry share it, so that their checkpoints reach
// the persister together and are stored in a few large transactions (one
// commit for many turns) rather than in many small ones spread over the
// interval. It has no goroutine: a timer closes the channel of the pending
// tick, and a tick is pending only while some turn waits for it.
type checkpointClock struct {
	mu   sync.Mutex
	tick chan struct{} // closed at the pending tick; nil when none is pending
}

// next returns a channel closed at the next tick.
func (c *checkpointClock) next() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tick == nil {
		ch := make(chan struct{})
		c.tick = ch
		time.AfterFunc(checkpointInterval, func() {
			c.mu.Lock()
			c.tick = nil
			c.mu.Unlock()
			close(ch)
		})
	}
	return c.tick
}

// checkpoint stores the turn's progress, and a new reservation when few
// sorts are left, unless the turn is finishing or has nothing new and
// enough sorts left. The answer so far keeps the reserved mark as its sort,
// so that it sorts after every line streamed.
func (t *turn) checkpoint() {
	t.ckptMu.Lock()
	defer t.ckptMu.Unlock()
	t.mu.Lock()
	next := t.seq.next
	low := next >= t.reserved-sortLow
	if t.finishing || (next == t.ckptNext && !low) {
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
		return
	}
	t.mu.Lock()
	t.reserved = max(t.reserved, reserve)
	t.ckptNext = next
	t.seq.markStored(done)
	t.cond.Broadcast()
	t.mu.Unlock()
}
