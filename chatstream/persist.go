package chatstream

import (
	"context"
	"errors"
	"sync"

	"github.com/embedkit/embedkit/store"
)

// maxPersistBatch caps the turns stored in one transaction.
const maxPersistBatch = 64

// persister stores the final messages of ending turns with group commit:
// turns that end while a write is in flight are stored together in the next
// transaction, so that the store sees one commit for many turns under load.
// It starts no goroutine: the caller whose turn is first in line writes the
// batch (it "leads"), then hands the lead to the first turn still waiting.
type persister struct {
	st store.Store

	mu    sync.Mutex
	queue []*persistJob
	busy  bool // a leader is writing
}

type persistJob struct {
	ctx       context.Context // the turn's request
	accountID int64
	chatID    string
	lastSort  int64
	msgs      []store.ThreadMessage

	err  error
	done chan struct{} // closed once stored (or failed)
	lead chan struct{} // closed when this job's caller must lead
}

// persist stores one turn's messages and returns once they are stored.
func (p *persister) persist(ctx context.Context, accountID int64, chatID string, lastSort int64, msgs []store.ThreadMessage) error {
	j := &persistJob{ctx: ctx, accountID: accountID, chatID: chatID, lastSort: lastSort, msgs: msgs,
		done: make(chan struct{}), lead: make(chan struct{})}
	p.mu.Lock()
	p.queue = append(p.queue, j)
	if p.busy {
		p.mu.Unlock()
		select {
		case <-j.done:
			return j.err
		case <-j.lead:
		}
	} else {
		p.busy = true
		p.mu.Unlock()
	}
	return p.leadBatch(ctx, j)
}

// leadBatch writes the queued jobs (j among them) and hands the lead on.
func (p *persister) leadBatch(ctx context.Context, j *persistJob) error {
	p.mu.Lock()
	n := min(len(p.queue), maxPersistBatch)
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
	<-j.done // j was in the batch: the leader is always first in the queue
	return j.err
}

// write stores a batch. A batch of one turn runs under that turn's request
// context; a batch serving several turns runs under a context of its own
// (no request's values, no request's cancellation), so that a host's
// tracing does not attribute the other turns' writes to one request and
// one client going away does not fail the others' writes. The store bounds
// it by its query timeout.
func (p *persister) write(batch []*persistJob) {
	ctx := batch[0].ctx
	if len(batch) > 1 {
		ctx = context.Background()
	}
	appends := make([]store.ThreadAppend, len(batch))
	for i, j := range batch {
		appends[i] = store.ThreadAppend{AccountID: j.accountID, ChatID: j.chatID, LastSort: j.lastSort, Messages: j.msgs}
	}
	err := p.st.AppendToThreads(ctx, appends)
	// A batch that failed for a turn of its own is retried turn by turn; an
	// unreachable database fails them all alike, so a retry would only wait
	// the query timeout once more per turn.
	if err != nil && len(batch) > 1 && !errors.Is(err, store.ErrUnavailable) && ctx.Err() == nil {
		// One bad turn must not fail the others: store them one by one.
		for _, j := range batch {
			j.err = p.st.AppendMessages(j.ctx, j.accountID, j.chatID, j.lastSort, j.msgs)
			close(j.done)
		}
		return
	}
	for _, j := range batch {
		j.err = err
		close(j.done)
	}
}
