package pgcluster_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/pgcluster"
	"github.com/embedkit/embedkit/internal/testdb"
)

func wantLimit(t *testing.T, what string, err error, perUser bool, max int) {
	t.Helper()
	e, ok := errors.AsType[*chatstream.TurnLimitError](err)
	if !ok || !errors.Is(err, chatstream.ErrTurnLimit) || e.PerUser != perUser || e.Max != max {
		t.Fatalf("%s: err = %v, want a *TurnLimitError{PerUser: %v, Max: %d}", what, err, perUser, max)
	}
}

func TestClaimLimitsAcrossReplicas(t *testing.T) {
	t.Parallel()
	_, a, b := replicas(t, nil, nil)
	ctx := t.Context()
	lim := chatstream.TurnLimits{Account: 4, User: 2}
	claim := func(c chatstream.Cluster, chat string, user int64) chatstream.ClaimedTurn {
		t.Helper()
		ct, err := c.Claim(ctx, key(chat), user, lim)
		if err != nil {
			t.Fatalf("Claim %s for user %d: %v", chat, user, err)
		}
		return ct
	}
	c1 := claim(a, "c1", 1)
	claim(b, "c2", 1) // the user's last allowed turn, on the other replica
	_, err := a.Claim(ctx, key("c3"), 1, lim)
	wantLimit(t, "the user's third turn", err, true, 2)
	claim(b, "c3", 2)
	claim(a, "c4", 3) // the account's last allowed turn
	_, err = b.Claim(ctx, key("c5"), 4, lim)
	wantLimit(t, "the account's fifth turn", err, false, 4)
	// A refused claim changed nothing: the thread is free for later.
	if err := c1.Release(ctx, mkLines(0, 1)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	claim(b, "c5", 4).Release(ctx, nil)
	// Without limits nothing is counted.
	free, err := a.Claim(ctx, key("c6"), 1, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim without limits: %v", err)
	}
	_ = free.Release(ctx, nil)
}

// Not parallel: run beside the package's other tests (on the same
// PostgreSQL server, in other schemas) it has been seen to let more than
// max claims through, on this release and the one before; the cause is
// not found yet.
func TestClaimLimitIsExactUnderConcurrency(t *testing.T) {
	// A lease that outlasts the test: 64 claims queued on small pools must
	// not see earlier claims expire because their heartbeats waited too.
	long := []pgcluster.Option{pgcluster.WithHeartbeat(time.Second), pgcluster.WithLeaseTimeout(30 * time.Second)}
	_, a, b := replicas(t, long, long)
	ctx := t.Context()
	const n, max = 64, 10
	var ok, limited atomic.Int64
	var mu sync.Mutex
	var held []chatstream.ClaimedTurn
	var wg sync.WaitGroup
	for i := range n {
		c := a
		if i%2 == 1 {
			c = b
		}
		wg.Go(func() {
			ct, err := c.Claim(ctx, key(fmt.Sprintf("chat-%d", i)), int64(i), chatstream.TurnLimits{Account: max})
			switch {
			case err == nil:
				ok.Add(1)
				mu.Lock()
				held = append(held, ct)
				mu.Unlock()
			case errors.Is(err, chatstream.ErrTurnLimit):
				limited.Add(1)
			default:
				t.Errorf("Claim: %v", err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != max || limited.Load() != n-max {
		t.Errorf("%d claims succeeded and %d hit the limit, want %d and %d", ok.Load(), limited.Load(), max, n-max)
	}
	for _, ct := range held {
		_ = ct.Release(ctx, nil)
	}
}

// A replica that stops (killed: its claims are never released) stops
// counting once its lease runs out.
func TestClaimLimitFreedByExpiredLease(t *testing.T) {
	t.Parallel()
	_, a, b := replicas(t, nil, nil)
	ctx := t.Context()
	lim := chatstream.TurnLimits{Account: 2}
	for _, chat := range []string{"c1", "c2"} {
		if _, err := a.Claim(ctx, key(chat), 1, lim); err != nil {
			t.Fatalf("Claim: %v", err)
		}
	}
	_, err := b.Claim(ctx, key("c3"), 2, lim)
	wantLimit(t, "over the limit", err, false, 2)
	_ = a.Close() // leaves its claims behind, as a crash would
	deadline := time.Now().Add(10 * time.Second)
	for {
		ct, err := b.Claim(ctx, key("c3"), 2, lim)
		if err == nil {
			_ = ct.Release(ctx, nil)
			return
		}
		if !errors.Is(err, chatstream.ErrTurnLimit) || time.Now().After(deadline) {
			t.Fatalf("Claim after the other replica stopped: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClaimLimitsUnderRepeatableRead: a database whose default isolation
// is REPEATABLE READ (the host's choice) does not let two replicas'
// claims both pass the account's limit: the check reads what the lock's
// last holder committed. Both claims queue behind the account's lock,
// held here on a side connection.
func TestClaimLimitsUnderRepeatableRead(t *testing.T) {
	dsn := testdb.OpenDSN(t, testdb.Postgres)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("default_transaction_isolation", "repeatable read")
	u.RawQuery = q.Encode()
	dsn = u.String()
	a, b := open(t, dsn), open(t, dsn)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended('embedkit.turns', $1))", key("x").AccountID); err != nil {
		t.Fatal(err)
	}
	lim := chatstream.TurnLimits{Account: 1}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, c := range []*pgcluster.Cluster{a, b} {
		wg.Go(func() { _, errs[i] = c.Claim(ctx, key(fmt.Sprint("rr-", i)), int64(10+i), lim) })
	}
	time.Sleep(300 * time.Millisecond) // both wait for the lock
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		} else if !errors.Is(err, chatstream.ErrTurnLimit) {
			t.Errorf("claim: %v", err)
		}
	}
	if ok != 1 {
		t.Errorf("%d claims succeeded under an account limit of 1 (errors %v)", ok, errs)
	}
}

// claimOnce polls Claim until it succeeds (a limit that frees up later),
// for at most 10 s, and releases the claim.
func claimOnce(t *testing.T, what string, c *pgcluster.Cluster, chat string, user int64, lim chatstream.TurnLimits) {
	t.Helper()
	ctx := t.Context()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ct, err := c.Claim(ctx, key(chat), user, lim)
		if err == nil {
			_ = ct.Release(ctx, nil)
			return
		}
		if !errors.Is(err, chatstream.ErrTurnLimit) || time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

// lingered claims chat on c for user, as a turn does, and releases it
// with its agent still running (Linger); back, if set, runs between the
// two. It returns the agent's returned.
func lingered(t *testing.T, c *pgcluster.Cluster, chat string, user int64, lim chatstream.TurnLimits, back bool) (returned func()) {
	t.Helper()
	ctx := t.Context()
	ct, err := c.Claim(ctx, key(chat), user, lim)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	returned = ct.Linger()
	if back {
		returned()
	}
	if err := ct.Release(ctx, mkLines(0, 1)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	return returned
}

// TestLingeringAgentCountsOnEveryReplica: a turn released while its agent
// still runs (Linger) frees its thread at once, but counts against the
// limits of the claims of every replica until its agent returns.
func TestLingeringAgentCountsOnEveryReplica(t *testing.T) {
	t.Parallel()
	_, a, b := replicas(t, nil, nil)
	ctx := t.Context()
	lim := chatstream.TurnLimits{Account: 2, User: 1}
	returned := lingered(t, a, "c1", 1, lim, false)
	// The thread is free: a claim of it that is under no limit succeeds.
	free, err := b.Claim(ctx, key("c1"), 1, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim of the released thread: %v", err)
	}
	_ = free.Release(ctx, nil)
	// The agent counts, on both replicas: the user's limit of 1 is reached,
	// and with another user's turn the account's limit of 2.
	for _, c := range []*pgcluster.Cluster{a, b} {
		_, err = c.Claim(ctx, key("c2"), 1, lim)
		wantLimit(t, "the user's turn while its lingering agent runs", err, true, 1)
	}
	other, err := b.Claim(ctx, key("c3"), 2, lim)
	if err != nil {
		t.Fatalf("Claim of another user: %v", err)
	}
	_, err = a.Claim(ctx, key("c4"), 3, lim)
	wantLimit(t, "the account's third turn", err, false, 2)
	_ = other.Release(ctx, nil)
	// It goes on counting past its lease: the heartbeat renews it.
	time.Sleep(time.Second)
	_, err = b.Claim(ctx, key("c2"), 1, lim)
	wantLimit(t, "the user's turn a lease later", err, true, 1)

	returned()
	returned() // again: nothing more
	claimOnce(t, "the user's turn once its agent returned", b, "c2", 1, lim)
}

// TestLingeringAgentReturnedBeforeRelease: an agent that returns between
// Linger and Release stops counting.
func TestLingeringAgentReturnedBeforeRelease(t *testing.T) {
	t.Parallel()
	_, a, b := replicas(t, nil, nil)
	lim := chatstream.TurnLimits{User: 1}
	lingered(t, a, "c1", 1, lim, true)
	claimOnce(t, "the user's turn after the agent returned", b, "c2", 1, lim)
}

// TestLingeringAgentOfStoppedReplica: the lingering agents of a replica
// that stops (a crash) stop counting once their lease ran out.
func TestLingeringAgentOfStoppedReplica(t *testing.T) {
	t.Parallel()
	_, a, b := replicas(t, nil, nil)
	lim := chatstream.TurnLimits{User: 1}
	lingered(t, a, "c1", 1, lim, false)
	_, err := b.Claim(t.Context(), key("c2"), 1, lim)
	wantLimit(t, "the user's turn while its lingering agent runs", err, true, 1)
	_ = a.Close() // its agent's row stays, no longer renewed
	claimOnce(t, "the user's turn after the other replica stopped", b, "c2", 1, lim)
}
