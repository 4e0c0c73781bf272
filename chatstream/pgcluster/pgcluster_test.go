package pgcluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/pgcluster"
	"github.com/embedkit/embedkit/internal/testdb"
)

// fast are options that keep the tests short.
var fast = []pgcluster.Option{
	pgcluster.WithHeartbeat(50 * time.Millisecond),
	pgcluster.WithLeaseTimeout(500 * time.Millisecond),
	pgcluster.WithPollInterval(100 * time.Millisecond),
}

// open returns a cluster on dsn, closed in t.Cleanup.
func open(t testing.TB, dsn string, opts ...pgcluster.Option) *pgcluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgcluster.New(ctx, dsn, append(slices.Clone(fast), opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// replicas returns two clusters on one fresh schema: two replicas.
func replicas(t testing.TB, optsA, optsB []pgcluster.Option) (dsn string, a, b *pgcluster.Cluster) {
	t.Helper()
	dsn = testdb.OpenDSN(t, testdb.Postgres)
	a = open(t, dsn, append([]pgcluster.Option{pgcluster.WithReplicaID("a")}, optsA...)...)
	b = open(t, dsn, append([]pgcluster.Option{pgcluster.WithReplicaID("b")}, optsB...)...)
	return dsn, a, b
}

func key(chatID string) chatstream.ThreadKey {
	return chatstream.ThreadKey{AccountID: 1, ChatID: chatID}
}

func mkLines(from, n int) []chatstream.Line {
	out := make([]chatstream.Line, n)
	for i := range out {
		s := int64(from + i + 1)
		out[i] = chatstream.Line{Sort: s, Data: []byte(`{"sort":` + strconv.FormatInt(s, 10) + "}\n")}
	}
	return out
}

// ask has the owner of rt's turn write its lines from now on, as the first
// Next of a reader does, so that ending the turn right after cannot
// outrun the reader.
func ask(t testing.TB, rt chatstream.RemoteTurn) {
	t.Helper()
	if ok, err := pgcluster.Ask(t.Context(), rt); !ok || err != nil {
		t.Fatalf("Ask = %v, %v", ok, err)
	}
}

// readAll reads rt from line 0 until done or an error.
func readAll(ctx context.Context, rt chatstream.RemoteTurn) ([]chatstream.Line, error) {
	var got []chatstream.Line
	for {
		lines, done, err := rt.Next(ctx, len(got))
		got = append(got, lines...)
		if err != nil || done {
			return got, err
		}
	}
}

func sameLines(t *testing.T, got, want []chatstream.Line) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("read %d lines, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Sort != want[i].Sort || got[i].State != want[i].State || !bytes.Equal(got[i].Data, want[i].Data) {
			t.Fatalf("line %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, within time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-ch:
		return time.Since(start)
	case <-time.After(within):
		t.Fatalf("%s: not within %v", what, within)
		return 0
	}
}

func TestClaimOnOtherReplicaIsElsewhere(t *testing.T) {
	t.Parallel()
	_, a, b := replicas(t, nil, nil)
	ctx := t.Context()
	ct, err := a.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("A.Claim: %v", err)
	}
	for _, user := range []int64{7, 8} {
		_, err := b.Claim(ctx, key("c1"), user, chatstream.TurnLimits{})
		e, ok := errors.AsType[*chatstream.TurnElsewhereError](err)
		if !ok || !errors.Is(err, chatstream.ErrTurnElsewhere) {
			t.Fatalf("B.Claim by user %d: err = %v, want a *TurnElsewhereError", user, err)
		}
		if e.UserID != 7 {
			t.Errorf("B.Claim by user %d: UserID = %d, want 7", user, e.UserID)
		}
	}
	// The same replica cannot claim twice either.
	if _, err := a.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{}); !errors.Is(err, chatstream.ErrTurnElsewhere) {
		t.Errorf("A.Claim again: err = %v, want ErrTurnElsewhere", err)
	}
	// Another thread of the account is free.
	if other, err := b.Claim(ctx, key("c2"), 7, chatstream.TurnLimits{}); err != nil {
		t.Errorf("B.Claim of another thread: %v", err)
	} else {
		_ = other.Release(ctx, nil)
	}
	if err := ct.Release(ctx, mkLines(0, 1)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	next, err := b.Claim(ctx, key("c1"), 8, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("B.Claim after Release: %v", err)
	}
	if err := next.Release(ctx, nil); err != nil {
		t.Fatalf("B.Release: %v", err)
	}
	if err := ct.Release(ctx, nil); err != nil {
		t.Errorf("second Release = %v, want nil", err)
	}
}

func TestSimultaneousClaimsOneWins(t *testing.T) {
	t.Parallel()
	_, a, b := replicas(t, nil, nil)
	ctx := t.Context()
	for round := range 5 {
		k := key("c" + strconv.Itoa(round))
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			won    []chatstream.ClaimedTurn
			others int
		)
		for i := range 16 {
			cl := a
			if i%2 == 1 {
				cl = b
			}
			wg.Go(func() {
				ct, err := cl.Claim(ctx, k, int64(i), chatstream.TurnLimits{})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					won = append(won, ct)
				case errors.Is(err, chatstream.ErrTurnElsewhere):
					others++
				default:
					t.Errorf("Claim: %v", err)
				}
			})
		}
		wg.Wait()
		if len(won) != 1 || others != 15 {
			t.Fatalf("round %d: %d claims won, %d elsewhere; want 1 and 15", round, len(won), others)
		}
		_ = won[0].Release(ctx, nil)
	}
}

func TestJoinStreamsLinesInOrder(t *testing.T) {
	t.Parallel()
	_, a, b := replicas(t, nil, nil)
	ctx := t.Context()
	if _, ok, err := b.Join(ctx, key("c1")); ok || err != nil {
		t.Fatalf("Join without a turn = ok %v, err %v; want false, nil", ok, err)
	}
	ct, err := a.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	rt, ok, err := b.Join(ctx, key("c1"))
	if !ok || err != nil {
		t.Fatalf("Join = ok %v, err %v; want a turn", ok, err)
	}
	ask(t, rt)
	if rt.UserID() != 7 {
		t.Errorf("UserID = %d, want 7", rt.UserID())
	}

	// Two readers on B, one on A itself.
	type result struct {
		lines []chatstream.Line
		err   error
	}
	results := make(chan result, 3)
	rtA, ok, err := a.Join(ctx, key("c1"))
	if !ok || err != nil {
		t.Fatalf("A.Join = ok %v, err %v; want a turn", ok, err)
	}
	ask(t, rtA)
	for _, r := range []chatstream.RemoteTurn{rt, rt, rtA} {
		go func() {
			lines, err := readAll(ctx, r)
			results <- result{lines, err}
		}()
	}

	var want []chatstream.Line
	for i := range 40 { // one piece at a time, as an agent streams
		want = append(want, mkLines(i, 1)...)
		ct.Publish(want)
		time.Sleep(2 * time.Millisecond)
	}
	final := mkLines(40, 2)
	final[1].State = true
	want = append(want, final...)
	if err := ct.Release(ctx, final); err != nil {
		t.Fatalf("Release: %v", err)
	}
	for range 3 {
		r := <-results
		if r.err != nil {
			t.Fatalf("reader: %v", r.err)
		}
		sameLines(t, r.lines, want)
	}

	// A reader that joined before the end reads everything afterwards too.
	lines, err := readAll(ctx, rt)
	if err != nil {
		t.Fatalf("late read: %v", err)
	}
	sameLines(t, lines, want)
	if _, ok, _ := b.Join(ctx, key("c1")); ok {
		t.Error("Join after Release found a running turn")
	}
}

func TestReleaseWithoutLinesEndsEmpty(t *testing.T) {
	t.Parallel()
	_, a, b := replicas(t, nil, nil)
	ctx := t.Context()
	ct, err := a.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	rt, ok, err := b.Join(ctx, key("c1"))
	if !ok || err != nil {
		t.Fatalf("Join = ok %v, err %v", ok, err)
	}
	ask(t, rt)
	if err := ct.Release(ctx, nil); err != nil {
		t.Fatalf("Release: %v", err)
	}
	lines, done, err := rt.Next(ctx, 0)
	if len(lines) != 0 || !done || err != nil {
		t.Fatalf("Next = %d lines, done %v, err %v; want 0, true, nil", len(lines), done, err)
	}
}

func TestAbortOnOtherReplicaClosesAborted(t *testing.T) {
	t.Parallel()
	_, a, b := replicas(t, nil, nil)
	ctx := t.Context()
	if ok, err := b.Abort(ctx, key("c1")); ok || err != nil {
		t.Fatalf("Abort without a turn = %v, %v; want false, nil", ok, err)
	}
	ct, err := a.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	ok, err := b.Abort(ctx, key("c1"))
	if !ok || err != nil {
		t.Fatalf("Abort = %v, %v; want true, nil", ok, err)
	}
	d := waitClosed(t, pgcluster.AbortedOf(ct), 5*time.Second, "Aborted after Abort on B")
	t.Logf("abort reached A %v after B's Abort returned", d)
	if ok, err := b.Abort(ctx, key("c1")); !ok || err != nil {
		t.Errorf("second Abort = %v, %v; want true, nil (idempotent)", ok, err)
	}
	if err := ct.Release(ctx, mkLines(0, 1)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if ok, err := b.Abort(ctx, key("c1")); ok || err != nil {
		t.Errorf("Abort after Release = %v, %v; want false, nil", ok, err)
	}
	// The next turn of the thread starts unaborted.
	ct2, err := b.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	select {
	case <-pgcluster.AbortedOf(ct2):
		t.Error("a new claim starts aborted")
	case <-time.After(300 * time.Millisecond):
	}
	_ = ct2.Release(ctx, nil)
}

func TestAbortOnSameReplica(t *testing.T) {
	t.Parallel()
	_, a, _ := replicas(t, nil, nil)
	ctx := t.Context()
	ct, err := a.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if ok, err := a.Abort(ctx, key("c1")); !ok || err != nil {
		t.Fatalf("Abort = %v, %v", ok, err)
	}
	// stop reports false when the turn was aborted already: f has started.
	if stop := ct.AfterAbort(func() {}); stop() {
		t.Error("not aborted when Abort returned on the owner")
	}
	waitClosed(t, pgcluster.AbortedOf(ct), 5*time.Second, "the abort function")
	_ = ct.Release(ctx, nil)
}

func TestAbortWithoutNotificationsArrivesByPolling(t *testing.T) {
	t.Parallel()
	// A does not LISTEN: the abort reaches it through the poll alone.
	_, a, b := replicas(t, []pgcluster.Option{pgcluster.WithListen(false)}, nil)
	ctx := t.Context()
	ct, err := a.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if ok, err := b.Abort(ctx, key("c1")); !ok || err != nil {
		t.Fatalf("Abort = %v, %v", ok, err)
	}
	d := waitClosed(t, pgcluster.AbortedOf(ct), 5*time.Second, "Aborted by polling")
	t.Logf("abort reached A by polling after %v (poll interval 100ms)", d)

	// Readers without notifications poll too.
	ct2, err := a.Claim(ctx, key("c2"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	rt, ok, err := a.Join(ctx, key("c2"))
	if !ok || err != nil {
		t.Fatalf("Join = %v, %v", ok, err)
	}
	ask(t, rt)
	done := make(chan []chatstream.Line, 1)
	go func() {
		lines, _ := readAll(ctx, rt)
		done <- lines
	}()
	ct2.Publish(mkLines(0, 3))
	if err := ct2.Release(ctx, mkLines(3, 1)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case lines := <-done:
		sameLines(t, lines, mkLines(0, 4))
	case <-time.After(5 * time.Second):
		t.Fatal("reader without notifications did not finish")
	}
}

func TestAbortAfterListenConnectionDropped(t *testing.T) {
	t.Parallel()
	dsn, a, b := replicas(t, []pgcluster.Option{pgcluster.WithReplicaID("a-" + strconv.FormatInt(time.Now().UnixNano(), 36))}, nil)
	ctx := t.Context()
	ct, err := a.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	// A listens on a connection of its own, which it may still be making.
	listening := func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			var n int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`,
				"embedkit-listen "+a.ReplicaID()).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("A has no LISTEN connection")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	listening()
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`,
		"embedkit-listen "+a.ReplicaID()).Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminate A's LISTEN connection: %d terminated, err %v", n, err)
	}
	if ok, err := b.Abort(ctx, key("c1")); !ok || err != nil {
		t.Fatalf("Abort = %v, %v", ok, err)
	}
	d := waitClosed(t, pgcluster.AbortedOf(ct), 5*time.Second, "Aborted after the LISTEN connection dropped")
	t.Logf("abort reached A %v after its LISTEN connection was cut", d)
	_ = ct.Release(ctx, nil)

	// A listens again: the next abort arrives by notification.
	ct2, err := a.Claim(ctx, key("c2"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	listening() // again, after the drop
	if ok, err := b.Abort(ctx, key("c2")); !ok || err != nil {
		t.Fatalf("Abort = %v, %v", ok, err)
	}
	waitClosed(t, pgcluster.AbortedOf(ct2), 5*time.Second, "Aborted after reconnecting")
	_ = ct2.Release(ctx, nil)
}

func TestSurvivesCutConnections(t *testing.T) {
	t.Parallel()
	dsn, a, b := replicas(t, []pgcluster.Option{pgcluster.WithReplicaID("a-" + strconv.FormatInt(time.Now().UnixNano(), 36))}, nil)
	ctx := t.Context()
	ct, err := a.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	rt, ok, err := b.Join(ctx, key("c1"))
	if !ok || err != nil {
		t.Fatalf("Join = %v, %v", ok, err)
	}
	ask(t, rt)
	done := make(chan error, 1)
	var got []chatstream.Line
	go func() {
		var err error
		got, err = readAll(ctx, rt)
		done <- err
	}()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	want := mkLines(0, 60)
	for i := range 3 {
		ct.Publish(want[:i*20+20])
		time.Sleep(30 * time.Millisecond)
		// Every connection of A, pooled and LISTEN, is cut.
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name IN ($1, $2)`, "embedkit-cluster "+a.ReplicaID(), "embedkit-listen "+a.ReplicaID()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		t.Logf("cut %d connections of A", n)
	}
	if err := ct.Release(ctx, mkLines(60, 1)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("reader: %v", err)
		}
		sameLines(t, got, append(want, mkLines(60, 1)...))
	case <-time.After(10 * time.Second):
		t.Fatal("reader did not finish")
	}
}

func TestCrashedReplicaIsTakenOver(t *testing.T) {
	t.Parallel()
	short := []pgcluster.Option{pgcluster.WithHeartbeat(50 * time.Millisecond), pgcluster.WithLeaseTimeout(300 * time.Millisecond)}
	_, a, b := replicas(t, short, short)
	ctx := t.Context()
	ct, err := a.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	ct.Publish(mkLines(0, 2))

	// Heartbeats keep the claim alive well past the lease.
	time.Sleep(700 * time.Millisecond)
	if _, err := b.Claim(ctx, key("c1"), 8, chatstream.TurnLimits{}); !errors.Is(err, chatstream.ErrTurnElsewhere) {
		t.Fatalf("Claim of a renewed claim: err = %v, want ErrTurnElsewhere", err)
	}
	rt, ok, err := b.Join(ctx, key("c1"))
	if !ok || err != nil {
		t.Fatalf("Join = %v, %v", ok, err)
	}
	ask(t, rt)
	// The join makes the owner write the lines so far.
	first, _, err := rt.Next(ctx, 0)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}

	_ = a.Close() // a crash: no Release

	lines, err := readAll(ctx, rt)
	if !errors.Is(err, chatstream.ErrTurnLost) {
		t.Fatalf("reader of a dead turn: err = %v, want ErrTurnLost", err)
	}
	sameLines(t, append(first, lines[len(first):]...), mkLines(0, 2))

	var ct2 chatstream.ClaimedTurn
	deadline := time.Now().Add(5 * time.Second)
	for {
		ct2, err = b.Claim(ctx, key("c1"), 8, chatstream.TurnLimits{})
		if err == nil {
			break
		}
		if !errors.Is(err, chatstream.ErrTurnElsewhere) || time.Now().After(deadline) {
			t.Fatalf("Claim after the lease: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := ct2.Release(ctx, nil); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func TestTakenOverClaimIsAborted(t *testing.T) {
	t.Parallel()
	dsn, a, b := replicas(t, nil, nil)
	ctx := t.Context()
	ct, err := a.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	// A stalls past the lease (say its database connection hung) and B
	// takes the thread over. The owner is renamed, or A's next heartbeat
	// could renew the row before B's Claim.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `UPDATE embedkit_turns SET heartbeat_at = now() - interval '1 hour', owner = 'stalled'`); err != nil {
		t.Fatal(err)
	}
	ct2, err := b.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("takeover: %v", err)
	}
	waitClosed(t, pgcluster.AbortedOf(ct), 5*time.Second, "Aborted of the claim taken over")
	if err := ct.Release(ctx, nil); !errors.Is(err, chatstream.ErrTurnLost) {
		t.Errorf("Release of the claim taken over = %v, want ErrTurnLost", err)
	}
	if _, ok, _ := a.Join(ctx, key("c1")); !ok {
		t.Error("the old owner's Release ended the new turn")
	}
	_ = ct2.Release(ctx, nil)
}

func TestEndedTurnsLinesAreDeleted(t *testing.T) {
	t.Parallel()
	dsn, a, b := replicas(t, []pgcluster.Option{pgcluster.WithRetention(200 * time.Millisecond)},
		[]pgcluster.Option{pgcluster.WithRetention(200 * time.Millisecond)})
	ctx := t.Context()
	ct, err := a.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	live, err := a.Claim(ctx, key("c2"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	// Readers on B: the lines of both are written.
	for _, k := range []chatstream.ThreadKey{key("c1"), key("c2")} {
		rt, ok, err := b.Join(ctx, k)
		if !ok || err != nil {
			t.Fatalf("Join = %v, %v", ok, err)
		}
		ask(t, rt)
	}
	live.Publish(mkLines(0, 1))
	if err := ct.Release(ctx, mkLines(0, 3)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	count := func() (total, live int) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE turn_id =
				(SELECT turn_id FROM embedkit_turns WHERE chat_id = 'c2'))
			FROM embedkit_turn_lines`).Scan(&total, &live); err != nil {
			t.Fatal(err)
		}
		return total, live
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if total, live := count(); total == 1 && live == 1 {
			break // only the live turn's line is left
		}
		if time.Now().After(deadline) {
			total, live := count()
			t.Fatalf("after 5s: %d lines, %d of the live turn; want only the live turn's 1", total, live)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// An idle live turn keeps its lines past the retention.
	time.Sleep(500 * time.Millisecond)
	if total, live := count(); total != 1 || live != 1 {
		t.Fatalf("%d lines, %d of the live turn; want only the live turn's 1", total, live)
	}
	_ = live.Release(ctx, nil)
}

func TestNewIsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	dsn := testdb.OpenDSN(t, testdb.Postgres)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		wg.Go(func() {
			c, err := pgcluster.New(t.Context(), dsn, pgcluster.WithReplicaID(fmt.Sprint(i)))
			if err == nil {
				err = c.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("New: %v", err)
		}
	}
}

func TestNewRejectsBadSettings(t *testing.T) {
	if _, err := pgcluster.New(t.Context(), "postgres://x@127.0.0.1:1/x", pgcluster.WithHeartbeat(time.Second), pgcluster.WithLeaseTimeout(time.Second)); err == nil {
		t.Error("New with heartbeat = lease: no error")
	}
	if _, err := pgcluster.New(t.Context(), "postgres://user:hunter2@[bad"); err == nil || bytes.Contains([]byte(err.Error()), []byte("hunter2")) {
		t.Errorf("New with a bad DSN = %v, want an error without the password", err)
	}
}

func TestClosedCluster(t *testing.T) {
	t.Parallel()
	_, a, _ := replicas(t, nil, nil)
	ctx := t.Context()
	ct, err := a.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	rt, _, err := a.Join(ctx, key("c1"))
	if err != nil {
		t.Fatal(err)
	}
	ask(t, rt)
	errc := make(chan error, 1)
	go func() {
		_, _, err := rt.Next(ctx, 0)
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, pgcluster.ErrClosed) {
			t.Errorf("Next blocked at Close = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Next still blocked after Close")
	}
	if _, err := a.Claim(ctx, key("c2"), 7, chatstream.TurnLimits{}); !errors.Is(err, pgcluster.ErrClosed) {
		t.Errorf("Claim after Close = %v, want ErrClosed", err)
	}
	if _, err := a.Abort(ctx, key("c2")); !errors.Is(err, pgcluster.ErrClosed) {
		t.Errorf("Abort after Close = %v, want ErrClosed", err)
	}
	ct.Publish(mkLines(0, 1)) // ignored, no panic
	if err := ct.Release(ctx, nil); !errors.Is(err, pgcluster.ErrClosed) {
		t.Errorf("Release after Close = %v, want ErrClosed", err)
	}
}

// TestCloseLeavesNoGoroutine is not parallel: it counts goroutines.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	dsn := testdb.OpenDSN(t, testdb.Postgres)
	ctx := t.Context()
	before := runtime.NumGoroutine()
	a, err := pgcluster.New(ctx, dsn, fast...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := pgcluster.New(ctx, dsn, fast...)
	if err != nil {
		t.Fatal(err)
	}
	ct, err := a.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatal(err)
	}
	rt, _, err := b.Join(ctx, key("c1"))
	if err != nil {
		t.Fatal(err)
	}
	ask(t, rt)
	ct.Publish(mkLines(0, 5))
	if _, _, err := rt.Next(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Abort(ctx, key("c1")); err != nil {
		t.Fatal(err)
	}
	<-pgcluster.AbortedOf(ct)
	if _, err := a.Claim(ctx, key("c2"), 7, chatstream.TurnLimits{}); err != nil { // left unreleased
		t.Fatal(err)
	}
	_ = ct.Release(ctx, nil)
	_ = a.Close()
	_ = b.Close()
	var after int
	for range 100 {
		if after = runtime.NumGoroutine(); after <= before {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	buf := make([]byte, 1<<20)
	t.Fatalf("goroutines: %d before New, %d after Close\n%s", before, after, buf[:runtime.Stack(buf, true)])
}

// TestAbortLatency measures the time from B's Abort returning (the 204) to
// A's Aborted closing, and from B's Abort call; it reports, it does not
// assert.
func TestAbortLatency(t *testing.T) {
	t.Parallel()
	_, a, b := replicas(t, nil, nil)
	ctx := t.Context()
	const n = 200
	var fromReturn, fromCall []time.Duration
	for i := range n {
		k := key("lat-" + strconv.Itoa(i))
		ct, err := a.Claim(ctx, k, 7, chatstream.TurnLimits{})
		if err != nil {
			t.Fatal(err)
		}
		call := time.Now()
		if ok, err := b.Abort(ctx, k); !ok || err != nil {
			t.Fatalf("Abort = %v, %v", ok, err)
		}
		ret := time.Now()
		waitClosed(t, pgcluster.AbortedOf(ct), 5*time.Second, "Aborted")
		end := time.Now()
		fromReturn = append(fromReturn, end.Sub(ret))
		fromCall = append(fromCall, end.Sub(call))
		_ = ct.Release(ctx, nil)
	}
	p50, p99 := percentiles(fromReturn)
	c50, c99 := percentiles(fromCall)
	t.Logf("cross-replica abort over %d turns: from Abort's return p50 %v, p99 %v; from Abort's call p50 %v, p99 %v",
		n, p50, p99, c50, c99)
}

func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)*50/100], s[min(len(s)-1, len(s)*99/100)]
}

// BenchmarkAbortLatency measures, per turn, the time from B's Abort
// returning (the 204) to A's Aborted closing (p50-ms, p99-ms), and from B's
// Abort call (call-p50-ms, call-p99-ms).
func BenchmarkAbortLatency(b *testing.B) {
	_, ra, rb := replicas(b, nil, nil)
	ctx := b.Context()
	var fromReturn, fromCall []time.Duration
	i := 0
	for b.Loop() {
		i++
		k := key("bench-" + strconv.Itoa(i))
		ct, err := ra.Claim(ctx, k, 7, chatstream.TurnLimits{})
		if err != nil {
			b.Fatal(err)
		}
		call := time.Now()
		if _, err := rb.Abort(ctx, k); err != nil {
			b.Fatal(err)
		}
		ret := time.Now()
		select {
		case <-pgcluster.AbortedOf(ct):
		case <-time.After(5 * time.Second):
			b.Fatal("abort did not arrive")
		}
		end := time.Now()
		fromReturn = append(fromReturn, end.Sub(ret))
		fromCall = append(fromCall, end.Sub(call))
		_ = ct.Release(ctx, nil)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	p50, p99 := percentiles(fromReturn)
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(p99), "p99-ms")
	p50, p99 = percentiles(fromCall)
	b.ReportMetric(ms(p50), "call-p50-ms")
	b.ReportMetric(ms(p99), "call-p99-ms")
}

// BenchmarkJoinLatency measures the time from Publish on A to the line read
// on B.
func BenchmarkJoinLatency(b *testing.B) {
	_, ra, rb := replicas(b, nil, nil)
	ctx := b.Context()
	ct, err := ra.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		b.Fatal(err)
	}
	rt, _, err := rb.Join(ctx, key("c1"))
	if err != nil {
		b.Fatal(err)
	}
	ask(b, rt)
	var (
		ds  []time.Duration
		log []chatstream.Line
	)
	pos := 0
	for b.Loop() {
		start := time.Now()
		log = append(log, mkLines(pos, 1)...)
		ct.Publish(log)
		lines, _, err := rt.Next(ctx, pos)
		if err != nil || len(lines) != 1 {
			b.Fatalf("Next = %d lines, %v", len(lines), err)
		}
		ds = append(ds, time.Since(start))
		pos++
		time.Sleep(50 * time.Millisecond) // an agent's pace; keeps flushes from batching
	}
	_ = ct.Release(ctx, nil)
	p50, p99 := percentiles(ds)
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
}

// TestUnwatchedTurnWritesNoLines checks that a turn no reader on another
// replica joined costs its claim and its end, and no line in the database.
func TestUnwatchedTurnWritesNoLines(t *testing.T) {
	t.Parallel()
	dsn, a, b := replicas(t, nil, nil)
	ctx := t.Context()
	ct, err := a.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	ct.Publish(mkLines(0, 5))
	time.Sleep(200 * time.Millisecond) // four publish intervals
	if err := ct.Release(ctx, mkLines(5, 1)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var lines int
	var ended bool
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM embedkit_turn_lines), ended_at IS NOT NULL
		FROM embedkit_turns WHERE chat_id = 'c1'`).Scan(&lines, &ended); err != nil {
		t.Fatal(err)
	}
	if lines != 0 || !ended {
		t.Errorf("after the release: %d lines stored, ended %v; want 0 and true", lines, ended)
	}
	if _, ok, err := b.Join(ctx, key("c1")); ok || err != nil {
		t.Errorf("Join of the ended turn = %v, %v; want false, nil", ok, err)
	}
	ct2, err := b.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim of the ended thread: %v", err)
	}
	_ = ct2.Release(ctx, nil)
}

// TestJoinMidTurnReadsFromTheFirstLine checks that a reader joining a
// running turn whose lines were not written yet reads them all, from the
// first, then the live ones and the end.
func TestJoinMidTurnReadsFromTheFirstLine(t *testing.T) {
	t.Parallel()
	_, a, b := replicas(t, nil, nil)
	ctx := t.Context()
	ct, err := a.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	ct.Publish(mkLines(0, 3))
	time.Sleep(100 * time.Millisecond)
	rt, ok, err := b.Join(ctx, key("c1"))
	if !ok || err != nil {
		t.Fatalf("Join = %v, %v", ok, err)
	}
	ask(t, rt)
	done := make(chan []chatstream.Line)
	go func() {
		lines, err := readAll(ctx, rt)
		if err != nil {
			t.Errorf("reader: %v", err)
		}
		done <- lines
	}()
	ct.Publish(mkLines(0, 5))
	if err := ct.Release(ctx, mkLines(5, 1)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case got := <-done:
		sameLines(t, got, mkLines(0, 6))
	case <-time.After(10 * time.Second):
		t.Fatal("reader did not finish")
	}
}

// TestJoinOfAbortedTurnArrivesByPolling: without notifications the owner
// learns of a reader's ask by its poll, also for a turn whose abort was
// requested and that is still running (its agent stops when it can): its
// lines reach the reader before its release.
func TestJoinOfAbortedTurnArrivesByPolling(t *testing.T) {
	t.Parallel()
	_, a, b := replicas(t, []pgcluster.Option{pgcluster.WithListen(false), pgcluster.WithPollInterval(20 * time.Millisecond)}, nil)
	ctx := t.Context()
	ct, err := a.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	defer ct.Release(ctx, nil)
	ct.Publish(mkLines(0, 3))
	if ok, err := b.Abort(ctx, key("c1")); !ok || err != nil {
		t.Fatalf("Abort = %v, %v", ok, err)
	}
	waitClosed(t, pgcluster.AbortedOf(ct), 5*time.Second, "Aborted")
	rt, ok, err := b.Join(ctx, key("c1"))
	if !ok || err != nil {
		t.Fatalf("Join = %v, %v", ok, err)
	}
	ask(t, rt)
	nctx, cancel := context.WithTimeout(ctx, 2*time.Second) // 100 polls
	defer cancel()
	lines, _, err := rt.Next(nctx, 0)
	if err != nil {
		t.Fatalf("Next: %v; the owner did not write the lines of the joined turn within 2s", err)
	}
	sameLines(t, lines, mkLines(0, 3))
}

// TestWaitDoesNotAskForLines: a wait for a turn's end (an abort's) has
// nothing written but the end: the owner shares its lines only with
// readers that ask for them.
func TestWaitDoesNotAskForLines(t *testing.T) {
	t.Parallel()
	dsn, a, b := replicas(t, nil, nil)
	ctx := t.Context()
	ct, err := a.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	ct.Publish(mkLines(0, 3))
	rt, ok, err := b.Join(ctx, key("c1"))
	if !ok || err != nil {
		t.Fatalf("Join = %v, %v", ok, err)
	}
	waited := make(chan error, 1)
	go func() { waited <- rt.Wait(ctx) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-waited:
		t.Fatalf("Wait returned before the end: %v", err)
	default:
	}
	start := time.Now()
	if err := ct.Release(ctx, mkLines(3, 1)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after the end")
	}
	// Woken by the end's notification, not by the poll (500 ms).
	if d := time.Since(start); d > 400*time.Millisecond {
		t.Logf("Wait returned %v after the end", d)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM embedkit_turn_lines`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d lines written (%v), want none", n, err)
	}
	// A reader that asks only now is told the turn ended: its answer is
	// stored, its lines were never shared.
	lines, done, err := rt.Next(ctx, 0)
	if len(lines) != 0 || !done || err != nil {
		t.Errorf("Next after the end = %d lines, done %v, %v; want none, done", len(lines), done, err)
	}
	// Wait on a turn that ended returns at once.
	if err := rt.Wait(ctx); err != nil {
		t.Errorf("Wait after the end: %v", err)
	}
}

// TestFirstNextOfDeadTurnIsTurnLost: a turn whose process stopped (its
// lease ran out, nobody ended it) before the reader's first Next is
// ErrTurnLost, not done: done with no line says its answer is stored.
func TestFirstNextOfDeadTurnIsTurnLost(t *testing.T) {
	t.Parallel()
	dsn, a, b := replicas(t, nil, nil)
	ctx := t.Context()
	ct, err := a.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatal(err)
	}
	defer ct.Release(ctx, nil)
	ct.Publish(mkLines(0, 3))
	rt, ok, err := b.Join(ctx, key("c1"))
	if !ok || err != nil {
		t.Fatalf("Join = %v, %v", ok, err)
	}
	// A stalls past the lease (as in TestTakenOverClaimIsAborted): its
	// process is gone as far as the cluster can tell; the turn never ended.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `UPDATE embedkit_turns SET heartbeat_at = now() - interval '1 hour', owner = 'stalled'`); err != nil {
		t.Fatal(err)
	}
	lines, done, err := rt.Next(ctx, 0)
	if !errors.Is(err, chatstream.ErrTurnLost) {
		t.Errorf("Next of a turn whose process stopped = %d lines, done %v, err %v; want ErrTurnLost", len(lines), done, err)
	}
}

// TestEndWithBacklogBeyondOneRead: a turn that ends while more lines than
// one read returns are still unwritten commits them with its end at once.
// A reader whose empty read came just before that write, and its check
// that the turn still runs just after, reads the lines on to the end:
// the turn did not die. (It was taken for lost: a follower on another
// replica ended its stream with the stored state, some lines short.) A
// reader polling every millisecond meets that window in about a third of
// the rounds.
func TestEndWithBacklogBeyondOneRead(t *testing.T) {
	t.Parallel()
	// A lease of its own: under load the owner's heartbeat and its end of
	// 1,500 lines can take longer than fast's 500 ms, and B would rightly
	// take the turn for lost; this test is about the backlog, not expiry.
	lease := []pgcluster.Option{pgcluster.WithLeaseTimeout(10 * time.Second), pgcluster.WithHeartbeat(time.Second)}
	_, a, b := replicas(t, append([]pgcluster.Option{pgcluster.WithPublishInterval(time.Hour)}, lease...),
		append([]pgcluster.Option{pgcluster.WithPollInterval(time.Millisecond), pgcluster.WithListen(false)}, lease...))
	const rounds, lines = 30, 1500 // more than one read returns (1000)
	for i := range rounds {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		k := key(fmt.Sprint("backlog-", i))
		ct, err := a.Claim(ctx, k, 7, chatstream.TurnLimits{})
		if err != nil {
			t.Fatal(err)
		}
		rt, ok, err := b.Join(ctx, k)
		if !ok || err != nil {
			t.Fatalf("Join = %v, %v", ok, err)
		}
		ask(t, rt)
		ct.Publish(mkLines(0, 1)) // written at once (asked); later lines wait for the end
		type result struct {
			lines []chatstream.Line
			err   error
		}
		got := make(chan result, 1)
		go func() {
			lines, err := readAll(ctx, rt)
			got <- result{lines, err}
		}()
		time.Sleep(time.Duration(20+i) * time.Millisecond) // the end lands at another point of the reader's polls
		ct.Publish(mkLines(0, lines))
		if err := ct.Release(ctx, mkLines(lines, 1)); err != nil {
			t.Fatal(err)
		}
		r := <-got
		cancel()
		if r.err != nil || len(r.lines) != lines+1 {
			t.Fatalf("round %d: read %d lines of %d, err %v", i, len(r.lines), lines+1, r.err)
		}
	}
}

// TestFirstNextAfterCloseIsErrClosed: a reader's first Next on a closed
// Cluster returns ErrClosed (as Join, Wait and every later Next do).
func TestFirstNextAfterCloseIsErrClosed(t *testing.T) {
	t.Parallel()
	_, a, b := replicas(t, nil, nil)
	ctx := t.Context()
	ct, err := a.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatal(err)
	}
	defer ct.Release(ctx, nil)
	rt, ok, err := b.Join(ctx, key("c1"))
	if !ok || err != nil {
		t.Fatalf("Join = %v, %v", ok, err)
	}
	_ = b.Close()
	if err := rt.Wait(ctx); !errors.Is(err, pgcluster.ErrClosed) {
		t.Errorf("Wait after Close = %v, want ErrClosed", err)
	}
	if _, _, err := rt.Next(ctx, 0); !errors.Is(err, pgcluster.ErrClosed) {
		t.Errorf("first Next after Close = %v, want ErrClosed", err)
	}
}

// TestPublishWhileCallerAppends: the caller appends to its own array (spare
// capacity) while the flusher reads the published prefix (run with -race);
// a reader gets every line.
func TestPublishWhileCallerAppends(t *testing.T) {
	t.Parallel()
	_, a, b := replicas(t, nil, nil)
	ctx := t.Context()
	ct, err := a.Claim(ctx, key("c1"), 7, chatstream.TurnLimits{})
	if err != nil {
		t.Fatal(err)
	}
	rt, _, _ := b.Join(ctx, key("c1"))
	ask(t, rt)
	want := mkLines(0, 600)
	log := make([]chatstream.Line, 0, 8)
	go func() {
		for i := range want {
			log = append(log, want[i])
			if i%2 == 0 {
				ct.Publish(log[: i+1 : i+1])
			}
			time.Sleep(200 * time.Microsecond)
		}
		_ = ct.Release(ctx, want[len(want)-1:]) // the last line (odd index) was not published
	}()
	got, err := readAll(ctx, rt)
	if err != nil {
		t.Fatal(err)
	}
	sameLines(t, got, want)
}
