package chatstream

import (
	"context"
	"errors"

	"github.com/embedkit/embedkit/store"
)

// A tick's checkpoints are stored maxPersistBatch threads per transaction,
// so that a transaction does not hold the database (SQLite's one writer)
// long: the turn openings queued behind it wait less. When more than
// maxPersistBatch*persistSplit turns are due, persistSplit transactions
// take them all, so that however many turns run, their checkpoints of a
// tick cost at most persistSplit transactions.
const (
	maxPersistBatch = 32
	persistSplit    = 32
)

// maxPersistWrites bounds the persister's writes in flight, so that
// however many turns end or checkpoint at once, their writes hold at most
// that many of the store's connections and the turn openings find the
// others free.
const maxPersistWrites = 8

// persister stores the final messages of ending turns and the checkpoints
// of running ones, bounded by persistTimeout: the write of one turn under
// its turn's context without its cancellation (the request's values, for
// a host's tracing; a turn outlives its stream's reader), a transaction of
// several turns' checkpoints under a context of its own. At most maxPersistWrites
// writes run at once, whatever the number of turns: when the database is
// the bottleneck, turns end later rather than openings waiting behind
// their writes for a connection. It does not merge the final writes of
// concurrent calls: a transaction of many would hold its connection for a
// round trip per statement on PostgreSQL, and SQLite's group commit merges
// them already. A turn's checkpoint is never stored after its final
// messages: a finishing turn gives no checkpoint, and its final write
// waits for the checkpoint being written (turn.ckptWriting).
type persister struct {
	st    store.Store
	slots chan struct{} // a write in flight holds one
}

func newPersister(st store.Store) *persister {
	return &persister{st: st, slots: make(chan struct{}, maxPersistWrites)}
}

// threadWrite is one AppendMessages of a transaction.
type threadWrite struct {
	ctx       context.Context // the turn's (nil: none)
	accountID int64
	chatID    string
	lastSort  int64 // the thread's new last sort; 0 when the stored one covers the write
	msgs      []Message
	err       error

	// A checkpoint's: the turn, its sequence position and the completed
	// messages it covers.
	t    *turn
	next int64
	done int
}

// final stores a finishing turn's messages and returns once they are
// stored.
func (p *persister) final(w threadWrite) error {
	p.write([]*threadWrite{&w})
	return w.err
}

// checkpoint stores the checkpoints of turns (those not being stored
// already), each taken just before its transaction, so that when the
// database is slower than the turns stream, a checkpoint covers more
// progress rather than checkpoints piling up.
func (p *persister) checkpoint(turns []*turn) {
	queued := turns[:0:0]
	for _, t := range turns {
		if t.queueCheckpoint() {
			queued = append(queued, t)
		}
	}
	size := max(maxPersistBatch, (len(queued)+persistSplit-1)/persistSplit)
	for len(queued) > 0 {
		n := min(len(queued), size)
		ws := make([]threadWrite, 0, n)
		for _, t := range queued[:n] {
			if w, ok := t.checkpointWrite(); ok {
				ws = append(ws, w)
			}
		}
		queued = queued[n:]
		ptrs := make([]*threadWrite, len(ws))
		for i := range ws {
			ptrs[i] = &ws[i]
		}
		p.write(ptrs)
		for i := range ws {
			ws[i].t.checkpointed(&ws[i])
		}
	}
}

// write stores ws in one transaction (one write: as the store does it),
// once a slot is free.
func (p *persister) write(ws []*threadWrite) {
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
	if len(ss) == 0 {
		return
	}
	p.slots <- struct{}{} // after encoding: a slot is held for the database only
	defer func() { <-p.slots }()
	if len(ss) > 1 {
		ctx, cancel := context.WithTimeout(context.Background(), persistTimeout)
		err := p.st.InTx(ctx, func(tx store.Tx) error {
			for _, s := range ss {
				if err := tx.AppendMessages(ctx, s.w.accountID, s.w.chatID, s.w.lastSort, s.msgs); err != nil {
					return err
				}
			}
			return nil
		})
		cancel()
		// An unreachable database fails them all alike.
		if err == nil || errors.Is(err, store.ErrUnavailable) {
			for _, s := range ss {
				s.w.err = err
			}
			return
		}
	}
	// One write (the store makes it atomic, in fewer round trips where it
	// can), or a batch that failed for a thread of its own (deleted
	// meanwhile): thread by thread, so that one bad thread does not fail
	// the others.
	for _, s := range ss {
		ctx := context.Background()
		if s.w.ctx != nil {
			ctx = context.WithoutCancel(s.w.ctx)
		}
		ctx, cancel := context.WithTimeout(ctx, persistTimeout)
		s.w.err = p.st.AppendMessages(ctx, s.w.accountID, s.w.chatID, s.w.lastSort, s.msgs)
		cancel()
	}
}
