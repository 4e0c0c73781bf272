package pgcluster

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/testdb"
)

// TestPublishIsBatched checks that lines published one at a time, as an
// agent streams content pieces, are written at most once per publish
// interval for all turns together, never once per line.
func TestPublishIsBatched(t *testing.T) {
	t.Parallel()
	dsn := testdb.OpenDSN(t, testdb.Postgres)
	c, err := New(t.Context(), dsn, WithPublishInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()

	var turns []chatstream.ClaimedTurn
	for i := range 3 {
		ct, err := c.Claim(ctx, chatstream.ThreadKey{AccountID: 1, ChatID: "c" + strconv.Itoa(i)}, 7, chatstream.TurnLimits{})
		if err != nil {
			t.Fatal(err)
		}
		turns = append(turns, ct)
	}
	before := c.flushes.Load()
	start := time.Now()
	const pieces = 300
	for i := range pieces {
		for _, ct := range turns {
			ct.Publish([]chatstream.Line{{Sort: int64(i + 1), Data: []byte("{}\n")}})
		}
		time.Sleep(time.Millisecond)
	}
	for _, ct := range turns {
		if err := ct.Release(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	writes := c.flushes.Load() - before
	// One write per interval, one more at each end, one per Release.
	limit := int64(elapsed/(50*time.Millisecond)) + 2 + int64(len(turns))
	t.Logf("%d lines of %d turns in %v: %d writes (limit %d)", pieces*len(turns), len(turns), elapsed, writes, limit)
	if writes > limit {
		t.Errorf("%d writes in %v, want at most %d", writes, elapsed, limit)
	}

	var n int
	if err := c.pool.QueryRow(ctx, `SELECT count(*) FROM embedkit_turn_lines WHERE NOT eof`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != pieces*len(turns) {
		t.Errorf("%d lines stored, want %d", n, pieces*len(turns))
	}
}

// TestListenConnectionIsPinged checks that an idle LISTEN connection is
// pinged, and that notifications still arrive between pings.
func TestListenConnectionIsPinged(t *testing.T) {
	t.Parallel()
	dsn := testdb.OpenDSN(t, testdb.Postgres)
	c, err := New(t.Context(), dsn, func(c *config) { c.listenPing = 20 * time.Millisecond })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()
	deadline := time.Now().Add(5 * time.Second)
	for c.pings.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d pings in 5s, want 3", c.pings.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	k := chatstream.ThreadKey{AccountID: 1, ChatID: "c1"}
	ct, err := c.Claim(ctx, k, 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatal(err)
	}
	// Abort through the database only, as another replica would.
	if _, err := c.pool.Exec(ctx, `SELECT pg_notify($1, turn_id) FROM embedkit_turns`, chanAbort); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ct.Aborted():
	case <-time.After(5 * time.Second):
		t.Fatal("notification lost between pings")
	}
	_ = ct.Release(ctx, nil)
}

// TestOwnStaleClaimIsTakenOver checks that a claim this replica left behind
// (its release failed while the database was away) does not block the
// thread on this replica, while other replicas still respect it until its
// lease expires.
func TestOwnStaleClaimIsTakenOver(t *testing.T) {
	t.Parallel()
	dsn := testdb.OpenDSN(t, testdb.Postgres)
	ctx := t.Context()
	a, err := New(ctx, dsn, WithReplicaID("a"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	b, err := New(ctx, dsn, WithReplicaID("b"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })

	k := chatstream.ThreadKey{AccountID: 1, ChatID: "stale"}
	ct, err := a.Claim(ctx, k, 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatal(err)
	}
	// What a failed release leaves: the claim row stays live in the
	// database, but the replica no longer holds it.
	a.mu.Lock()
	delete(a.claims, ct.(*claimedTurn).id)
	a.mu.Unlock()

	if _, err := b.Claim(ctx, k, 7, chatstream.TurnLimits{}); !errors.Is(err, chatstream.ErrTurnElsewhere) {
		t.Errorf("claim on another replica = %v, want ErrTurnElsewhere until the lease expires", err)
	}
	again, err := a.Claim(ctx, k, 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("claim on the same replica = %v, want the stale claim taken over", err)
	}
	if _, err := a.Claim(ctx, k, 7, chatstream.TurnLimits{}); !errors.Is(err, chatstream.ErrTurnElsewhere) {
		t.Errorf("second claim while holding one = %v, want ErrTurnElsewhere", err)
	}
	if err := again.Release(ctx, nil); err != nil {
		t.Fatal(err)
	}
}
