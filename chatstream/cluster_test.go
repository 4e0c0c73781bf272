package chatstream_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/pgcluster"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/operator"
)

// gatedAgent answers "gate:<name>" with "first ", "part ", then waits until
// the test opens the gate <name> (or the turn ends), then "second". Other
// inputs go to the test scripts.
type gatedAgent struct {
	scripts
	mu    sync.Mutex
	gates map[string]chan struct{}
}

func newGatedAgent() *gatedAgent {
	return &gatedAgent{scripts: testScripts(), gates: map[string]chan struct{}{}}
}

func (g *gatedAgent) gate(name string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch, ok := g.gates[name]
	if !ok {
		ch = make(chan struct{})
		g.gates[name] = ch
	}
	return ch
}

// open lets the turn waiting at gate name go on.
func (g *gatedAgent) open(name string) {
	ch := g.gate(name)
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

func (g *gatedAgent) Answer(ctx context.Context, t chatstream.Turn, e chatstream.Emitter) error {
	name, ok := strings.CutPrefix(t.Input, "gate:")
	if !ok {
		return g.scripts.Answer(ctx, t, e)
	}
	for _, p := range []string{"first ", "part "} {
		if err := e.Content(p); err != nil {
			return err
		}
	}
	select {
	case <-g.gate(name):
	case <-ctx.Done():
		return ctx.Err()
	}
	return e.Content("second")
}

// pair is two replicas of a server on one fresh PostgreSQL schema: two
// chatstream handlers behind two httptest servers, each with its own store
// and its own pgcluster.Cluster.
type pair struct {
	a, b   *env
	ca, cb *pgcluster.Cluster
	agent  *gatedAgent
}

type pairOpts struct {
	clusterA, clusterB []pgcluster.Option
	handler            []chatstream.Option
	storeA             func(store.Store) store.Store // wraps A's store
}

// fastCluster are cluster options that keep the lease tests short.
var fastCluster = []pgcluster.Option{
	pgcluster.WithHeartbeat(50 * time.Millisecond),
	pgcluster.WithLeaseTimeout(500 * time.Millisecond),
	pgcluster.WithPollInterval(100 * time.Millisecond),
}

func newPair(t testing.TB, po pairOpts) *pair {
	t.Helper()
	dsn := testdb.OpenDSN(t, testdb.Postgres) // skips without EMBEDKIT_TEST_POSTGRES_DSN
	p := &pair{agent: newGatedAgent()}
	// Clusters are closed after the handlers (cleanups run last first).
	p.ca = openCluster(t, dsn, append([]pgcluster.Option{pgcluster.WithReplicaID("a")}, po.clusterA...)...)
	p.cb = openCluster(t, dsn, append([]pgcluster.Option{pgcluster.WithReplicaID("b")}, po.clusterB...)...)
	openStore := storeOn(dsn)
	openA := openStore
	if po.storeA != nil {
		openA = func(t testing.TB, backend string) store.Store { return po.storeA(openStore(t, backend)) }
	}
	tg := apitest.Target{Backend: testdb.Postgres, Router: apitest.ServeMux}
	p.a = newEnv(t, tg, envOpts{agent: p.agent, store: openA, cfg: withAgent8,
		opts: append([]chatstream.Option{chatstream.WithCluster(p.ca)}, po.handler...)})
	p.b = newEnv(t, tg, envOpts{agent: p.agent, store: openStore, cfg: withAgent8,
		opts: append([]chatstream.Option{chatstream.WithCluster(p.cb)}, po.handler...)})
	return p
}

// withAgent8 adds agent 8, of the same deployment, to the demo account.
func withAgent8(c *operator.Config) {
	c.Accounts[0].Agents = append(c.Accounts[0].Agents, operator.Agent{ID: "8", DeploymentID: 1})
}

// storeOn opens a store on dsn for each replica (envOpts.store), closed
// at the test's end.
func storeOn(dsn string) func(testing.TB, string) store.Store {
	return func(t testing.TB, _ string) store.Store {
		st, err := testdb.OpenStore(dsn)
		if err != nil {
			t.Fatalf("open store: %v", err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
}

func openCluster(t testing.TB, dsn string, opts ...pgcluster.Option) *pgcluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgcluster.New(ctx, dsn, opts...)
	if err != nil {
		t.Fatalf("pgcluster.New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func isPiece(text string) func(chatstream.Message) bool {
	return func(m chatstream.Message) bool { return isContent(m) && m.Content == text }
}

// stateOf returns the thread's stored state as read on e: its __cutoff__
// and __state__.
func stateOf(t testing.TB, e *env, chatID, user string) (cutoff, state chatstream.Message) {
	t.Helper()
	msgs := collect(t, e.client, chatstream.Request{ChatID: chatID, SessionSettings: ext(user)})
	if len(msgs) != 2 {
		t.Fatalf("state of %s: %d lines, want 2", chatID, len(msgs))
	}
	return msgs[0], msgs[1]
}

func TestClusterAbortOnOtherReplica(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    []pgcluster.Option
	}{
		{"notification", nil},
		// A replica that does not LISTEN learns of the abort by its poll:
		// the fallback for a lost notification.
		{"poll only", []pgcluster.Option{pgcluster.WithListen(false), pgcluster.WithPollInterval(200 * time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{clusterA: tc.a})
			ctx := t.Context()
			id := "abort-" + strings.ReplaceAll(tc.name, " ", "-")
			_, wait := streamUntil(t, ctx, p.a.client, chatstream.Request{Input: "slow", ChatID: id, SessionSettings: ext("u")}, isPiece("answer"))
			if err := p.b.client.Abort(ctx, acct, agentID, id, chatstream.SessionSettings{ExternalID: "u"}); err != nil {
				t.Fatalf("abort on B: %v", err)
			}
			acked := time.Now()
			// B answers once the turn has ended on A: the partial answer is
			// stored, and the thread is free for the next input on B.
			if cut, state := stateOf(t, p.b, id, "u"); cut.State.IsStreaming {
				t.Errorf("B's state right after its 204 is still streaming")
			} else if fa, _ := conv(state.State.Messages).FinalAnswer(); fa.Content != "partial answer" {
				t.Errorf("stored answer right after B's 204 = %q, want %q", fa.Content, "partial answer")
			}
			if msgs, err := collectErr(ctx, p.b.client, chatstream.Request{Input: "echo:again", ChatID: id, SessionSettings: ext("u")}); err != nil || last(msgs).State.Error != "" {
				t.Errorf("next turn on B right after its 204: %v", err)
			}
			msgs, end, err := wait()
			if err != nil {
				t.Fatal(err)
			}
			if d := end.Sub(acked); d > 2*time.Second {
				t.Errorf("A's stream ended %v after B's 204", d)
			}
			st := last(msgs)
			if st.ID != chatstream.StateID || st.State == nil || !st.State.Aborted {
				t.Fatalf("A's stream ends with %+v, want __state__ aborted", st)
			}
			if fa, _ := conv(msgs).FinalAnswer(); fa.Content != "partial answer" || fa.IsInProcess {
				t.Errorf("final answer on A = %+v, want the partial answer completed", fa)
			}
			if cut, _ := stateOf(t, p.a, id, "u"); cut.State.IsStreaming {
				t.Errorf("A's cutoff isStreaming after both turns")
			}
		})
	}
}

func TestClusterRejoinOnOtherReplica(t *testing.T) {
	p := newPair(t, pairOpts{})
	ctx := t.Context()
	const id, gate = "rejoin-x", "rejoin"
	got, wait := streamUntil(t, ctx, p.a.client, chatstream.Request{Input: "gate:" + gate, ChatID: id, SessionSettings: ext("u")}, isPiece("first "))
	// The client has everything up to "first " (got may hold more).
	var resume int64
	for i, m := range got {
		if isPiece("first ")(m) {
			resume, got = m.Sort, got[:i+1]
			break
		}
	}

	_, waitFull := streamUntil(t, ctx, p.b.client, chatstream.Request{ChatID: id, SessionSettings: ext("u")}, isPiece("part "))
	_, waitTail := streamUntil(t, ctx, p.b.client, chatstream.Request{ChatID: id, SessionSettings: ext("u"), ResumeAfterSort: &resume}, isPiece("part "))
	p.agent.open(gate)
	orig, origEnd, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	full, fullEnd, err := waitFull()
	if err != nil {
		t.Fatal(err)
	}
	tail, _, err := waitTail()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rejoined stream ended %v after the original", fullEnd.Sub(origEnd))

	if !full[0].State.IsStreaming || !tail[0].State.IsStreaming || full[0].State.ChatID != id {
		t.Fatalf("rejoin cutoffs = %+v, %+v, want isStreaming", full[0].State, tail[0].State)
	}
	// The rejoined stream is the original one, line for line.
	if a, b := jsonOf(t, orig[1:]), jsonOf(t, full[1:]); a != b {
		t.Errorf("rejoined stream differs from the original:\n orig %s\n full %s", a, b)
	}
	var want []chatstream.Message
	for _, m := range orig[1:] {
		if m.Sort > resume || m.ID == chatstream.StateID {
			want = append(want, m)
		}
	}
	if a, b := jsonOf(t, want), jsonOf(t, tail[1:]); a != b {
		t.Errorf("resumed stream after sort %d:\n want %s\n got  %s", resume, a, b)
	}
	wantAns, _ := conv(orig).FinalAnswer()
	fullAns, _ := conv(full).FinalAnswer()
	tailAns, _ := conv(append(slices.Clone(got), tail[1:]...)).FinalAnswer()
	if wantAns.Content != "first part second" || fullAns.Content != wantAns.Content || tailAns.Content != wantAns.Content {
		t.Errorf("answers: orig %q, full %q, resumed %q", wantAns.Content, fullAns.Content, tailAns.Content)
	}
	// Merged deltas rebuild the final message on the rejoined stream.
	for _, m := range conv(full).History() {
		if m.Role == chatstream.RoleAssistant && m.ToolCall == nil && m.Content != wantAns.Content {
			t.Errorf("rebuilt message %q, want %q", m.Content, wantAns.Content)
		}
	}
	// The stored state on B is the original __state__.
	_, state := stateOf(t, p.b, id, "u")
	if a, b := jsonOf(t, last(orig).State.Messages), jsonOf(t, state.State.Messages); a != b {
		t.Errorf("stored history on B:\n %s\nwant\n %s", b, a)
	}
	// The thread is free everywhere once __state__ was read: no 409 on B.
	if _, err := collectErr(ctx, p.b.client, chatstream.Request{Input: "echo:next", ChatID: id, SessionSettings: ext("u")}); err != nil {
		t.Errorf("next turn on B right after __state__: %v", err)
	}
}

func TestClusterConflicts(t *testing.T) {
	p := newPair(t, pairOpts{})
	ctx := t.Context()
	const id, gate = "conflict-x", "conflict"
	_, wait := streamUntil(t, ctx, p.a.client, chatstream.Request{Input: "gate:" + gate, ChatID: id, SessionSettings: ext("u")}, isPiece("part "))

	t.Run("input on B for A's running turn is 409", func(t *testing.T) {
		_, err := collectErr(ctx, p.b.client, chatstream.Request{Input: "more", ChatID: id, SessionSettings: ext("u")})
		if apiStatus(err) != http.StatusConflict {
			t.Errorf("err = %v, want 409", err)
		}
	})
	t.Run("input of another user on B is 403", func(t *testing.T) {
		_, err := collectErr(ctx, p.b.client, chatstream.Request{Input: "mine", ChatID: id, SessionSettings: ext("intruder")})
		if apiStatus(err) != http.StatusForbidden {
			t.Errorf("err = %v, want 403", err)
		}
	})
	t.Run("input on B through another agent is 404, for the user and another", func(t *testing.T) {
		for _, who := range []string{"u", "intruder"} {
			var err error
			for _, err = range p.b.client.Stream(ctx, acct, "8", chatstream.Request{Input: "more", ChatID: id, SessionSettings: ext(who)}) {
				if err != nil {
					break
				}
			}
			if apiStatus(err) != http.StatusNotFound {
				t.Errorf("%s: err = %v, want 404", who, err)
			}
		}
	})
	t.Run("abort and rejoin of another user on B are 403", func(t *testing.T) {
		if err := p.b.client.Abort(ctx, acct, agentID, id, chatstream.SessionSettings{ExternalID: "intruder"}); apiStatus(err) != http.StatusForbidden {
			t.Errorf("abort err = %v, want 403", err)
		}
		if _, err := collectErr(ctx, p.b.client, chatstream.Request{ChatID: id, SessionSettings: ext("intruder")}); apiStatus(err) != http.StatusForbidden {
			t.Errorf("rejoin err = %v, want 403", err)
		}
	})
	t.Run("a new chat on B is not blocked", func(t *testing.T) {
		if msgs := collect(t, p.b.client, chatstream.Request{Input: "echo:hi", ChatID: "conflict-other", SessionSettings: ext("u")}); last(msgs).State.Error != "" {
			t.Errorf("state %+v", last(msgs).State)
		}
	})
	p.agent.open(gate)
	msgs, _, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if st := last(msgs).State; st == nil || st.Aborted || st.Error != "" {
		t.Errorf("A's turn ended with %+v, want a plain end", st)
	}

	t.Run("abort on B of an idle thread is 204 and changes nothing", func(t *testing.T) {
		_, before := stateOf(t, p.a, id, "u")
		if err := p.b.client.Abort(ctx, acct, agentID, id, chatstream.SessionSettings{ExternalID: "u"}); err != nil {
			t.Fatalf("abort: %v", err)
		}
		_, after := stateOf(t, p.a, id, "u")
		if a, b := jsonOf(t, before), jsonOf(t, after); a != b {
			t.Errorf("state changed:\n %s\n %s", a, b)
		}
		// The next turn is not aborted by the earlier request.
		if msgs := collect(t, p.a.client, chatstream.Request{Input: "echo:later", ChatID: id, SessionSettings: ext("u")}); last(msgs).State.Aborted {
			t.Errorf("next turn aborted")
		}
	})
	t.Run("input of another user on B for the idle thread is 403 and frees its claim", func(t *testing.T) {
		// The claim succeeds (no turn runs), the thread check then fails:
		// the claim is released with the reservation.
		if _, err := collectErr(ctx, p.b.client, chatstream.Request{Input: "mine", ChatID: id, SessionSettings: ext("intruder")}); apiStatus(err) != http.StatusForbidden {
			t.Errorf("err = %v, want 403", err)
		}
		for _, e := range []*env{p.a, p.b} {
			if _, err := collectErr(ctx, e.client, chatstream.Request{Input: "echo:free", ChatID: id, SessionSettings: ext("u")}); err != nil {
				t.Errorf("owner's next turn: %v", err)
			}
		}
	})
	t.Run("abort on B of an unknown chat is 404", func(t *testing.T) {
		if err := p.b.client.Abort(ctx, acct, agentID, "no-such-chat", chatstream.SessionSettings{ExternalID: "u"}); apiStatus(err) != http.StatusNotFound {
			t.Errorf("err = %v, want 404", err)
		}
	})
}

// TestClusterTurnLost: the replica running a turn loses the cluster (here
// its Cluster is closed, as if it crashed): a stream rejoined on another
// replica ends, after the lease, with the stored history and state.error,
// and the thread can run a new turn there.
func TestClusterTurnLost(t *testing.T) {
	p := newPair(t, pairOpts{clusterA: fastCluster, clusterB: fastCluster})
	ctx := t.Context()
	const id, gate = "lost-x", "lost"
	_, wait := streamUntil(t, ctx, p.a.client, chatstream.Request{Input: "gate:" + gate, ChatID: id, SessionSettings: ext("u")}, isPiece("part "))
	_, waitB := streamUntil(t, ctx, p.b.client, chatstream.Request{ChatID: id, SessionSettings: ext("u")}, isPiece("part "))
	if err := p.ca.Close(); err != nil {
		t.Fatal(err)
	}
	msgsB, _, err := waitB()
	if err != nil {
		t.Fatal(err)
	}
	st := last(msgsB)
	if st.ID != chatstream.StateID || st.State == nil || st.State.Error == "" {
		t.Fatalf("B's stream ends with %+v, want __state__ with an error", st)
	}
	// The stored echo, and the answer so far if a checkpoint stored it.
	hist := st.State.Messages
	if n := len(hist); n < 1 || n > 2 || hist[0].Role != chatstream.RoleUser ||
		n == 2 && (hist[1].Role != chatstream.RoleAssistant || hist[1].IsInProcess || hist[1].Content != "first part ") {
		t.Errorf("state messages = %s, want the stored user echo and at most the checkpointed answer", jsonOf(t, hist))
	}
	// A's own stream ends normally: its turn ran on.
	p.agent.open(gate)
	msgsA, _, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if fa, _ := conv(msgsA).FinalAnswer(); fa.Content != "first part second" {
		t.Errorf("answer on A = %q", fa.Content)
	}
	// The dead claim has expired: B runs the next turn.
	if msgs := collect(t, p.b.client, chatstream.Request{Input: "echo:after", ChatID: id, SessionSettings: ext("u")}); last(msgs).State.Error != "" {
		t.Errorf("next turn on B: %+v", last(msgs).State)
	}
}

// TestClusterShutdownEndsRemoteStreams: Shutdown of a replica ends its
// streams of turns running elsewhere with the stored state; the turn runs
// on.
func TestClusterShutdownEndsRemoteStreams(t *testing.T) {
	p := newPair(t, pairOpts{})
	ctx := t.Context()
	const id, gate = "shutdown-x", "shutdown"
	_, wait := streamUntil(t, ctx, p.a.client, chatstream.Request{Input: "gate:" + gate, ChatID: id, SessionSettings: ext("u")}, isPiece("part "))
	_, waitB := streamUntil(t, ctx, p.b.client, chatstream.Request{ChatID: id, SessionSettings: ext("u")}, isPiece("part "))
	sctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := p.b.h.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown of B: %v", err)
	}
	msgsB, _, err := waitB()
	if err != nil {
		t.Fatal(err)
	}
	if st := last(msgsB).State; st == nil || st.Error == "" {
		t.Errorf("B's stream ends with %+v, want __state__ with an error", st)
	}
	p.agent.open(gate)
	msgsA, _, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if st := last(msgsA).State; st == nil || st.Aborted || st.Error != "" {
		t.Errorf("A's turn ended with %+v", st)
	}
}

func TestClusterNoGoroutineLeak(t *testing.T) {
	p := newPair(t, pairOpts{})
	ctx := t.Context()
	idle := func() {
		for _, e := range []*env{p.a, p.b} {
			e.Client().CloseIdleConnections()
		}
	}
	round := func(n int) {
		id := "leak-" + string(rune('a'+n))
		// A completed turn on A, rejoined on B.
		gate := "leak-" + id
		_, wait := streamUntil(t, ctx, p.a.client, chatstream.Request{Input: "gate:" + gate, ChatID: id, SessionSettings: ext("leak")}, isPiece("part "))
		_, waitB := streamUntil(t, ctx, p.b.client, chatstream.Request{ChatID: id, SessionSettings: ext("leak")}, isPiece("part "))
		// 409 on B: a claim refused inside the transaction.
		if _, err := collectErr(ctx, p.b.client, chatstream.Request{Input: "x", ChatID: id, SessionSettings: ext("leak")}); apiStatus(err) != http.StatusConflict {
			t.Errorf("input on B: %v, want 409", err)
		}
		p.agent.open(gate)
		wait()
		waitB()
		// 403 on B after a successful claim: the claim is released.
		if _, err := collectErr(ctx, p.b.client, chatstream.Request{Input: "x", ChatID: id, SessionSettings: ext("leak-other")}); apiStatus(err) != http.StatusForbidden {
			t.Errorf("input of another user on B: %v, want 403", err)
		}
		// A turn on B aborted from A.
		_, wait = streamUntil(t, ctx, p.b.client, chatstream.Request{Input: "slow", ChatID: id, SessionSettings: ext("leak")}, isPiece("answer"))
		if err := p.a.client.Abort(ctx, acct, agentID, id, chatstream.SessionSettings{ExternalID: "leak"}); err != nil {
			t.Fatal(err)
		}
		wait()
	}
	// Warm up the pools, then take the baseline.
	round(0)
	idle()
	time.Sleep(100 * time.Millisecond)
	base, _ := goroutines()
	for i := 1; i <= 3; i++ {
		round(i)
	}
	// A running turn stopped by Shutdown, followed from the other replica.
	_, wait := streamUntil(t, ctx, p.a.client, chatstream.Request{Input: "slow", ChatID: "leak-shutdown", SessionSettings: ext("leak")}, isPiece("answer"))
	_, waitB := streamUntil(t, ctx, p.b.client, chatstream.Request{ChatID: "leak-shutdown", SessionSettings: ext("leak")}, isPiece("answer"))
	sctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := p.a.h.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	wait()
	msgsB, _, _ := waitB()
	if st := last(msgsB).State; st == nil || !st.Aborted {
		t.Errorf("B's rejoined stream after A's shutdown ends with %+v, want aborted", st)
	}
	idle()
	waitGoroutines(t, base)
}

// BenchmarkCrossReplicaAbort starts a turn on replica A whose agent waits,
// aborts it on replica B, and reports the time from B's 204 to the end of
// A's stream (p50, p99). PostgreSQL only; default cluster options.
func BenchmarkCrossReplicaAbort(b *testing.B) {
	p := newPair(b, pairOpts{})
	ctx := b.Context()
	var lat []time.Duration
	i := 0
	for b.Loop() {
		i++
		id := fmt.Sprintf("xabort-%d", i)
		_, wait := streamUntil(b, ctx, p.a.client, chatstream.Request{Input: "slow", ChatID: id, SessionSettings: ext("bench")}, isPiece("answer"))
		if err := p.b.client.Abort(ctx, acct, agentID, id, chatstream.SessionSettings{ExternalID: "bench"}); err != nil {
			b.Fatal(err)
		}
		acked := time.Now()
		msgs, end, err := wait()
		if err != nil {
			b.Fatal(err)
		}
		if st := last(msgs).State; st == nil || !st.Aborted {
			b.Fatalf("stream %d ends with %+v", i, st)
		}
		lat = append(lat, max(0, end.Sub(acked)))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkCrossReplicaRejoinLag streams a paced turn on replica A while a
// stream on replica B rejoins it, and reports how much later each live line
// reaches B's client than A's (p50, p99). Default cluster options (lines
// written every 50 ms).
func BenchmarkCrossReplicaRejoinLag(b *testing.B) {
	p := newPair(b, pairOpts{})
	ctx := b.Context()
	var lag []time.Duration
	i := 0
	for b.Loop() {
		i++
		id := fmt.Sprintf("xlag-%d", i)
		arrived := func(c *chatstream.Client, req chatstream.Request, started chan<- struct{}) map[int64]time.Time {
			at := map[int64]time.Time{}
			once := sync.Once{}
			for m, err := range c.Stream(ctx, acct, agentID, req) {
				if err != nil {
					b.Error(err)
					break
				}
				if _, ok := at[m.Sort]; !ok && m.ID != chatstream.CutoffID {
					at[m.Sort] = time.Now()
				}
				if started != nil && isContent(m) {
					once.Do(func() { close(started) })
				}
			}
			return at
		}
		started := make(chan struct{})
		var onA map[int64]time.Time
		done := make(chan struct{})
		go func() {
			defer close(done)
			onA = arrived(p.a.client, chatstream.Request{Input: "paced", ChatID: id, SessionSettings: ext("bench")}, started)
		}()
		<-started
		joined := time.Now()
		onB := arrived(p.b.client, chatstream.Request{ChatID: id, SessionSettings: ext("bench")}, nil)
		<-done
		for s, ta := range onA {
			if tb, ok := onB[s]; ok && ta.After(joined) {
				lag = append(lag, max(0, tb.Sub(ta)))
			}
		}
	}
	if len(lag) == 0 {
		b.Fatal("no live line measured")
	}
	slices.Sort(lag)
	b.ReportMetric(float64(lag[len(lag)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lag[len(lag)*99/100].Microseconds())/1000, "p99-ms")
}

// failJoin is a Cluster whose Join fails: the database lost between the
// abort's two calls.
type failJoin struct{ *pgcluster.Cluster }

func (f failJoin) Join(context.Context, chatstream.ThreadKey) (chatstream.RemoteTurn, bool, error) {
	return nil, false, errors.New("connection reset")
}

// TestClusterAbortWaitFails: an abort on B whose wait for the turn's end
// on A cannot read the cluster is a 503, never a 204 while the thread is
// still held (the next input would be 409).
func TestClusterAbortWaitFails(t *testing.T) {
	dsn := testdb.OpenDSN(t, testdb.Postgres)
	ca := openCluster(t, dsn, pgcluster.WithReplicaID("a"), pgcluster.WithListen(false), pgcluster.WithPollInterval(time.Second))
	cb := openCluster(t, dsn, pgcluster.WithReplicaID("b"))
	openStore := storeOn(dsn)
	tg := apitest.Target{Backend: testdb.Postgres, Router: apitest.ServeMux}
	agent := newGatedAgent()
	a := newEnv(t, tg, envOpts{agent: agent, store: openStore, opts: []chatstream.Option{chatstream.WithCluster(ca)}})
	b := newEnv(t, tg, envOpts{agent: agent, store: openStore, opts: []chatstream.Option{chatstream.WithCluster(failJoin{cb})}})
	_, wait := streamUntil(t, t.Context(), a.client, chatstream.Request{Input: "slow", ChatID: "j", SessionSettings: ext("u")}, isPiece("answer"))
	if err := b.client.Abort(t.Context(), acct, agentID, "j", chatstream.SessionSettings{ExternalID: "u"}); apiStatus(err) != http.StatusServiceUnavailable {
		t.Errorf("abort on B whose wait failed: %v, want 503", err)
	}
	if _, _, err := wait(); err != nil {
		t.Fatal(err)
	}
}

// TestClusterNewUsersOnRunningThread: 40 first requests of new users at
// once, on replica B, name a chat whose turn runs on replica A (another
// user's): each is 403, and an unrelated request on B meanwhile succeeds.
// A new user's claim is made in the opening's transaction, which may hold
// the account's counters: the thread read after a refused claim goes
// through that transaction, not through a second connection of the pool
// (with it, 31 of the 40 waited for the query timeout and were 503).
func TestClusterNewUsersOnRunningThread(t *testing.T) {
	p := newPair(t, pairOpts{})
	ctx := t.Context()
	startTurn(t, p.a, "owner", "busy")
	var wg sync.WaitGroup
	start := make(chan struct{})
	var mu sync.Mutex
	codes := map[int]int{}
	var slowest time.Duration
	for i := range 40 {
		wg.Go(func() {
			<-start
			t0 := time.Now()
			err := firstLine(ctx, p.b.client, chatstream.Request{Input: "x", ChatID: "busy", SessionSettings: ext(fmt.Sprintf("nu-%d", i))})
			d := time.Since(t0)
			mu.Lock()
			codes[apiStatus(err)]++
			slowest = max(slowest, d)
			mu.Unlock()
		})
	}
	close(start)
	time.Sleep(300 * time.Millisecond)
	t0 := time.Now()
	_, err := collectErr(ctx, p.b.client, chatstream.Request{Input: "echo:x", ChatID: "unrelated", SessionSettings: ext("owner")})
	other := time.Since(t0)
	wg.Wait()
	t.Logf("slowest refusal %v, unrelated request %v", slowest, other)
	if codes[http.StatusForbidden] != 40 {
		t.Errorf("codes %v, want 40 × 403", codes)
	}
	if err != nil {
		t.Errorf("an unrelated request meanwhile: %v", err)
	}
}

// TestClusterAbortDuringOpeningOnOtherReplica: an abort received by
// replica B while the first turn of a new chat is opening on A (claimed,
// its thread not stored yet) waits for the opening and stops the turn on
// A; for a user that A's opening creates too (another user's abort:
// TestAbortOfAnotherUserDuringOpeningSameAnswer).
func TestClusterAbortDuringOpeningOnOtherReplica(t *testing.T) {
	for _, tc := range []struct {
		name, user string
		returning  bool
	}{
		{"new user", "opening-new", false},
		{"returning user", "opening-returning", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs := txGateStore{armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
			p := newPair(t, pairOpts{storeA: func(st store.Store) store.Store { gs.Store = st; return gs }})
			release := sync.OnceFunc(func() { close(gs.release) })
			t.Cleanup(release) // a failed test must not hold A's opening
			ctx := t.Context()
			if tc.returning {
				if _, err := collectErr(ctx, p.a.client, chatstream.Request{Input: "echo:hi", ChatID: tc.user + "-earlier", SessionSettings: ext(tc.user)}); err != nil {
					t.Fatal(err)
				}
			}
			gs.armed.Store(true)
			chatID := tc.user + "-chat"
			res := make(chan []chatstream.Message, 1)
			go func() {
				msgs, _ := collectErr(context.Background(), p.a.client, chatstream.Request{Input: "gate:never", ChatID: chatID, SessionSettings: ext(tc.user)})
				res <- msgs
			}()
			<-gs.entered // A claimed the thread; its thread is not stored
			aborted := make(chan error, 1)
			go func() { aborted <- p.b.client.Abort(ctx, acct, agentID, chatID, *ext(tc.user)) }()
			select {
			case err := <-aborted:
				t.Fatalf("abort on B answered during A's opening: %v", err)
			case <-time.After(200 * time.Millisecond): // it waits for the opening
			}
			release()
			if err := <-aborted; err != nil {
				t.Fatalf("abort on B during A's opening: %v (status %d), want 204", err, apiStatus(err))
			}
			select {
			case msgs := <-res:
				if st := last(msgs).State; st == nil || !st.Aborted {
					t.Errorf("B answered 204, but the turn on A was not aborted: last state %+v", st)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the stream on A did not end")
			}
		})
	}
}

// TestAbortOfAnotherUserDuringOpeningSameAnswer: another user's abort,
// received by the replica where the first turn of a new chat is opening,
// gets one answer whether or not the server has a cluster (and whichever
// docs/http-reference.md states).
func TestAbortOfAnotherUserDuringOpeningSameAnswer(t *testing.T) {
	status := func(withCluster bool) int {
		gs := txGateStore{armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
		// The intruder's first read of the chat is held until the test
		// knows it found no thread: it comes before the opening commits.
		rg := nthMissGate{chatID: "same-answer", n: new(atomic.Int32), reached: new(atomic.Bool), failed: new(atomic.Bool),
			entered: make(chan struct{}), release: make(chan struct{})}
		wrap := func(st store.Store) store.Store { gs.Store = st; rg.Store = gs; return rg }
		var e *env
		if withCluster {
			e = newPair(t, pairOpts{storeA: wrap}).a
		} else {
			e = newEnv(t, apitest.Target{Backend: testdb.Postgres, Router: apitest.ServeMux}, envOpts{store: func(t testing.TB, backend string) store.Store {
				return wrap(testdb.Open(t, backend))
			}})
		}
		rel, relRead := sync.OnceFunc(func() { close(gs.release) }), sync.OnceFunc(func() { close(rg.release) })
		t.Cleanup(rel)
		t.Cleanup(relRead)
		gs.armed.Store(true)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = collectErr(context.Background(), e.client, chatstream.Request{Input: "echo:x", ChatID: "same-answer", SessionSettings: ext("owner")})
		}()
		<-gs.entered
		rg.n.Store(1)
		other := make(chan error, 1)
		go func() { other <- e.client.Abort(t.Context(), acct, agentID, "same-answer", *ext("intruder")) }()
		<-rg.entered
		relRead()
		select {
		case err := <-other:
			rel()
			<-done
			return apiStatus(err)
		case <-time.After(500 * time.Millisecond): // the abort waits for the opening
		}
		rel()
		<-done
		return apiStatus(<-other)
	}
	without, with := status(false), status(true)
	if without != with {
		t.Errorf("another user's abort during the opening, on the opening replica: %d without a cluster, %d with one; want one answer", without, with)
	}
}

// nthMissGate acts on the nth read of chatID outside a transaction that
// finds no thread, once armed: with hold, it returns that read's answer
// only once release is closed (entered is closed meanwhile); with fail,
// it fails the read after it instead (the next read of chatID).
type nthMissGate struct {
	store.Store
	chatID  string
	n       *atomic.Int32 // misses left before the gate; armed when > 0
	fail    bool
	reached *atomic.Bool
	failed  *atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s nthMissGate) Thread(ctx context.Context, accountID int64, chatID string) (store.Thread, error) {
	if chatID == s.chatID && s.fail && s.reached.Load() && s.failed.CompareAndSwap(false, true) {
		return store.Thread{}, store.ErrUnavailable
	}
	th, err := s.Store.Thread(ctx, accountID, chatID)
	if chatID == s.chatID && errors.Is(err, store.ErrNotFound) && s.n.Load() > 0 && s.n.Add(-1) == 0 {
		s.reached.Store(true)
		if !s.fail {
			close(s.entered)
			<-s.release
		}
	}
	return th, err
}

// pairGatedB is newPair with A's store wrapped by wrapA and B's by wrapB.
func pairGatedB(t *testing.T, wrapA, wrapB func(store.Store) store.Store) (a, b *env, agent *gatedAgent) {
	dsn := testdb.OpenDSN(t, testdb.Postgres)
	agent = newGatedAgent()
	ca := openCluster(t, dsn, pgcluster.WithReplicaID("a"))
	cb := openCluster(t, dsn, pgcluster.WithReplicaID("b"))
	openStore := storeOn(dsn)
	tg := apitest.Target{Backend: testdb.Postgres, Router: apitest.ServeMux}
	a = newEnv(t, tg, envOpts{agent: agent, cfg: withAgent8, opts: []chatstream.Option{chatstream.WithCluster(ca)},
		store: func(t testing.TB, backend string) store.Store { return wrapA(openStore(t, backend)) }})
	b = newEnv(t, tg, envOpts{agent: agent, cfg: withAgent8, opts: []chatstream.Option{chatstream.WithCluster(cb)},
		store: func(t testing.TB, backend string) store.Store { return wrapB(openStore(t, backend)) }})
	return a, b, agent
}

// TestClusterAbortRacingRemoteCommit: an abort received by B while
// the first turn of a new chat is opening on A, whose thread A stores
// between B's last check of the thread (threadOf, no thread) and the read
// that decides whether to wait for the opening (the thread found: 404
// without waiting). The caller's turn was opening when the abort came: it
// must be aborted (204), not answered 404 while it runs on.
func TestClusterAbortRacingRemoteCommit(t *testing.T) {
	const chatID = "race-remote"
	gs := txGateStore{armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
	rg := nthMissGate{chatID: chatID, n: new(atomic.Int32), failed: new(atomic.Bool), reached: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
	a, b, agent := pairGatedB(t,
		func(st store.Store) store.Store { gs.Store = st; return gs },
		func(st store.Store) store.Store { rg.Store = st; return rg })
	relOpen, relRead := sync.OnceFunc(func() { close(gs.release) }), sync.OnceFunc(func() { close(rg.release) })
	t.Cleanup(relOpen)
	t.Cleanup(relRead)
	t.Cleanup(func() { agent.open("race-remote") })
	ctx := t.Context()
	gs.armed.Store(true)
	started := make(chan func() ([]chatstream.Message, time.Time, error), 1)
	go func() {
		_, wait := streamUntil(t, ctx, a.client, chatstream.Request{Input: "gate:race-remote", ChatID: chatID, SessionSettings: ext("racer")}, isPiece("first "))
		started <- wait
	}()
	<-gs.entered  // A claimed the thread; not stored yet
	rg.n.Store(3) // threadOf, firstTurnOpening, threadOf again
	aborted := make(chan error, 1)
	go func() { aborted <- b.client.Abort(ctx, acct, agentID, chatID, *ext("racer")) }()
	<-rg.entered // B's third read found no thread
	relOpen()
	wait := <-started // A stored the thread and the turn runs
	relRead()
	if err := <-aborted; err != nil {
		t.Errorf("abort received on B during A's opening: %v (status %d), want 204 and the turn aborted", err, apiStatus(err))
	}
	end := make(chan []chatstream.Message, 1)
	go func() { msgs, _, _ := wait(); end <- msgs }()
	select {
	case msgs := <-end:
		if st := last(msgs).State; st == nil || !st.Aborted {
			t.Errorf("last state %+v, want aborted", st)
		}
	case <-time.After(3 * time.Second):
		t.Errorf("the caller's turn runs on after its abort was answered")
		agent.open("race-remote")
		<-end
	}
}

// TestClusterAbortReadFails: with a cluster, the abort's extra read
// of the thread (the one deciding whether to wait for an opening on
// another replica) fails: the answer is 503 (the database could not be
// read), not 404 while the caller's turn opens on A.
func TestClusterAbortReadFails(t *testing.T) {
	const chatID = "read-fails"
	gs := txGateStore{armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
	rg := nthMissGate{chatID: chatID, n: new(atomic.Int32), fail: true, failed: new(atomic.Bool), reached: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
	a, b, _ := pairGatedB(t,
		func(st store.Store) store.Store { gs.Store = st; return gs },
		func(st store.Store) store.Store { rg.Store = st; return rg })
	rel := sync.OnceFunc(func() { close(gs.release) })
	t.Cleanup(rel)
	gs.armed.Store(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = collectErr(context.Background(), a.client, chatstream.Request{Input: "echo:x", ChatID: chatID, SessionSettings: ext("owner")})
	}()
	<-gs.entered
	rg.n.Store(3) // the read after threadOf, firstTurnOpening, threadOf again fails
	err := b.client.Abort(t.Context(), acct, agentID, chatID, *ext("owner"))
	rel()
	<-done
	if !rg.failed.Load() {
		t.Fatal("the fourth read was not made")
	}
	if apiStatus(err) != http.StatusServiceUnavailable {
		t.Errorf("abort whose thread read failed: %v (status %d), want 503", err, apiStatus(err))
	}
}

// claimGate holds the next Claim of its cluster once armed, until release
// is closed (entered is closed meanwhile).
type claimGate struct {
	chatstream.Cluster
	armed   *atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (c claimGate) Claim(ctx context.Context, key chatstream.ThreadKey, userID int64, lim chatstream.TurnLimits) (chatstream.ClaimedTurn, error) {
	if c.armed.CompareAndSwap(true, false) {
		close(c.entered)
		<-c.release
	}
	return c.Cluster.Claim(ctx, key, userID, lim)
}

// TestClusterAbortWhileInputHeldHere: the user's turn runs on B; an
// input of that chat reaches A, which reserves the thread here and asks
// the cluster, which will refuse it (409): the same user's second input (a
// retry, a second tab), another user's, or the same user's through another
// agent. The user's abort on A, received meanwhile, finds that
// reservation, waits for it without aborting another's, and once A's
// opening is refused aborts the turn on B: an input right after the 204
// starts the next turn (docs/http-reference.md: "an input sent after the
// 204 starts the next turn (no 409)").
func TestClusterAbortWhileInputHeldHere(t *testing.T) {
	for _, tc := range []struct{ name, user, agent string }{
		{"the user's own second input", "u", agentID},
		{"another user's input", "v", agentID},
		{"the user's input through another agent", "u", "8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chatID := "held-" + tc.user + "-" + tc.agent
			dsn := testdb.OpenDSN(t, testdb.Postgres)
			agent := newGatedAgent()
			cg := claimGate{Cluster: openCluster(t, dsn, pgcluster.WithReplicaID("a")), armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
			cb := openCluster(t, dsn, pgcluster.WithReplicaID("b"))
			openStore := storeOn(dsn)
			tg := apitest.Target{Backend: testdb.Postgres, Router: apitest.ServeMux}
			a := newEnv(t, tg, envOpts{agent: agent, store: openStore, cfg: withAgent8, opts: []chatstream.Option{chatstream.WithCluster(cg)}})
			b := newEnv(t, tg, envOpts{agent: agent, store: openStore, cfg: withAgent8, opts: []chatstream.Option{chatstream.WithCluster(cb)}})
			rel := sync.OnceFunc(func() { close(cg.release) })
			t.Cleanup(rel)
			t.Cleanup(func() { agent.open("held") })
			ctx := t.Context()
			_, waitB := streamUntil(t, ctx, b.client, chatstream.Request{Input: "gate:held", ChatID: chatID, SessionSettings: ext("u")}, isPiece("part "))
			cg.armed.Store(true)
			second := make(chan error, 1)
			go func() {
				var err error
				for _, e := range a.client.Stream(context.Background(), acct, tc.agent, chatstream.Request{Input: "echo:again", ChatID: chatID, SessionSettings: ext(tc.user)}) {
					if e != nil {
						err = e
					}
				}
				second <- err
			}()
			<-cg.entered // A reserved the thread here; its claim is under way
			aborted := make(chan error, 1)
			go func() { aborted <- a.client.Abort(ctx, acct, agentID, chatID, *ext("u")) }()
			select {
			case err := <-aborted:
				aborted <- err
			case <-time.After(300 * time.Millisecond):
			}
			rel()
			abortErr := <-aborted
			if err := <-second; apiStatus(err) != http.StatusConflict && apiStatus(err) != http.StatusNotFound && apiStatus(err) != http.StatusForbidden {
				t.Logf("A's input: %v", err)
			}
			if abortErr != nil {
				t.Fatalf("abort on A: %v", abortErr)
			}
			if _, err := collectErr(ctx, a.client, chatstream.Request{Input: "echo:next", ChatID: chatID, SessionSettings: ext("u")}); err != nil {
				t.Errorf("an input right after the abort's 204: %v (status %d), want the next turn: the turn on B was not aborted", err, apiStatus(err))
			}
			agent.open("held")
			if msgs, _, _ := waitB(); last(msgs).State == nil || !last(msgs).State.Aborted {
				t.Errorf("the turn on B ran to its end after the user's abort was answered 204")
			}
		})
	}
}

// TestClusterAbortOfRefusedOwnOpening: with a cluster, an abort that waits
// for the caller's own opening in this process, which is then refused (an
// unknown group: 400) with no turn of the chat anywhere, is 204 as without
// a cluster: nothing of the caller's runs.
func TestClusterAbortOfRefusedOwnOpening(t *testing.T) {
	gs := gateStore{armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
	p := newPair(t, pairOpts{storeA: func(st store.Store) store.Store { gs.Store = st; return gs }})
	release := sync.OnceFunc(func() { close(gs.release) })
	t.Cleanup(release)
	ctx := t.Context()
	const user, chatID = "refused-own", "refused-own-chat"
	if _, err := collectErr(ctx, p.a.client, chatstream.Request{Input: "echo:hi", ChatID: user + "-earlier", SessionSettings: ext(user)}); err != nil {
		t.Fatal(err)
	}
	gs.armed.Store(true)
	opened := make(chan error, 1)
	go func() {
		ss := ext(user)
		ss.Groups = []string{"no-such-group"}
		_, err := collectErr(context.Background(), p.a.client, chatstream.Request{Input: "echo:x", ChatID: chatID, SessionSettings: ss})
		opened <- err
	}()
	<-gs.entered // reserved and claimed, its transaction held
	aborted := make(chan error, 1)
	go func() { aborted <- p.a.client.Abort(ctx, acct, agentID, chatID, *ext(user)) }()
	time.Sleep(200 * time.Millisecond) // the abort waits for the opening
	release()
	if err := <-opened; apiStatus(err) != http.StatusBadRequest {
		t.Fatalf("the opening with an unknown group: %v, want 400", err)
	}
	if err := <-aborted; err != nil {
		t.Errorf("abort of the caller's refused opening: %v (status %d), want 204", err, apiStatus(err))
	}
}

// TestClusterAbortRemoteAfterRefusedOwnOpeningInTime: the user's first
// turn of chat C opens on B (claimed, its thread not stored yet); the same
// user's second input of C reaches A, which reserves C here and is
// refused by the cluster (409). The user's abort on A waits for A's
// opening, checks the thread again (which waits for B's opening), and
// then still has a bound of its own to abort B's turn: 204, with B's
// turn, the caller's, aborted.
func TestClusterAbortRemoteAfterRefusedOwnOpeningInTime(t *testing.T) {
	const chatID = "refused-then-remote"
	dsn := testdb.OpenDSN(t, testdb.Postgres)
	agent := newGatedAgent()
	cg := claimGate{Cluster: openCluster(t, dsn, pgcluster.WithReplicaID("a")), armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
	cb := openCluster(t, dsn, pgcluster.WithReplicaID("b"))
	gs := gateStore{armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
	openStore := storeOn(dsn)
	tg := apitest.Target{Backend: testdb.Postgres, Router: apitest.ServeMux}
	a := newEnv(t, tg, envOpts{agent: agent, store: openStore, opts: []chatstream.Option{chatstream.WithCluster(cg)}})
	b := newEnv(t, tg, envOpts{agent: agent, opts: []chatstream.Option{chatstream.WithCluster(cb)},
		store: func(t testing.TB, backend string) store.Store { gs.Store = openStore(t, backend); return gs }})
	relA, relB := sync.OnceFunc(func() { close(cg.release) }), sync.OnceFunc(func() { close(gs.release) })
	t.Cleanup(relA)
	t.Cleanup(relB)
	t.Cleanup(func() { agent.open("rtr") })
	ctx := t.Context()
	ss := ext("rtr-user")
	collect(t, a.client, chatstream.Request{Input: "echo:hi", ChatID: "rtr-earlier", SessionSettings: ss}) // a returning user
	gs.armed.Store(true)
	resB := make(chan []chatstream.Message, 1)
	go func() {
		msgs, err := collectErr(context.Background(), b.client, chatstream.Request{Input: "gate:rtr", ChatID: chatID, SessionSettings: ss})
		t.Logf("B's stream: %d lines, %v", len(msgs), err)
		resB <- msgs
	}()
	<-gs.entered // B claimed C (before its transaction); its thread is not stored
	cg.armed.Store(true)
	go func() {
		_, _ = collectErr(context.Background(), a.client, chatstream.Request{Input: "echo:again", ChatID: chatID, SessionSettings: ss})
	}()
	<-cg.entered // A reserved C here; its claim is held
	t0 := time.Now()
	aborted := make(chan error, 1)
	go func() { aborted <- a.client.Abort(ctx, acct, agentID, chatID, *ss) }()
	time.Sleep(time.Second) // the abort waits for A's opening
	relA()                  // A's claim is refused (B holds C)
	time.Sleep(4500 * time.Millisecond)
	relB() // B's opening stores the thread and starts, within the 5 s of afterRemoteOpening
	err := <-aborted
	t.Logf("abort answered after %v: %v", time.Since(t0).Round(time.Millisecond), err)
	if err != nil {
		t.Errorf("abort on A: %v (status %d), want 204 with B's turn (the caller's) aborted", err, apiStatus(err))
	}
	select {
	case msgs := <-resB:
		if st := last(msgs).State; st == nil || !st.Aborted {
			t.Errorf("B's turn: last state %+v, want aborted", st)
		}
	case <-time.After(3 * time.Second):
		t.Errorf("the caller's turn on B runs on after the abort was answered")
	}
}

// failTxGate holds the next transaction once armed until release is
// closed, then fails it (the database briefly unavailable): an opening
// reserved here and refused, with no turn anywhere.
type failTxGate struct {
	store.Store
	armed   *atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s failTxGate) InTx(ctx context.Context, fn func(store.Tx) error) error {
	if s.armed.CompareAndSwap(true, false) {
		close(s.entered)
		<-s.release
		return store.ErrUnavailable
	}
	return s.Store.InTx(ctx, fn)
}

// TestAbortOfOwnRefusedNewChatSameAnswer: the user's abort of the first
// turn of its new chat, received while that turn opens here, whose
// opening is then refused (its transaction fails): no thread, no turn
// anywhere. The answer is the same with and without a cluster: 204.
func TestAbortOfOwnRefusedNewChatSameAnswer(t *testing.T) {
	status := func(withCluster bool) int {
		dsn := testdb.OpenDSN(t, testdb.Postgres)
		gs := failTxGate{armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
		var opts []chatstream.Option
		if withCluster {
			opts = append(opts, chatstream.WithCluster(openCluster(t, dsn, pgcluster.WithReplicaID("a"))))
		}
		openStore := storeOn(dsn)
		e := newEnv(t, apitest.Target{Backend: testdb.Postgres, Router: apitest.ServeMux}, envOpts{opts: opts,
			store: func(t testing.TB, backend string) store.Store { gs.Store = openStore(t, backend); return gs }})
		rel := sync.OnceFunc(func() { close(gs.release) })
		t.Cleanup(rel)
		ss := ext("own-refused")
		collect(t, e.client, chatstream.Request{Input: "echo:hi", ChatID: "earlier", SessionSettings: ss}) // returning: reserved before the transaction
		gs.armed.Store(true)
		done := make(chan error, 1)
		go func() {
			_, err := collectErr(context.Background(), e.client, chatstream.Request{Input: "echo:x", ChatID: "own-refused", SessionSettings: ss})
			done <- err
		}()
		<-gs.entered
		aborted := make(chan error, 1)
		go func() { aborted <- e.client.Abort(t.Context(), acct, agentID, "own-refused", *ss) }()
		var err error
		select {
		case err = <-aborted:
		case <-time.After(300 * time.Millisecond): // waits for the opening
		}
		rel()
		if err == nil {
			err = <-aborted
		}
		t.Logf("cluster %v: opening %v; abort %v", withCluster, <-done, err)
		if err == nil {
			return http.StatusNoContent
		}
		return apiStatus(err)
	}
	without, with := status(false), status(true)
	if without != with {
		t.Errorf("the user's abort of its own new chat's opening, refused: %d without a cluster, %d with one; want one answer (204: found the caller's opening)", without, with)
	}
}

// TestClusterOwnInputWhileAnothersOpeningElsewhere: another user's input
// on a user's chat claims the chat on replica A before A's store refuses
// it; the user's own input on B meanwhile is 409, try again (the chat is
// the user's, busy for an instant), not 403 as if it were the other's; the
// user's next input, once the other's is refused, opens its turn.
func TestClusterOwnInputWhileAnothersOpeningElsewhere(t *testing.T) {
	p, gs, rel := gatedPair(t)
	ctx := t.Context()
	const chatID = "janes"
	collect(t, p.b.client, chatstream.Request{Input: "echo:hi", ChatID: chatID, SessionSettings: ext("jane")})
	collect(t, p.a.client, chatstream.Request{Input: "echo:hi", ChatID: "mallorys", SessionSettings: ext("mallory")})
	// mallory's opening on A holds the chat's claim
	refused := gs.hold(p.a.client, chatstream.Request{Input: "echo:mine?", ChatID: chatID, SessionSettings: ext("mallory")})
	_, err := collectErr(ctx, p.b.client, chatstream.Request{Input: "echo:again", ChatID: chatID, SessionSettings: ext("jane")})
	rel()
	if apiStatus(err) != http.StatusConflict || !strings.Contains(err.Error(), "try again") {
		t.Errorf("the user's input on B while another's opening on A held its chat: %v, want 409, try again", err)
	}
	if err := <-refused; apiStatus(err) != http.StatusForbidden {
		t.Errorf("another user's input on the chat: %v, want 403", err)
	}
	if _, err := collectErr(ctx, p.b.client, chatstream.Request{Input: "echo:again", ChatID: chatID, SessionSettings: ext("jane")}); err != nil {
		t.Errorf("the user's input once the other's was refused: %v, want its turn", err)
	}
}

// TestClusterOthersWhileOwnerOpensElsewhere: while the owner's opening on
// replica A holds its chat's claim, everyone else on B is answered as the
// spec says (403 another user, 404 through another agent), not with the
// owner's 409, try again.
func TestClusterOthersWhileOwnerOpensElsewhere(t *testing.T) {
	p, gs, rel := gatedPair(t)
	collect(t, p.b.client, chatstream.Request{Input: "echo:hi", ChatID: "janes", SessionSettings: ext("jane")})
	collect(t, p.b.client, chatstream.Request{Input: "echo:hi", ChatID: "m", SessionSettings: ext("mallory")})
	held := gs.hold(p.a.client, chatstream.Request{Input: "echo:held", ChatID: "janes", SessionSettings: ext("jane")})
	othersAnswered(t, p.b, "janes")
	rel()
	if err := <-held; err != nil {
		t.Errorf("the owner's held opening on A: %v", err)
	}
}

// TestClusterOwnSecondInputOnAnothersChat: a user's input on another
// user's chat holds the chat's claim on replica A until A's store refuses
// it; the user's second input on B meanwhile is 403 like the first, not
// 409 as if the chat were the user's with a turn running.
func TestClusterOwnSecondInputOnAnothersChat(t *testing.T) {
	p, gs, rel := gatedPair(t)
	collect(t, p.b.client, chatstream.Request{Input: "echo:hi", ChatID: "j", SessionSettings: ext("jane")})
	collect(t, p.b.client, chatstream.Request{Input: "echo:hi", ChatID: "mallorys", SessionSettings: ext("mallory")})
	first := gs.hold(p.a.client, chatstream.Request{Input: "echo:one", ChatID: "mallorys", SessionSettings: ext("jane")})
	_, err := collectErr(t.Context(), p.b.client, chatstream.Request{Input: "echo:two", ChatID: "mallorys", SessionSettings: ext("jane")})
	rel()
	if apiStatus(err) != http.StatusForbidden {
		t.Errorf("the second input, on B, on another user's chat: %v, want 403", err)
	}
	if err := <-first; apiStatus(err) != http.StatusForbidden {
		t.Errorf("the first input, on A, on another user's chat: %v, want 403", err)
	}
}

// gatedPair returns a pair whose replica A's store holds the next InTx
// once gs is armed, and rel, which lets it go (at the test's end too).
func gatedPair(t *testing.T) (p *pair, gs gateStore, rel func()) {
	gs = newGateStore()
	p = newPair(t, pairOpts{storeA: func(st store.Store) store.Store { gs.Store = st; return gs }})
	rel = sync.OnceFunc(func() { close(gs.release) })
	t.Cleanup(rel)
	return p, gs, rel
}
