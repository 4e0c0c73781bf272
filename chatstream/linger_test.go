package chatstream_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/pgcluster"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
)

// stubbornAgent answers "stubborn" with "partial ", then ignores the
// turn's end until the test releases it, as an agent whose database query
// does not watch its context would. Other inputs go to the test scripts.
type stubbornAgent struct {
	scripts
	release  chan struct{}
	returned chan struct{}
}

func newStubbornAgent() *stubbornAgent {
	return &stubbornAgent{scripts: testScripts(), release: make(chan struct{}), returned: make(chan struct{})}
}

func (a *stubbornAgent) Answer(ctx context.Context, t chatstream.Turn, e chatstream.Emitter) error {
	if t.Input != "stubborn" {
		return a.scripts.Answer(ctx, t, e)
	}
	defer close(a.returned)
	if err := e.Content("partial "); err != nil {
		return err
	}
	<-a.release
	return ctx.Err()
}

// TestAbortedAgentCountsUntilItReturns: an aborted turn frees its thread as
// soon as the abort is answered, but keeps counting against the user's
// running-turn limit until its agent returns.
func TestAbortedAgentCountsUntilItReturns(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		a := newStubbornAgent()
		e := newEnv(t, tg, envOpts{agent: a, cfg: withLimits(store.Limits{RunningTurnsPerUser: 2})})
		abortedAgentCounts(t, e, a)
	})
}

// TestAbortedAgentCountsUntilItReturnsCluster is the same with a Cluster,
// which counts the agent once the turn's claim is released.
func TestAbortedAgentCountsUntilItReturnsCluster(t *testing.T) {
	dsn := testdb.OpenDSN(t, testdb.Postgres) // skips without EMBEDKIT_TEST_POSTGRES_DSN
	cl := openCluster(t, dsn)
	a := newStubbornAgent()
	e := newEnv(t, apitest.Target{Backend: testdb.Postgres, Router: apitest.ServeMux}, envOpts{
		agent: a, cfg: withLimits(store.Limits{RunningTurnsPerUser: 2}),
		opts:  []chatstream.Option{chatstream.WithCluster(cl)},
		store: storeOn(dsn),
	})
	abortedAgentCounts(t, e, a)
}

// TestAbortedAgentCountsOnEveryReplica: an aborted turn whose agent still
// runs on one replica counts against the user's limit on the others too.
func TestAbortedAgentCountsOnEveryReplica(t *testing.T) {
	dsn := testdb.OpenDSN(t, testdb.Postgres) // skips without EMBEDKIT_TEST_POSTGRES_DSN
	ca := openCluster(t, dsn, pgcluster.WithReplicaID("a"))
	cb := openCluster(t, dsn, pgcluster.WithReplicaID("b"))
	a := newStubbornAgent()
	tg := apitest.Target{Backend: testdb.Postgres, Router: apitest.ServeMux}
	lim := withLimits(store.Limits{RunningTurnsPerUser: 1})
	ea := newEnv(t, tg, envOpts{agent: a, cfg: lim, opts: []chatstream.Option{chatstream.WithCluster(ca)}, store: storeOn(dsn)})
	eb := newEnv(t, tg, envOpts{agent: a, cfg: lim, opts: []chatstream.Option{chatstream.WithCluster(cb)}, store: storeOn(dsn)})

	_, wait := streamUntil(t, t.Context(), ea.client, chatstream.Request{Input: "stubborn", ChatID: "c1", SessionSettings: ext("u1")}, isPiece("partial "))
	if r := ea.Send(t, ea.Request(t, http.MethodPost, abortPath(acct, agentID), apitest.AdminKey,
		map[string]any{"chatId": "c1", "sessionSettings": map[string]any{"externalId": "u1"}})); r.Status != http.StatusNoContent {
		t.Fatalf("abort: %d %s", r.Status, r.Raw)
	}
	if _, _, err := wait(); err != nil {
		t.Fatalf("the aborted stream: %v", err)
	}
	wantRefused(t, "a turn on the other replica while the aborted turn's agent runs", send(t, eb, "u1", "c2", "echo:x"),
		http.StatusTooManyRequests, "running turn limit of 1 per user reached: wait for a turn to end")
	wantNoChat(t, eb, "c2")
	admittedOnceReturned(t, eb, a, "c2")
}

func abortedAgentCounts(t *testing.T, e *env, a *stubbornAgent) {
	const perUser = "running turn limit of 2 per user reached: wait for a turn to end"
	_, wait := streamUntil(t, t.Context(), e.client, chatstream.Request{Input: "stubborn", ChatID: "c1", SessionSettings: ext("u1")}, isPiece("partial "))
	if r := e.Send(t, e.Request(t, http.MethodPost, abortPath(acct, agentID), apitest.AdminKey,
		map[string]any{"chatId": "c1", "sessionSettings": map[string]any{"externalId": "u1"}})); r.Status != http.StatusNoContent {
		t.Fatalf("abort: %d %s", r.Status, r.Raw)
	}
	msgs, _, err := wait()
	if st := last(msgs).State; err != nil || st == nil || !st.Aborted {
		t.Fatalf("the aborted stream ended with %+v, %v; want state.aborted", last(msgs), err)
	}

	// The thread is free at once: a new input runs there.
	if r := send(t, e, "u1", "c1", "echo:again"); r.Status != http.StatusOK {
		t.Fatalf("a new input in the aborted turn's thread: %d %s, want 200", r.Status, r.Raw)
	}
	// The agent still runs: with one more running turn the user is at
	// the limit of 2.
	startTurn(t, e, "u1", "c2")
	wantRefused(t, "a third turn while the aborted turn's agent runs", send(t, e, "u1", "c3", "echo:x"),
		http.StatusTooManyRequests, perUser)
	wantNoChat(t, e, "c3")

	// Once the agent returns, its place is free.
	admittedOnceReturned(t, e, a, "c3")
}

// TestTimedOutAgentCountsUntilItReturns: a turn past its deadline frees its
// thread (a new input there meets the user's limit, not a running turn)
// and counts until its agent returns.
func TestTimedOutAgentCountsUntilItReturns(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		a := newStubbornAgent()
		e := newEnv(t, tg, envOpts{agent: a, cfg: withLimits(store.Limits{RunningTurnsPerUser: 1}),
			opts: []chatstream.Option{chatstream.WithTurnTimeout(300 * time.Millisecond)}})
		msgs := collect(t, e.client, chatstream.Request{Input: "stubborn", ChatID: "c1", SessionSettings: ext("u1")})
		if st := last(msgs).State; st == nil || st.Error == "" {
			t.Fatalf("the timed-out stream ended with %+v; want state.error", last(msgs))
		}
		wantRefused(t, "a new input while the timed-out turn's agent runs", send(t, e, "u1", "c1", "echo:x"),
			http.StatusTooManyRequests, "running turn limit of 1 per user reached: wait for a turn to end")
		admittedOnceReturned(t, e, a, "c1")
	})
}

// admittedOnceReturned releases a's agent and checks that an input of u1 in
// chatID is then admitted: 429 only until the agent's goroutine has
// recorded its return, which follows the agent's return closely.
func admittedOnceReturned(t *testing.T, e *env, a *stubbornAgent, chatID string) {
	t.Helper()
	close(a.release)
	<-a.returned
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r := send(t, e, "u1", chatID, "echo:x")
		if r.Status == http.StatusOK {
			return
		}
		if r.Status != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("after the agent returned: %d %s, want 200", r.Status, r.Raw)
		}
	}
}
