package chatstream

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/embedkit/embedkit/internal/nilarg"
)

// ExpiredDeleter is what a [Reaper] uses. Every store.Store implements
// it.
type ExpiredDeleter interface {
	// DeleteExpired deletes, at now, at most limit rows of each kind of
	// what has expired (session ids, used ones included, tokens, quota
	// counters, and ephemeral users with everything they own), and returns
	// how many it deleted in all; fewer than limit means nothing expired
	// is left.
	DeleteExpired(ctx context.Context, now time.Time, limit int) (int, error)
}

// Reaper is the store's janitor: in the background it deletes expired
// ephemeral users with their threads, and the session ids, tokens and
// quota counters (such as the new-ephemeral-user windows) that expired.
// Expired rows are already invisible to every request; the reaper reclaims
// them, so that the tables stop growing. It serves embedsession's session
// ids and tokens too: a host that mounts only embedsession runs one all the
// same. The host starts it with [Reaper.Start] and stops it with
// [Reaper.Close]; several processes may run one at once.
type Reaper struct {
	st       ExpiredDeleter
	interval time.Duration
	cfg      config

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewReaper returns a reaper that runs every interval. An interval of 0
// stands for [DefaultReapInterval], since a positional argument cannot be
// left out the way an option can; a negative one cannot be meant and
// panics, as an invalid option value does, rather than being replaced by
// the default. It does nothing until [Reaper.Start].
//
// Its options are [WithReapBatch], [WithClock] and [WithLogger]. A nil st
// (or a nil pointer in it) panics here rather than in every reap.
func NewReaper(st ExpiredDeleter, interval time.Duration, opts ...ReaperOption) *Reaper {
	nilarg.Check("chatstream: NewReaper", "store", st)
	if interval < 0 {
		panic(fmt.Sprintf("chatstream: NewReaper: interval must not be negative, got %v (0 for DefaultReapInterval)", interval))
	}
	if interval == 0 {
		interval = DefaultReapInterval
	}
	return &Reaper{st: st, interval: interval, cfg: newReaperConfig(opts)}
}

// Start runs the reaper on its own goroutine until [Reaper.Close]. It reaps
// once at once, then every interval. Calls after the first do nothing.
func (r *Reaper) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return
	}
	r.started = true
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.done = make(chan struct{})
	done := r.done
	go func() {
		defer close(done)
		r.run(ctx)
	}()
}

// Close stops the reaper and waits for its goroutine to end. It is safe to
// call more than once, and without Start.
func (r *Reaper) Close() error {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.started = true // a later Start does nothing
	r.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return nil
}

func (r *Reaper) run(ctx context.Context) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		if _, err := r.ReapOnce(ctx); err != nil && ctx.Err() == nil && r.cfg.log != nil {
			r.cfg.log.LogAttrs(ctx, slog.LevelError, "deleting expired users, sessions and tokens failed", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ReapOnce deletes every user, session id, token and quota counter expired
// now, in batches, and returns how many rows it deleted (users counted
// once, without what they own). The background loop calls it; tests and
// cron-style hosts may call it directly.
func (r *Reaper) ReapOnce(ctx context.Context) (int, error) {
	now := r.cfg.now()
	total := 0
	for {
		n, err := r.st.DeleteExpired(ctx, now, r.cfg.reapBatch)
		total += n
		if err != nil || n < r.cfg.reapBatch {
			return total, err
		}
	}
}
