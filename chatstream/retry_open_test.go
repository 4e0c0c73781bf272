package chatstream_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/pgcluster"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
)

// retryOnceStore runs the opening's transaction twice once armed, as the
// adapter does on a transient failure (PostgreSQL 40001/40P01, SQLite busy
// or a group member's failure): fn runs and succeeds, the transaction is
// rolled back (after a gate), and fn runs again in a fresh transaction.
type retryOnceStore struct {
	store.Store
	armed   *atomic.Bool
	entered chan struct{}
	release chan struct{}
}

var errForcedRetry = errors.New("forced transient failure")

func (s retryOnceStore) InTx(ctx context.Context, fn func(store.Tx) error) error {
	if !s.armed.CompareAndSwap(true, false) {
		return s.Store.InTx(ctx, fn)
	}
	err := s.Store.InTx(ctx, func(tx store.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		close(s.entered)
		<-s.release
		return errForcedRetry // rolled back: the adapter runs fn again
	})
	if !errors.Is(err, errForcedRetry) {
		return err
	}
	return s.Store.InTx(ctx, fn)
}

// TestAbortAcrossRetriedNewUserOpening: an abort that comes while a new
// user's opening transaction runs again (as the store retries it) is
// answered 204 and the turn is aborted as it starts. On PostgreSQL the
// retry creates the user under another id (a sequence is not rolled back):
// the reservation is given to it in place, keeping the abort's mark.
func TestAbortAcrossRetriedNewUserOpening(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		rs := retryOnceStore{armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
		e := newEnv(t, tg, envOpts{store: func(t testing.TB, backend string) store.Store {
			rs.Store = testdb.Open(t, backend)
			return rs
		}})
		rs.armed.Store(true)
		abortHeldOpening(t, e, ext("brand-new"), "retried-chat", rs.entered, rs.release)
	})
}

// TestClusterRetriedNewUserOpening: with a cluster, a new user's opening
// transaction that runs again under another user id claims the thread
// again for that id: the turn runs, its stream can be rejoined on another
// replica by the user (not 403 as another user's), and the thread is free
// afterwards on both replicas.
func TestClusterRetriedNewUserOpening(t *testing.T) {
	dsn := testdb.OpenDSN(t, testdb.Postgres)
	rs := retryOnceStore{armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
	ca := openCluster(t, dsn, pgcluster.WithReplicaID("a"))
	cb := openCluster(t, dsn, pgcluster.WithReplicaID("b"))
	tg := apitest.Target{Backend: testdb.Postgres, Router: apitest.ServeMux}
	open := storeOn(dsn)
	agent := newGatedAgent()
	a := newEnv(t, tg, envOpts{agent: agent, store: func(t testing.TB, backend string) store.Store {
		rs.Store = open(t, backend)
		return rs
	}, opts: []chatstream.Option{chatstream.WithCluster(ca)}})
	b := newEnv(t, tg, envOpts{agent: agent, store: open, opts: []chatstream.Option{chatstream.WithCluster(cb)}})
	ctx := t.Context()
	const chatID, gate = "retried-cluster", "retried"
	rs.armed.Store(true)
	go func() { <-rs.entered; close(rs.release) }()
	_, wait := streamUntil(t, ctx, a.client, chatstream.Request{Input: "gate:" + gate, ChatID: chatID, SessionSettings: ext("fresh")}, isPiece("part "))
	// The claim names the user as stored: its rejoin on B is served.
	rejoin := make(chan error, 1)
	go func() {
		_, err := collectErr(ctx, b.client, chatstream.Request{ChatID: chatID, SessionSettings: ext("fresh")})
		rejoin <- err
	}()
	time.Sleep(100 * time.Millisecond)
	agent.open(gate)
	if _, _, err := wait(); err != nil {
		t.Fatal(err)
	}
	if err := <-rejoin; err != nil {
		t.Errorf("the user's rejoin on B: %v", err)
	}
	for _, e := range []*env{a, b} {
		if _, err := collectErr(ctx, e.client, chatstream.Request{Input: "echo:next", ChatID: chatID, SessionSettings: ext("fresh")}); err != nil {
			t.Errorf("the next turn: %v", err)
		}
	}
}
