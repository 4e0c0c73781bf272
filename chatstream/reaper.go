package chatstream

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// ExpiredUserDeleter is what a [Reaper] uses. Every store.Store implements
// it.
type ExpiredUserDeleter interface {
	// DeleteExpiredUsers deletes at most limit ephemeral users expired at
	// now, with everything they own (threads included), and returns how
	// many it deleted.
	DeleteExpiredUsers(ctx context.Context, now time.Time, limit int) (int, error)
}

// Reaper deletes expired ephemeral users, with their threads, in the
// background. Expired users are already invisible to every request; the
// reaper reclaims their rows. The host starts it with [Reaper.Start] and
// stops it with [Reaper.Close]; several processes may run one at once.
type Reaper struct {
	st       ExpiredUserDeleter
	interval time.Duration
	cfg      config

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewReaper returns a reaper that runs every interval ([DefaultReapInterval]
// when interval ≤ 0). It does nothing until [Reaper.Start].
//
// Its options are [WithReapBatch], [WithClock] and [WithLogger].
func NewReaper(st ExpiredUserDeleter, interval time.Duration, opts ...ReaperOption) *Reaper {
	if interval <= 0 {
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
			r.cfg.log.LogAttrs(ctx, slog.LevelError, "reaping expired chat users failed", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ReapOnce deletes every user expired now, in batches, and returns how many
// it deleted. The background loop calls it; tests and cron-style hosts may
// call it directly.
func (r *Reaper) ReapOnce(ctx context.Context) (int, error) {
	total := 0
	now := r.cfg.now()
	for {
		n, err := r.st.DeleteExpiredUsers(ctx, now, r.cfg.reapBatch)
		total += n
		if err != nil || n < r.cfg.reapBatch {
			return total, err
		}
	}
}
