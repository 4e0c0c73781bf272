package chatstream

import (
	"context"
	"errors"
	"sync"

	"github.com/embedkit/embedkit/store"
)

// minPersistBatch is the fewest thread writes a transaction of the
// persister takes when that many are queued, and maxPersistTxPerTick the
// most transactions the checkpoints of one clock tick are split into: the
// running turns' checkpoints cost a near-constant number of transactions
// per second whatever their count, yet no transaction holds the database
// (SQLite's one writer) much longer than the openings around it.
const (
	minPersistBatch     = 256
	maxPersistTxPerTick = 8
)

// persister is the one batching layer of chatstream: it stores the
// checkpoints of running turns and the final messages of ending ones, with
// group commit. Thread writes queued while a transaction is in flight are
// stored together in the next one, under a context of its own (never a
// request's), with one AppendMessages per thread. Writes are stored in the
// order they were queued, so that a turn's final messages replace its
// checkpoints. It starts no goroutine: the caller whose job is first in line
// writes the batch (it "leads"), then hands the lead to the next waiting job.
type persister struct {
	st store.Store

	// mu guards the queue; callers also hold it while they take the
	// snapshot they queue (submit), so that queue order is snapshot order.
	mu    sync.Mutex
	queue []*persistJob
	busy  bool // a leader is writing
}

// threadWrite is one AppendMessages of a batch.
type threadWrite struct {
	accountID int64
	chatID    string
	lastSort  int64
	msgs      []Message
	err       error // set once the write's job is done

	// A checkpoint's: the turn, its sequence position and completed
	// messages covered, and whether it was asked for ahead of the clock.
	t     *turn
	next  int64
	done  int
	early bool
}

type persistJob struct {
	writes []threadWrite
	done   chan struct{} // closed once stored (or failed)
	lead   chan struct{} // closed when this job's caller must lead
}

// submit queues the writes that collect returns, as one job or, for many
// writes, several (see minPersistBatch). collect runs with p.mu held: a
// turn's snapshot and its place in the queue are taken together. The caller
// then waits for each job, in order.
func (p *persister) submit(collect func() []threadWrite) []*persistJob {
	p.mu.Lock()
	defer p.mu.Unlock()
	ws := collect()
	if len(ws) == 0 {
		return nil
	}
	chunk := max(minPersistBatch, (len(ws)+maxPersistTxPerTick-1)/maxPersistTxPerTick)
	jobs := make([]*persistJob, 0, (len(ws)+chunk-1)/chunk)
	for len(ws) > 0 {
		n := min(chunk, len(ws))
		j := &persistJob{writes: ws[:n:n], done: make(chan struct{}), lead: make(chan struct{})}
		ws = ws[n:]
		jobs = append(jobs, j)
		p.queue = append(p.queue, j)
	}
	return jobs
}

// wait returns once j is stored (or failed), leading batches when its turn
// comes. Each write of j then has its err.
func (p *persister) wait(j *persistJob) {
	for {
		p.mu.Lock()
		lead := !p.busy
		p.busy = true
		p.mu.Unlock()
		if !lead {
			select {
			case <-j.done:
				return
			case <-j.lead:
			}
		}
		p.leadBatch()
		select {
		case <-j.done:
			return
		default: // j was queued behind the batch: wait again
		}
	}
}

// leadBatch writes the jobs at the front of the queue and hands the lead on.
func (p *persister) leadBatch() {
	p.mu.Lock()
	n, writes := 0, 0
	for n < len(p.queue) && (n == 0 || writes+len(p.queue[n].writes) <= minPersistBatch) {
		writes += len(p.queue[n].writes)
		n++
	}
	batch := p.queue[:n:n]
	p.queue = p.queue[n:]
	p.mu.Unlock()

	p.write(batch)

	p.mu.Lock()
	if len(p.queue) > 0 {
		close(p.queue[0].lead)
	} else {
		p.busy = false
		p.queue = nil
	}
	p.mu.Unlock()
}

// write stores a batch in one transaction, under a context of its own (no
// request's values or cancellation: the writes serve several turns),
// bounded by persistTimeout.
func (p *persister) write(batch []*persistJob) {
	ctx, cancel := context.WithTimeout(context.Background(), persistTimeout)
	defer cancel()
	type stored struct {
		w    *threadWrite
		msgs []store.ThreadMessage
	}
	var ws []stored
	for _, j := range batch {
		for i := range j.writes {
			w := &j.writes[i]
			msgs, err := toStored(w.msgs)
			if w.err = err; err == nil {
				ws = append(ws, stored{w, msgs})
			}
		}
	}
	err := p.st.InTx(ctx, func(tx store.Tx) error {
		for _, s := range ws {
			if err := tx.AppendMessages(ctx, s.w.accountID, s.w.chatID, s.w.lastSort, s.msgs); err != nil {
				return err
			}
		}
		return nil
	})
	// A batch that failed for a thread of its own (deleted meanwhile) is
	// stored thread by thread, so that one bad thread does not fail the
	// others; an unreachable database fails them all alike.
	if err != nil && len(ws) > 1 && !errors.Is(err, store.ErrUnavailable) {
		for _, s := range ws {
			ctx, cancel := context.WithTimeout(context.Background(), persistTimeout)
			s.w.err = p.st.AppendMessages(ctx, s.w.accountID, s.w.chatID, s.w.lastSort, s.msgs)
			cancel()
		}
	} else {
		for _, s := range ws {
			s.w.err = err
		}
	}
	for _, j := range batch {
		close(j.done)
	}
}
