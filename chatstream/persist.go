package chatstream

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/embedkit/embedkit/store"
)

// A transaction of the persister takes at most maxPersistBatch thread
// writes, so that it does not hold the database (SQLite's one writer) much
// longer than the openings around it, unless more than
// maxPersistBatch*persistSplit are queued: then it takes a persistSplit-th
// of them, so that however many turns run, their checkpoints of a clock
// tick cost at most about persistSplit transactions.
const (
	maxPersistBatch = 256
	persistSplit    = 8
)

// persister is the one batching layer of chatstream: it stores the final
// messages of ending turns and the checkpoints of running ones, with group
// commit. Writes queued while a transaction is in flight are stored
// together in the next one, under a context of its own (never a request's),
// with one AppendMessages per thread.
//
// Final messages go first: a turn's end waits for its write, a checkpoint
// does not. A turn waiting for a checkpoint is queued once and its
// checkpoint is taken when its batch is written, so that when the database
// is slower than the turns stream, checkpoints cover more progress each
// rather than pile up. A turn's checkpoint is never written after its
// final messages: once a turn is finishing, its queued checkpoint is
// dropped.
//
// It starts no goroutine: a caller waiting for its write leads, writing
// batches until its own is stored, then hands the lead to the next waiter
// (a final write's caller first, then a clock tick's).
type persister struct {
	st store.Store

	mu     sync.Mutex
	finals []*finalJob
	ckpts  []*turn // each at most once (turn.ckptQueued)
	// queued and written count the checkpoint turns queued and taken
	// since the start: a tick waits until written reaches what it queued.
	queued, written int64
	ticks           []*tickWait // FIFO
	busy            bool        // a leader is writing
}

// finalJob is the final write of one turn.
type finalJob struct {
	w    threadWrite
	done chan struct{} // closed once stored (or failed)
	lead chan struct{} // closed when this job's caller must lead
}

// tickWait is a caller waiting for the checkpoints it queued.
type tickWait struct {
	upTo int64
	lead chan struct{}
}

// threadWrite is one AppendMessages of a batch.
type threadWrite struct {
	accountID int64
	chatID    string
	lastSort  int64
	msgs      []Message
	err       error

	// A checkpoint's: the turn, its sequence position and the completed
	// messages it covers.
	t    *turn
	next int64
	done int
}

// final stores a finishing turn's messages and returns once they are
// stored. The turn is already finishing: no checkpoint of it is written
// after this.
func (p *persister) final(w threadWrite) error {
	j := &finalJob{w: w, done: make(chan struct{}), lead: make(chan struct{})}
	p.mu.Lock()
	p.finals = append(p.finals, j)
	lead := !p.busy
	p.busy = true
	p.mu.Unlock()
	if !lead {
		select {
		case <-j.done:
			return j.w.err
		case <-j.lead:
		}
	}
	for {
		p.writeBatch()
		select {
		case <-j.done:
			p.handOff()
			return j.w.err
		default:
		}
	}
}

// checkpoint queues the checkpoints of turns (those not queued yet) and
// returns once they are written or dropped.
func (p *persister) checkpoint(turns []*turn) {
	p.mu.Lock()
	for _, t := range turns {
		if t.queueCheckpoint() {
			p.ckpts = append(p.ckpts, t)
			p.queued++
		}
	}
	w := &tickWait{upTo: p.queued, lead: make(chan struct{})}
	if p.written >= w.upTo {
		p.mu.Unlock()
		return
	}
	lead := !p.busy
	p.busy = true
	if !lead {
		p.ticks = append(p.ticks, w)
	}
	p.mu.Unlock()
	if !lead {
		<-w.lead
		p.mu.Lock()
		done := p.written >= w.upTo // taken by another leader, which goes on
		p.mu.Unlock()
		if done {
			return
		}
	}
	for {
		p.writeBatch()
		p.mu.Lock()
		mine := p.written >= w.upTo
		p.mu.Unlock()
		if mine {
			p.handOff()
			return
		}
	}
}

// handOff passes the lead on after a leader's own write is done: to the
// first final write's caller, else to the first tick still waiting, else
// nobody.
func (p *persister) handOff() {
	p.mu.Lock()
	defer p.mu.Unlock()
	// Ticks whose checkpoints were written by others need no lead.
	for len(p.ticks) > 0 && p.written >= p.ticks[0].upTo {
		close(p.ticks[0].lead)
		p.ticks = p.ticks[1:]
	}
	switch {
	case len(p.finals) > 0:
		close(p.finals[0].lead)
	case len(p.ticks) > 0:
		close(p.ticks[0].lead)
		p.ticks = p.ticks[1:]
	default:
		p.busy = false
		p.ticks = nil
	}
}

// writeBatch takes the final writes queued (first) and checkpoints, up to
// its limit, and stores them in one transaction.
func (p *persister) writeBatch() {
	p.mu.Lock()
	limit := max(maxPersistBatch, (len(p.finals)+len(p.ckpts)+persistSplit-1)/persistSplit)
	nf := min(len(p.finals), limit)
	finals := slices.Clone(p.finals[:nf])
	p.finals = p.finals[nf:]
	nc := min(len(p.ckpts), limit-nf)
	ckpts := slices.Clone(p.ckpts[:nc])
	p.ckpts = p.ckpts[nc:]
	p.written += int64(nc)
	p.mu.Unlock()

	ws := make([]*threadWrite, 0, nf+nc)
	for _, j := range finals {
		ws = append(ws, &j.w)
	}
	cws := make([]threadWrite, 0, nc)
	for _, t := range ckpts {
		if w, ok := t.checkpointWrite(); ok {
			cws = append(cws, w)
		}
	}
	for i := range cws {
		ws = append(ws, &cws[i])
	}
	p.write(ws)
	for _, j := range finals {
		close(j.done)
	}
	for i := range cws {
		cws[i].t.checkpointed(&cws[i])
	}
}

// write stores ws in one transaction, under a context of its own (no
// request's values or cancellation: the writes serve several turns),
// bounded by persistTimeout.
func (p *persister) write(ws []*threadWrite) {
	if len(ws) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), persistTimeout)
	defer cancel()
	type stored struct {
		w    *threadWrite
		msgs []store.ThreadMessage
	}
	ss := make([]stored, 0, len(ws))
	for _, w := range ws {
		msgs, err := toStored(w.msgs)
		if w.err = err; err == nil {
			ss = append(ss, stored{w, msgs})
		}
	}
	err := p.st.InTx(ctx, func(tx store.Tx) error {
		for _, s := range ss {
			if err := tx.AppendMessages(ctx, s.w.accountID, s.w.chatID, s.w.lastSort, s.msgs); err != nil {
				return err
			}
		}
		return nil
	})
	// A batch that failed for a thread of its own (deleted meanwhile) is
	// stored thread by thread, so that one bad thread does not fail the
	// others; an unreachable database fails them all alike.
	if err != nil && len(ss) > 1 && !errors.Is(err, store.ErrUnavailable) {
		for _, s := range ss {
			ctx, cancel := context.WithTimeout(context.Background(), persistTimeout)
			s.w.err = p.st.AppendMessages(ctx, s.w.accountID, s.w.chatID, s.w.lastSort, s.msgs)
			cancel()
		}
		return
	}
	for _, s := range ss {
		s.w.err = err
	}
}
