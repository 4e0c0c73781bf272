package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
		rt, ok, err := c.Join(ctx, ct.(*claimedTurn).key)
		if !ok || err != nil {
			t.Fatalf("Join = %v, %v", ok, err)
		}
		if ok, err := rt.(*remoteTurn).ask(ctx); !ok || err != nil { // a reader: the lines are written
			t.Fatalf("ask = %v, %v", ok, err)
		}
	}
	before := c.flushes.Load()
	start := time.Now()
	const pieces = 300
	var log []chatstream.Line
	for i := range pieces {
		log = append(log, chatstream.Line{Sort: int64(i + 1), Data: []byte("{}\n")})
		for _, ct := range turns {
			ct.Publish(log)
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
	case <-AbortedOf(ct):
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
	_, a, b := twoReplicas(t)
	ctx := t.Context()

	k := chatstream.ThreadKey{AccountID: 1, ChatID: "stale"}
	ct, err := a.Claim(ctx, k, 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatal(err)
	}
	// What a failed release leaves: the claim row stays live in the
	// database, but the replica no longer holds it.
	a.mu.Lock()
	delete(a.claims, ct.(*claimedTurn).id)
	delete(a.threads, ct.(*claimedTurn).key)
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

// TestReleasesAreBatched checks that turns ending together are ended in one
// write, each Release with its own result: here one write for the first
// release (held on a row lock), one for the releases that came meanwhile,
// among them one whose claim was taken over (ErrTurnLost, and the new turn
// is left running).
func TestReleasesAreBatched(t *testing.T) {
	t.Parallel()
	dsn, a, b := twoReplicas(t)
	ctx := t.Context()
	conn := connect(t, dsn)

	const n, lost = 40, 7
	var turns []*claimedTurn
	for i := range n {
		ct, err := a.Claim(ctx, chatstream.ThreadKey{AccountID: 1, ChatID: "c" + strconv.Itoa(i)}, 7, chatstream.TurnLimits{})
		if err != nil {
			t.Fatal(err)
		}
		rt, ok, err := b.Join(ctx, ct.(*claimedTurn).key)
		if !ok || err != nil {
			t.Fatalf("Join = %v, %v", ok, err)
		}
		if ok, err := rt.(*remoteTurn).ask(ctx); !ok || err != nil { // a reader: the lines are written
			t.Fatalf("ask = %v, %v", ok, err)
		}
		ct.Publish([]chatstream.Line{{Sort: 1, Data: []byte("{}\n")}, {Sort: 2, Data: []byte("{}\n")}})
		turns = append(turns, ct.(*claimedTurn))
	}
	// A stalls on turn lost past the lease and B takes it over (the owner
	// is renamed, or A's next heartbeat could renew the row first).
	if _, err := conn.Exec(ctx, `UPDATE embedkit_turns SET heartbeat_at = now() - interval '1 hour', owner = 'stalled'
		WHERE turn_id = $1`, turns[lost].id); err != nil {
		t.Fatal(err)
	}
	next, err := b.Claim(ctx, turns[lost].key, 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("takeover: %v", err)
	}
	// The published lines are written before the releases start.
	deadline := time.Now().Add(5 * time.Second)
	for {
		var lines int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM embedkit_turn_lines`).Scan(&lines); err != nil {
			t.Fatal(err)
		}
		if lines == 2*n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d lines written in 5s, want %d", lines, 2*n)
		}
		time.Sleep(10 * time.Millisecond)
	}

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM embedkit_turns WHERE turn_id = $1 FOR UPDATE`, turns[0].id); err != nil {
		t.Fatal(err)
	}
	before := a.flushes.Load()
	errs := make([]error, n)
	var wg sync.WaitGroup
	release := func(i int) {
		wg.Go(func() {
			errs[i] = turns[i].Release(ctx, []chatstream.Line{{Sort: 3, State: true, Data: []byte(`{"state":` + strconv.Itoa(i) + "}\n")}})
		})
	}
	release(0)
	deadline = time.Now().Add(5 * time.Second)
	for a.flushes.Load() == before { // the first write waits for the row lock
		if time.Now().After(deadline) {
			t.Fatal("the first release was not written within 5s")
		}
		time.Sleep(time.Millisecond)
	}
	for i := 1; i < n; i++ {
		release(i)
	}
	for { // every release waits
		a.mu.Lock()
		waiting := 0
		for _, ct := range a.claims {
			if ct.released {
				waiting++
			}
		}
		a.mu.Unlock()
		if waiting == n {
			break
		}
		if time.Now().After(deadline) {
			_ = tx.Rollback(ctx)
			wg.Wait()
			t.Fatalf("%d of %d releases waiting for a write after 5s, want all", waiting, n)
		}
		time.Sleep(time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	if writes := a.flushes.Load() - before; writes != 2 {
		t.Errorf("%d releases in %d writes, want 2", n, writes)
	}
	for i, err := range errs {
		if i == lost {
			if !errors.Is(err, chatstream.ErrTurnLost) {
				t.Errorf("Release of the claim taken over = %v, want ErrTurnLost", err)
			}
		} else if err != nil {
			t.Errorf("Release %d = %v", i, err)
		}
	}
	for i, ct := range turns {
		var lines, eofAt int
		var ended bool
		if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE NOT eof), coalesce(min(seq) FILTER (WHERE eof), -1),
				coalesce((SELECT ended_at IS NOT NULL FROM embedkit_turns WHERE turn_id = $1), false)
			FROM embedkit_turn_lines WHERE turn_id = $1`, ct.id).Scan(&lines, &eofAt, &ended); err != nil {
			t.Fatal(err)
		}
		if lines != 3 || eofAt != 3 || ended != (i != lost) {
			t.Errorf("turn %d: %d lines, eof at %d, ended %v; want 3 lines, eof at 3, ended %v", i, lines, eofAt, ended, i != lost)
		}
	}
	if _, ok, err := a.Join(ctx, turns[lost].key); !ok || err != nil {
		t.Errorf("Join of the turn that took over = %v, %v: the old owner's Release ended it", ok, err)
	}
	if err := next.Release(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// twoReplicas returns replicas "a" and "b" on one fresh schema, closed in
// t.Cleanup.
func twoReplicas(t *testing.T) (dsn string, a, b *Cluster) {
	t.Helper()
	dsn = testdb.OpenDSN(t, testdb.Postgres)
	open := func(id string) *Cluster {
		c, err := New(t.Context(), dsn, WithReplicaID(id))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	return dsn, open("a"), open("b")
}

// TestPoolSize checks the size of the cluster's pool: four connections per
// GOMAXPROCS, at least 16, unless the DSN's pool_max_conns sets it.
func TestPoolSize(t *testing.T) {
	t.Parallel()
	dsn := testdb.OpenDSN(t, testdb.Postgres)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	for _, tc := range []struct {
		dsn  string
		want int32
	}{
		{dsn, int32(max(16, 4*runtime.GOMAXPROCS(0)))},
		{dsn + sep + "pool_max_conns=3", 3},
	} {
		c, err := New(t.Context(), tc.dsn)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.pool.Config().MaxConns; got != tc.want {
			t.Errorf("pool size %d, want %d", got, tc.want)
		}
		_ = c.Close()
	}
}

// AbortedOf returns a channel closed when ct's abort function runs (for
// this package's tests and pgcluster_test's).
func AbortedOf(ct chatstream.ClaimedTurn) <-chan struct{} {
	ch := make(chan struct{})
	ct.AfterAbort(func() { close(ch) })
	return ch
}

// TestJoinDuringQuietRelease checks the race of a reader's join with the
// end of a turn nobody watched: the join commits after the flusher read
// the turn as unwatched and before its end is written. The turn is not
// ended then; its lines and eof row are written first, so the reader reads
// the whole turn.
func TestJoinDuringQuietRelease(t *testing.T) {
	t.Parallel()
	dsn, a, _ := twoReplicas(t)
	ctx := t.Context()
	conn := connect(t, dsn)
	c, err := a.Claim(ctx, chatstream.ThreadKey{AccountID: 1, ChatID: "c1"}, 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatal(err)
	}
	ct := c.(*claimedTurn)
	ct.Publish([]chatstream.Line{{Sort: 1, Data: []byte("{}\n")}, {Sort: 2, Data: []byte("{}\n")}})

	// Hold the claim's row, so that the release's write waits for it.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM embedkit_turns WHERE turn_id = $1 FOR UPDATE`, ct.id); err != nil {
		t.Fatal(err)
	}
	before := a.flushes.Load()
	released := make(chan error, 1)
	go func() {
		released <- ct.Release(ctx, []chatstream.Line{{Sort: 3, State: true, Data: []byte("{\"state\":1}\n")}})
	}()
	for deadline := time.Now().Add(5 * time.Second); a.flushes.Load() == before; {
		if time.Now().After(deadline) {
			t.Fatal("the release was not written within 5s")
		}
		time.Sleep(time.Millisecond)
	}
	// A join, as Join writes it, commits first (its notification is left
	// out: the release's own write must find it).
	if _, err := tx.Exec(ctx, `UPDATE embedkit_turns SET watched = true WHERE turn_id = $1`, ct.id); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-released:
		if err != nil {
			t.Fatalf("Release: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Release did not return")
	}
	var lines, eofAt int
	var ended bool
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE NOT eof), coalesce(min(seq) FILTER (WHERE eof), -1),
			(SELECT ended_at IS NOT NULL FROM embedkit_turns WHERE turn_id = $1)
		FROM embedkit_turn_lines WHERE turn_id = $1`, ct.id).Scan(&lines, &eofAt, &ended); err != nil {
		t.Fatal(err)
	}
	if lines != 3 || eofAt != 3 || !ended {
		t.Errorf("%d lines, eof at %d, ended %v; want 3 lines, eof at 3, ended", lines, eofAt, ended)
	}
}

// TestJoinDuringCloseOfQuietRelease: a release that is still waiting for
// its write when Close comes, and a reader's ask that commits before
// Close's last write (the write that ends the turn). That write finds the
// turn watched and leaves it running; Close writes again: the lines, the
// eof row and ended_at, and Release returns nil.
func TestJoinDuringCloseOfQuietRelease(t *testing.T) {
	t.Parallel()
	dsn, a, _ := twoReplicas(t)
	ctx := t.Context()
	conn := connect(t, dsn)
	c, err := a.Claim(ctx, chatstream.ThreadKey{AccountID: 1, ChatID: "c1"}, 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatal(err)
	}
	ct := c.(*claimedTurn)
	ct.Publish([]chatstream.Line{{Sort: 1, Data: []byte("{}\n")}, {Sort: 2, Data: []byte("{}\n")}})

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM embedkit_turns WHERE turn_id = $1 FOR UPDATE`, ct.id); err != nil {
		t.Fatal(err)
	}
	waitFlushes := func(n int64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); a.flushes.Load() < n; {
			if time.Now().After(deadline) {
				t.Fatalf("%d writes within 5s, want %d", a.flushes.Load(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	before := a.flushes.Load()
	released := make(chan error, 1)
	go func() {
		released <- ct.Release(ctx, []chatstream.Line{{Sort: 3, State: true, Data: []byte("{\"state\":1}\n")}})
	}()
	waitFlushes(before + 1) // the release's write waits for the row
	closed := make(chan struct{})
	go func() { _ = a.Close(); close(closed) }()
	waitFlushes(before + 2) // Close's last write, waiting for the row too
	// A reader joins (Join's UPDATE) while Close's last write waits.
	if _, err := tx.Exec(ctx, `UPDATE embedkit_turns SET watched = true WHERE turn_id = $1`, ct.id); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	<-closed
	if err := <-released; err != nil {
		t.Errorf("Release = %v, want nil (the last write can end the turn)", err)
	}
	var lines int
	var ended bool
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM embedkit_turn_lines WHERE turn_id = $1),
			ended_at IS NOT NULL FROM embedkit_turns WHERE turn_id = $1`, ct.id).Scan(&lines, &ended); err != nil {
		t.Fatal(err)
	}
	if lines != 4 || !ended {
		t.Errorf("after Close: %d rows of lines, ended %v; want 4 (3 lines, eof) and ended", lines, ended)
	}
}

// TestNewAddsWatchedToAnEarlierTable checks that New adds the watched
// column to the claims table an earlier release created, and that New on
// a table that has it changes nothing.
func TestNewAddsWatchedToAnEarlierTable(t *testing.T) {
	t.Parallel()
	dsn := testdb.OpenDSN(t, testdb.Postgres)
	ctx := t.Context()
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, `CREATE TABLE embedkit_turns (
		account_id bigint NOT NULL, chat_id text NOT NULL, turn_id text NOT NULL UNIQUE, owner text NOT NULL,
		user_id bigint NOT NULL, claimed_at timestamptz NOT NULL DEFAULT now(), heartbeat_at timestamptz NOT NULL DEFAULT now(),
		abort_requested boolean NOT NULL DEFAULT false, ended_at timestamptz, PRIMARY KEY (account_id, chat_id))`); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		c, err := New(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		k := chatstream.ThreadKey{AccountID: 1, ChatID: "c1"}
		ct, err := c.Claim(ctx, k, 7, chatstream.TurnLimits{})
		if err != nil {
			t.Fatal(err)
		}
		rt, ok, err := c.Join(ctx, k)
		if !ok || err != nil {
			t.Fatalf("Join = %v, %v", ok, err)
		}
		if ok, err := rt.(*remoteTurn).ask(ctx); !ok || err != nil {
			t.Fatalf("ask = %v, %v", ok, err)
		}
		if err := ct.Release(ctx, nil); err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
	}
}

// TestLateAskWritesBacklogInBoundedWrites: a turn asked for its lines
// late, with a backlog larger than one write takes, is written over
// several writes, each bounded, beside another turn's end; the reader
// reads every line, then the end.
func TestLateAskWritesBacklogInBoundedWrites(t *testing.T) {
	t.Parallel()
	_, a, b := twoReplicas(t)
	ctx := t.Context()
	long, err := a.Claim(ctx, chatstream.ThreadKey{AccountID: 1, ChatID: "long"}, 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := a.Claim(ctx, chatstream.ThreadKey{AccountID: 1, ChatID: "other"}, 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatal(err)
	}
	const n, size = 40, 256 << 10 // 10 MiB: three writes at least
	var log []chatstream.Line
	for i := range n {
		data := append(bytes.Repeat([]byte{'x'}, size-1), '\n')
		log = append(log, chatstream.Line{Sort: int64(i + 1), Data: data})
	}
	long.Publish(log)
	time.Sleep(100 * time.Millisecond) // nothing is written: nobody asked
	var rows int
	if err := a.pool.QueryRow(ctx, `SELECT count(*) FROM embedkit_turn_lines`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d lines written before a reader asked (%v), want 0", rows, err)
	}

	rt, ok, err := b.Join(ctx, long.(*claimedTurn).key)
	if !ok || err != nil {
		t.Fatalf("Join = %v, %v", ok, err)
	}
	before := a.flushes.Load()
	got, _, err := rt.Next(ctx, 0) // asks for the lines, then reads the first
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	ended := make(chan error, 2)
	go func() { ended <- long.Release(ctx, nil) }()
	go func() { ended <- other.Release(ctx, nil) }()
	for {
		lines, done, err := rt.Next(ctx, len(got))
		got = append(got, lines...)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if done {
			break
		}
	}
	if len(got) != n {
		t.Fatalf("read %d lines, want %d", len(got), n)
	}
	for i, l := range got {
		if l.Sort != int64(i+1) || !bytes.Equal(l.Data, log[i].Data) {
			t.Fatalf("line %d: sort %d, %d bytes", i, l.Sort, len(l.Data))
		}
	}
	for range 2 {
		if err := <-ended; err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	if writes := a.flushes.Load() - before; writes < n*size/maxWriteBytes {
		t.Errorf("%d writes for %d MiB, want at least %d", writes, n*size>>20, n*size/maxWriteBytes)
	}
}

// TestGivenUpReleaseStillEndsWatchedTurn: Release gives up (its ctx
// ends) while the flusher's quiet end waits for the claim's row; a
// reader's ask commits first, so that write leaves the turn running. The
// flusher still writes the turn's lines and its end: the reader reads
// them all.
func TestGivenUpReleaseStillEndsWatchedTurn(t *testing.T) {
	t.Parallel()
	dsn, a, b := twoReplicas(t)
	ctx := t.Context()
	conn := connect(t, dsn)
	k := chatstream.ThreadKey{AccountID: 1, ChatID: "c1"}
	c, err := a.Claim(ctx, k, 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatal(err)
	}
	ct := c.(*claimedTurn)
	ct.Publish([]chatstream.Line{{Sort: 1, Data: []byte("{}\n")}, {Sort: 2, Data: []byte("{}\n")}})
	rt, ok, err := b.Join(ctx, k)
	if !ok || err != nil {
		t.Fatalf("Join = %v, %v", ok, err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM embedkit_turns WHERE turn_id = $1 FOR UPDATE`, ct.id); err != nil {
		t.Fatal(err)
	}
	before := a.flushes.Load()
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	rerr := ct.Release(rctx, []chatstream.Line{{Sort: 3, State: true, Data: []byte("{\"state\":1}\n")}})
	t.Logf("Release (given up) = %v; writes started: %d", rerr, a.flushes.Load()-before)
	// The reader's ask commits before the quiet end that waits for the row.
	if _, err := tx.Exec(ctx, `UPDATE embedkit_turns SET watched = true WHERE turn_id = $1`, ct.id); err != nil {
		t.Fatal(err)
	}
	rt.(*remoteTurn).asked.Store(true) // that ask was rt's
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	nctx, ncancel := context.WithTimeout(ctx, 3*time.Second)
	defer ncancel()
	var got []chatstream.Line
	var done bool
	for !done && err == nil {
		var lines []chatstream.Line
		lines, done, err = rt.Next(nctx, len(got))
		got = append(got, lines...)
	}
	var ended bool
	_ = conn.QueryRow(ctx, `SELECT ended_at IS NOT NULL FROM embedkit_turns WHERE turn_id = $1`, ct.id).Scan(&ended)
	if len(got) != 3 || !done || err != nil {
		t.Errorf("reader: %d lines, done %v, err %v (turn ended: %v); want the 3 lines and done", len(got), done, err, ended)
	}
}

// failEnds makes every statement that ends a claim (ended_at from NULL to
// a time) fail, as a database too slow for the flusher's write would,
// while claims (ended_at stays NULL) succeed. The returned func undoes it.
func failEnds(t *testing.T, dsn string) (conn *pgx.Conn, undo func()) {
	t.Helper()
	ctx := t.Context()
	conn = connect(t, dsn)
	if _, err := conn.Exec(ctx, `CREATE FUNCTION test_fail_ends() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'test: end refused'; END $$`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TRIGGER test_fail_ends BEFORE UPDATE ON embedkit_turns
		FOR EACH ROW WHEN (OLD.ended_at IS NULL AND NEW.ended_at IS NOT NULL) EXECUTE FUNCTION test_fail_ends()`); err != nil {
		t.Fatal(err)
	}
	return conn, func() {
		if _, err := conn.Exec(ctx, `DROP TRIGGER test_fail_ends ON embedkit_turns`); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReclaimWhileGivenUpReleasePending: a Release gives up (its end
// cannot be written), the same replica claims the thread again (the claim
// INSERT takes over its own row), then the database accepts ends again:
// the flusher's late end of the old turn id leaves the new claim running.
func TestReclaimWhileGivenUpReleasePending(t *testing.T) {
	t.Parallel()
	dsn, a, b := twoReplicas(t)
	ctx := t.Context()
	conn, undo := failEnds(t, dsn)
	k := chatstream.ThreadKey{AccountID: 1, ChatID: "c1"}
	old, err := a.Claim(ctx, k, 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatal(err)
	}
	old.Publish([]chatstream.Line{{Sort: 1, Data: []byte("{}\n")}})
	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = old.Release(rctx, nil)
	cancel()
	if err == nil {
		t.Fatal("Release succeeded; the end should have failed")
	}
	oldID := old.(*claimedTurn).id
	nw, err := a.Claim(ctx, k, 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim again: %v", err)
	}
	newID := nw.(*claimedTurn).id
	a.mu.Lock()
	_, kept := a.claims[oldID]
	a.mu.Unlock()
	t.Logf("given-up claim still in c.claims: %v", kept)
	undo()
	// The flusher retries the old end (backoff at most 1 s).
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.mu.Lock()
		_, kept = a.claims[oldID]
		a.mu.Unlock()
		if !kept || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if kept {
		t.Fatal("the given-up claim was not ended within 5 s")
	}
	var turnID string
	var ended bool
	if err := conn.QueryRow(ctx, `SELECT turn_id, ended_at IS NOT NULL FROM embedkit_turns WHERE account_id = 1 AND chat_id = 'c1'`).Scan(&turnID, &ended); err != nil {
		t.Fatal(err)
	}
	if turnID != newID || ended {
		t.Fatalf("row: turn %s ended %v; want the new claim %s running", turnID, ended, newID)
	}
	if _, err := b.Claim(ctx, k, 7, chatstream.TurnLimits{}); !errors.As(err, new(*chatstream.TurnElsewhereError)) {
		t.Fatalf("Claim on b = %v; want TurnElsewhereError (the new claim is live)", err)
	}
	if err := nw.Release(ctx, nil); err != nil {
		t.Fatalf("Release of the new claim: %v", err)
	}
}

// TestGivenUpClaimsAreDroppedAfterTheLease: while the database refuses ends
// but accepts claims (slow writes, a locked row, ...), the claims whose
// Release gave up are kept for the flusher only until their lease ran
// out (they are expired in the database then), not with their logs for
// as long as the writes fail.
func TestGivenUpClaimsAreDroppedAfterTheLease(t *testing.T) {
	t.Parallel()
	dsn := testdb.OpenDSN(t, testdb.Postgres)
	ctx := t.Context()
	a, err := New(ctx, dsn, WithLeaseTimeout(time.Second), WithHeartbeat(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	_, undo := failEnds(t, dsn)
	defer undo()
	const turns = 50
	log := make([]chatstream.Line, 1000)
	for i := range log {
		log[i] = chatstream.Line{Sort: int64(i + 1), Data: make([]byte, 1024)}
	}
	for i := range turns {
		ct, err := a.Claim(ctx, chatstream.ThreadKey{AccountID: 1, ChatID: fmt.Sprint("c", i)}, 7, chatstream.TurnLimits{})
		if err != nil {
			t.Fatal(err)
		}
		ct.Publish(log)
		rctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_ = ct.Release(rctx, nil)
		cancel()
	}
	lease := a.cfg.lease
	time.Sleep(2*lease + time.Second) // every one of them expired in the database
	a.mu.Lock()
	n, bytes := 0, 0
	for _, ct := range a.claims {
		if ct.released {
			n++
			for _, l := range ct.log {
				bytes += len(l.Data)
			}
		}
	}
	a.mu.Unlock()
	if n > 0 {
		t.Errorf("%d given-up claims kept %v after their lease expired, holding %d KiB of lines; want them dropped", n, lease, bytes>>10)
	}
}

// TestReaderAfterEndOfWatchedTurnReadsItsLines: reader 1 asks for a
// turn's lines, reads them all and the end. Reader 2 joined while the turn
// ran but calls Next only after the end: it reads the lines and the end
// from the table, where reader 1's ask had them written.
func TestReaderAfterEndOfWatchedTurnReadsItsLines(t *testing.T) {
	t.Parallel()
	_, a, b := twoReplicas(t)
	ctx := t.Context()
	k := chatstream.ThreadKey{AccountID: 1, ChatID: "c1"}
	ct, err := a.Claim(ctx, k, 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatal(err)
	}
	r1, _, err := b.Join(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	r2, ok, err := b.Join(ctx, k)
	if !ok || err != nil {
		t.Fatalf("Join = %v, %v", ok, err)
	}
	ct.Publish([]chatstream.Line{{Sort: 1, Data: []byte("{}\n")}, {Sort: 2, Data: []byte("{}\n")}})
	got := 0
	for done := false; !done; {
		lines, d, err := r1.Next(ctx, got)
		if err != nil {
			t.Fatal(err)
		}
		got += len(lines)
		done = d
		if got == 2 && !d {
			if err := ct.Release(ctx, []chatstream.Line{{Sort: 3, State: true, Data: []byte("{}\n")}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got != 3 {
		t.Fatalf("reader 1 read %d lines, want 3", got)
	}
	lines, done, err := r2.Next(ctx, 0)
	if err != nil || !done || len(lines) != 3 {
		t.Errorf("reader 2 (joined while running, first Next after the end) = %d lines, done %v, err %v; want the 3 lines in the table and done", len(lines), done, err)
	}
}

// TestQuietEndFoundWatchedKeepsLease: a reader on b asks for a
// turn's lines just before its owner (a, which learns of the ask only at
// its quiet end: no LISTEN, long poll) releases it. The quiet end finds
// the turn watched and leaves it running; its whole backlog (two writes)
// follows. The claim is renewed while its lines are written, which here
// takes about as long as the lease: the reader reads every line and the
// end.
func TestQuietEndFoundWatchedKeepsLease(t *testing.T) {
	t.Parallel()
	dsn := testdb.OpenDSN(t, testdb.Postgres)
	ctx := t.Context()
	const lease, hb = 1500 * time.Millisecond, time.Second
	open := func(id string, opts ...Option) *Cluster {
		c, err := New(ctx, dsn, append([]Option{WithReplicaID(id), WithLeaseTimeout(lease), WithHeartbeat(hb)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a := open("a", WithListen(false), WithPollInterval(time.Hour))
	b := open("b", WithPollInterval(50*time.Millisecond))
	conn := connect(t, dsn)

	k := chatstream.ThreadKey{AccountID: 1, ChatID: "c1"}
	c, err := a.Claim(ctx, k, 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatal(err)
	}
	ct := c.(*claimedTurn)
	const n = 80 // 5 MiB: two writes
	log := make([]chatstream.Line, n)
	for i := range log {
		log[i] = chatstream.Line{Sort: int64(i + 1), Data: make([]byte, 64<<10)}
	}
	ct.Publish(log)
	rt, ok, err := b.Join(ctx, k)
	if !ok || err != nil {
		t.Fatalf("Join = %v, %v", ok, err)
	}
	if live, err := Ask(ctx, rt); !live || err != nil {
		t.Fatalf("Ask = %v, %v", live, err)
	}
	// Each write of lines takes 0.5 s (a slow database).
	for _, q := range []string{
		`CREATE FUNCTION reviewc_slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.5); RETURN NULL; END $$`,
		`CREATE TRIGGER reviewc_slow BEFORE INSERT ON embedkit_turn_lines FOR EACH STATEMENT EXECUTE FUNCTION reviewc_slow()`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// Release when the last heartbeat is 0.7 s old (it is 0 to 1 s old).
	for {
		var age float64
		if err := conn.QueryRow(ctx, `SELECT extract(epoch FROM clock_timestamp() - heartbeat_at) FROM embedkit_turns WHERE turn_id = $1`, ct.id).Scan(&age); err != nil {
			t.Fatal(err)
		}
		if age >= 0.7 && age < 0.8 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	rel := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		rel <- ct.Release(rctx, nil)
	}()
	var got []chatstream.Line
	var done bool
	for !done && err == nil {
		var lines []chatstream.Line
		lines, done, err = rt.Next(ctx, len(got))
		got = append(got, lines...)
	}
	rerr := <-rel
	t.Logf("Release = %v; watched locally: %v", rerr, func() bool { a.mu.Lock(); defer a.mu.Unlock(); return ct.watched }())
	if err != nil || !done || len(got) != n {
		t.Errorf("reader: %d of %d lines, done %v, err %v; want all lines and done (the owner was still writing them)", len(got), n, done, err)
	}
	if errors.Is(err, chatstream.ErrTurnLost) && rerr == nil {
		t.Errorf("the reader was told the turn was lost, but its owner ended it (Release = nil)")
	}
}

// TestQuietEndsOverCap: more than maxQuietEnds turns released at
// once all end, in a few writes following each other at once.
func TestQuietEndsOverCap(t *testing.T) {
	t.Parallel()
	_, a, _ := twoReplicas(t)
	ctx := t.Context()
	const turns = 2*maxQuietEnds + 500
	cts := make([]chatstream.ClaimedTurn, turns)
	for i := range cts {
		ct, err := a.Claim(ctx, chatstream.ThreadKey{AccountID: int64(i), ChatID: "c"}, 7, chatstream.TurnLimits{})
		if err != nil {
			t.Fatal(err)
		}
		cts[i] = ct
	}
	errs := make(chan error, turns)
	before := a.flushes.Load()
	start := time.Now()
	for _, ct := range cts {
		go func() { errs <- ct.Release(ctx, nil) }()
	}
	for range turns {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d releases ended in %v, %d writes", turns, time.Since(start), a.flushes.Load()-before)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("releases took %v", d)
	}
}

// TestLateReaderLongTurnAndCleanup: a reader whose first Next comes
// after the end of a watched turn of more lines than one read returns
// reads them all; after the lines are deleted (cleanup), a new reader is
// told done with no line.
func TestLateReaderLongTurnAndCleanup(t *testing.T) {
	t.Parallel()
	dsn, a, b := twoReplicas(t)
	ctx := t.Context()
	k := chatstream.ThreadKey{AccountID: 1, ChatID: "c1"}
	ct, err := a.Claim(ctx, k, 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatal(err)
	}
	r1, _, _ := b.Join(ctx, k)
	r2, _, _ := b.Join(ctx, k)
	r3, _, _ := b.Join(ctx, k)
	if live, err := Ask(ctx, r1); !live || err != nil {
		t.Fatal(live, err)
	}
	const n = 2500
	log := make([]chatstream.Line, n)
	for i := range log {
		log[i] = chatstream.Line{Sort: int64(i + 1), Data: []byte("{}\n")}
	}
	ct.Publish(log)
	if err := ct.Release(ctx, nil); err != nil {
		t.Fatal(err)
	}
	var got int
	for done := false; !done; {
		lines, d, err := r2.Next(ctx, got)
		if err != nil {
			t.Fatalf("r2 after %d: %v", got, err)
		}
		got += len(lines)
		done = d
	}
	if got != n {
		t.Errorf("r2 read %d, want %d", got, n)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DELETE FROM embedkit_turn_lines`); err != nil {
		t.Fatal(err)
	}
	lines, done, err := r3.Next(ctx, 0)
	if len(lines) != 0 || !done || err != nil {
		t.Errorf("r3 after cleanup = %d lines, %v, %v; want done", len(lines), done, err)
	}
}

// TestCloseWithGivenUpClaims: Close while given-up claims wait
// (ends refused) returns within its bound and leaves no claim behind.
func TestCloseWithGivenUpClaims(t *testing.T) {
	t.Parallel()
	dsn, a, _ := twoReplicas(t)
	ctx := t.Context()
	_, undo := failEnds(t, dsn)
	defer undo()
	var cts []*claimedTurn
	for i := range 20 {
		c, err := a.Claim(ctx, chatstream.ThreadKey{AccountID: 1, ChatID: string(rune('a' + i))}, 7, chatstream.TurnLimits{})
		if err != nil {
			t.Fatal(err)
		}
		ct := c.(*claimedTurn)
		cts = append(cts, ct)
		ct.Publish([]chatstream.Line{{Sort: 1, Data: []byte("{}\n")}})
		if i%2 == 0 {
			a.watchLocal(ct.id)
		}
		rctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_ = ct.Release(rctx, nil)
		cancel()
	}
	start := time.Now()
	_ = a.Close()
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("Close took %v", d)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.claims) != 0 {
		t.Errorf("%d claims left", len(a.claims))
	}
	for _, ct := range cts {
		select {
		case <-ct.ended:
			if !errors.Is(ct.endErr, ErrClosed) {
				t.Errorf("endErr %v", ct.endErr)
			}
		default:
			t.Errorf("claim not finished")
		}
	}
}

// connect opens a connection of the test's own to dsn, closed at its end.
func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// agentRows counts the rows of lingering agents.
func agentRows(t *testing.T, c *Cluster) int {
	t.Helper()
	var n int
	if err := c.pool.QueryRow(t.Context(), `SELECT count(*) FROM embedkit_turn_agents`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// wantUserLimit checks that a claim of user 7 under a per-user limit of 1
// is refused on each of cs.
func wantUserLimit(t *testing.T, what string, cs ...*Cluster) {
	t.Helper()
	for _, c := range cs {
		ct, err := c.Claim(t.Context(), chatstream.ThreadKey{AccountID: 1, ChatID: "other"}, 7, chatstream.TurnLimits{User: 1})
		if err == nil {
			_ = ct.Release(t.Context(), nil)
		}
		if !errors.Is(err, chatstream.ErrTurnLimit) {
			t.Errorf("%s, on %s: Claim = %v, want the user's limit", what, c.cfg.replicaID, err)
		}
	}
}

// TestLingerLostToTakeover: a turn whose claim was taken over (the
// database was away longer than the lease) ends, its agent still running:
// its end is lost, and its agent counts all the same.
func TestLingerLostToTakeover(t *testing.T) {
	t.Parallel()
	dsn, a, b := twoReplicas(t)
	ctx := t.Context()
	ct, err := a.Claim(ctx, chatstream.ThreadKey{AccountID: 1, ChatID: "c1"}, 7, chatstream.TurnLimits{User: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Taken over, and that turn ended meanwhile.
	if _, err := connect(t, dsn).Exec(ctx, `UPDATE embedkit_turns SET turn_id = 'taken', owner = 'b', ended_at = statement_timestamp() WHERE turn_id = $1`, ct.(*claimedTurn).id); err != nil {
		t.Fatal(err)
	}
	returned := ct.Linger()
	defer returned()
	if err := ct.Release(ctx, nil); !errors.Is(err, chatstream.ErrTurnLost) {
		t.Fatalf("Release = %v, want ErrTurnLost", err)
	}
	waitFor(t, "the agent's row", func() bool { return agentRows(t, a) == 1 })
	wantUserLimit(t, "while the lost turn's agent runs", a, b)
}

// TestLingerGivenUpThenReclaimed: the end of a turn whose agent still runs
// cannot be written, Release gives up and the thread is claimed again on
// the same replica: its agent counts, before and after the end is written.
func TestLingerGivenUpThenReclaimed(t *testing.T) {
	t.Parallel()
	dsn, a, b := twoReplicas(t)
	ctx := t.Context()
	_, undo := failEnds(t, dsn)
	k := chatstream.ThreadKey{AccountID: 1, ChatID: "c1"}
	lim := chatstream.TurnLimits{User: 1}
	old, returned := lingerGivenUp(t, a, k, lim)
	defer returned()
	waitFor(t, "the agent's row", func() bool { return agentRows(t, a) == 1 })
	if ct, err := a.Claim(ctx, k, 7, lim); !errors.Is(err, chatstream.ErrTurnLimit) {
		if err == nil {
			_ = ct.Release(ctx, nil)
		}
		t.Errorf("the thread claimed again while the old turn's agent runs: %v, want the user's limit", err)
	}
	undo()
	oldID := old.(*claimedTurn).id
	waitFor(t, "the old end", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.claims[oldID] == nil
	})
	wantUserLimit(t, "once the old end is written", a, b)
}

// TestLingerRowRestoredAfterCleanup: a replica that could not renew its
// lingering agents' rows for long enough to have another replica's
// cleanup delete them writes them again once it can.
func TestLingerRowRestoredAfterCleanup(t *testing.T) {
	t.Parallel()
	dsn, a, b := twoReplicas(t)
	ctx := t.Context()
	ct, err := a.Claim(ctx, chatstream.ThreadKey{AccountID: 1, ChatID: "c1"}, 7, chatstream.TurnLimits{User: 1})
	if err != nil {
		t.Fatal(err)
	}
	returned := ct.Linger()
	defer returned()
	if err := ct.Release(ctx, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the agent's row", func() bool { return agentRows(t, a) == 1 })
	// Renewals missed: the row's heartbeat is 3 leases old.
	if _, err := connect(t, dsn).Exec(ctx, `UPDATE embedkit_turn_agents SET heartbeat_at = now() - make_interval(secs => $1)`, secs(3*a.cfg.lease)); err != nil {
		t.Fatal(err)
	}
	b.cleanup()
	if n := agentRows(t, a); n != 0 {
		t.Fatalf("%d rows after the cleanup, want 0", n)
	}
	a.renewAgents() // renewals work again
	waitFor(t, "the agent's row written again", func() bool { return agentRows(t, a) == 1 })
	wantUserLimit(t, "once the row is written again", a, b)
	returned()
	waitFor(t, "the row deleted once the agent returned", func() bool { return agentRows(t, a) == 0 })
}

// waitFor polls cond every 20 ms for at most 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestLingerRowNotWritten: while the row of a lingering agent cannot be
// written, claims on its replica count it from memory, its turn's end
// waits for it (its claim counts it elsewhere), and other turns end.
func TestLingerRowNotWritten(t *testing.T) {
	t.Parallel()
	dsn, a, b := twoReplicas(t)
	ctx := t.Context()
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, `CREATE FUNCTION test_fail_agents() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'test: agents refused'; END $$`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TRIGGER test_fail_agents BEFORE INSERT ON embedkit_turn_agents
		FOR EACH ROW EXECUTE FUNCTION test_fail_agents()`); err != nil {
		t.Fatal(err)
	}
	k := chatstream.ThreadKey{AccountID: 1, ChatID: "c1"}
	lim := chatstream.TurnLimits{User: 1}
	_, returned := lingerGivenUp(t, a, k, lim)
	defer returned()
	// The thread is free here: the same user sends again.
	if ct, err := a.Claim(ctx, k, 7, lim); !errors.Is(err, chatstream.ErrTurnLimit) {
		if err == nil {
			_ = ct.Release(ctx, nil)
		}
		t.Errorf("the thread claimed again while its old agent runs, its row not written: %v, want the user's limit", err)
	}
	wantUserLimit(t, "on the other replica, the old claim live", b)
	// Another turn ends meanwhile.
	other, err := a.Claim(ctx, chatstream.ThreadKey{AccountID: 1, ChatID: "x"}, 8, chatstream.TurnLimits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Release(ctx, nil); err != nil {
		t.Errorf("another turn's Release while the agent's row cannot be written: %v", err)
	}
}

// TestReturnedAgentRowDeletedWhileEndsFail: the row of an agent that
// returned is deleted at once, even while ends cannot be written.
func TestReturnedAgentRowDeletedWhileEndsFail(t *testing.T) {
	t.Parallel()
	dsn, a, b := twoReplicas(t)
	ctx := t.Context()
	returned := func() func() {
		ct, err := a.Claim(ctx, chatstream.ThreadKey{AccountID: 1, ChatID: "c1"}, 7, chatstream.TurnLimits{User: 1})
		if err != nil {
			t.Fatal(err)
		}
		r := ct.Linger()
		if err := ct.Release(ctx, nil); err != nil {
			t.Fatal(err)
		}
		return r
	}()
	waitFor(t, "the agent's row", func() bool { return agentRows(t, a) == 1 })
	_, undo := failEnds(t, dsn)
	other, err := a.Claim(ctx, chatstream.ThreadKey{AccountID: 1, ChatID: "x"}, 8, chatstream.TurnLimits{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_ = other.Release(rctx, nil) // an end that keeps failing
		cancel()
	}()
	returned()
	waitFor(t, "the returned agent's row deleted", func() bool { return agentRows(t, a) == 0 })
	undo()
	ct, err := b.Claim(ctx, chatstream.ThreadKey{AccountID: 1, ChatID: "c2"}, 7, chatstream.TurnLimits{User: 1})
	if err != nil {
		t.Fatalf("a claim of the user once its agent returned: %v", err)
	}
	_ = ct.Release(ctx, nil)
}

// lingerGivenUp claims k on c for user 7 and releases it with its agent
// still running (Linger), where the release cannot be written: Release
// gives up after a short wait.
func lingerGivenUp(t *testing.T, c *Cluster, k chatstream.ThreadKey, lim chatstream.TurnLimits) (chatstream.ClaimedTurn, func()) {
	t.Helper()
	ct, err := c.Claim(t.Context(), k, 7, lim)
	if err != nil {
		t.Fatal(err)
	}
	returned := ct.Linger()
	rctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := ct.Release(rctx, nil); err == nil {
		t.Error("Release succeeded while it cannot be written")
	}
	return ct, returned
}
