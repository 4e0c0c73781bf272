package chatstream_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/apitest"
)

// fakeDeleter pretends to hold expired rows and records its calls.
type fakeDeleter struct {
	mu      sync.Mutex
	expired int
	calls   []int // limit of each call
}

func (f *fakeDeleter) DeleteExpired(_ context.Context, _ time.Time, limit int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, limit)
	n := min(limit, f.expired)
	f.expired -= n
	return n, nil
}

func (f *fakeDeleter) add(n int) {
	f.mu.Lock()
	f.expired += n
	f.mu.Unlock()
}

func (f *fakeDeleter) state() (int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.expired, len(f.calls)
}

func TestReaperLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeDeleter{expired: 25}
		r := chatstream.NewReaper(f, time.Minute, chatstream.WithReapBatch(10))
		r.Start()
		r.Start() // no second loop
		synctest.Wait()
		// At start: batches of 10, 10, 5.
		if left, calls := f.state(); left != 0 || calls != 3 {
			t.Fatalf("after start: %d left, %d calls; want 0 and 3", left, calls)
		}
		f.add(10)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if left, _ := f.state(); left != 10 {
			t.Fatalf("reaped before the interval: %d left", left)
		}
		time.Sleep(31 * time.Second)
		synctest.Wait()
		// 10 is a full batch, so a second call finds nothing.
		if left, calls := f.state(); left != 0 || calls != 5 {
			t.Fatalf("after one interval: %d left, %d calls; want 0 and 5", left, calls)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil { // idempotent
			t.Fatal(err)
		}
		time.Sleep(10 * time.Minute)
		if _, calls := f.state(); calls != 5 {
			t.Errorf("reaper ran after Close: %d calls", calls)
		}
	})
}

// TestReaperDeletesExpiredRows: on a real store, behind real HTTP, the
// reaper deletes the expired ephemeral user, the session ids (used or
// expired), the expired token and the expired new-user window, and only
// them.
func TestReaperDeletesExpiredRows(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{})
		reaper := chatstream.NewReaper(e.Store, time.Hour, chatstream.WithClock(e.Now), chatstream.WithReapBatch(2))
		body := map[string]any{"deploymentId": 1, "externalId": "keeper"}
		used := e.GenerateSession(t, body)
		e.GenerateSession(t, body)
		e.GenerateSession(t, body)
		e.Token(t, used)
		ttl := int64(3600)
		collect(t, e.client, chatstream.Request{Input: "echo:x", SessionSettings: &chatstream.SessionSettings{ExternalID: "brief", EphemeralTTLSeconds: &ttl}})

		// Nothing has expired yet but the used session id.
		if n, err := reaper.ReapOnce(t.Context()); err != nil || n != 1 {
			t.Fatalf("ReapOnce at once = %d, %v; want the used session id", n, err)
		}
		e.Advance(25 * time.Hour) // past the session ids, the token, the user and the window
		live := e.GenerateSession(t, body)
		n, err := reaper.ReapOnce(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		// The user, two session ids, the token and the window.
		if n != 5 {
			t.Errorf("ReapOnce after expiry = %d, want 5", n)
		}
		if n, err := reaper.ReapOnce(t.Context()); err != nil || n != 0 {
			t.Errorf("ReapOnce again = %d, %v; want 0", n, err)
		}
		e.Token(t, live) // what has not expired still works
	})
}
