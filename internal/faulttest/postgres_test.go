package faulttest_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/faulttest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store/gormstore"
)

func newPostgresEnv(t *testing.T) *env {
	t.Helper()
	skipWithoutPostgres(t)
	return newEnv(t, envOpts{
		backend:   testdb.Postgres,
		agent:     testAgent,
		storeOpts: []gormstore.Option{gormstore.WithQueryTimeout(queryTimeout)},
	})
}

// TestPostgresStoppedDuringLoad stops PostgreSQL (connections closed, new
// ones refused) for a second in the middle of a load run of 8 concurrent
// generate-session clients: every request is answered 200 or 503 JSON
// without hanging, the service recovers by itself when PostgreSQL returns,
// and every acknowledged write is stored (all or nothing for the others).
func TestPostgresStoppedDuringLoad(t *testing.T) {
	e := newPostgresEnv(t)
	stop := make(chan struct{})
	done := make(chan []*genReq)
	go func() { done <- e.load(t.Context(), 8, stop) }()

	time.Sleep(700 * time.Millisecond)
	e.proxy.Cut()
	cut := time.Now()
	time.Sleep(time.Second)
	if err := e.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	restored := time.Now()
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	all := <-done

	counts, slowest := checkAnswers(t, all)
	var during, before, after int
	for _, g := range all {
		switch {
		case g.status == http.StatusServiceUnavailable:
			during++
		case g.status == http.StatusOK && g.end.Before(cut):
			before++
		case g.status == http.StatusOK && g.start.After(restored):
			after++
		}
	}
	if before == 0 || during == 0 || after == 0 {
		t.Errorf("200s before the cut: %d, 503s: %d, 200s started after the restore: %d; want each > 0", before, during, after)
	}
	rec, ok := recovery(all, restored)
	if !ok {
		rec = e.probe(t, restored)
	}
	t.Logf("statuses %v over %d requests; slowest 503 %v (query timeout %v); first success %v after PostgreSQL returned",
		counts, len(all), slowest.Round(time.Millisecond), queryTimeout, rec.Round(time.Millisecond))
	e.checkDurable(t, all)
}

// TestPostgresBlackHole makes the network to PostgreSQL drop everything:
// requests fail with 503 within about the query timeout, not the kernel's
// TCP timeouts, and the service recovers when the network returns.
func TestPostgresBlackHole(t *testing.T) {
	e := newPostgresEnv(t)
	for i := range 4 { // the pool holds connections now
		g := &genReq{extID: fmt.Sprintf("warm-%d", i), country: "W", group: "sales"}
		e.generate(t.Context(), g)
		if g.status != http.StatusOK {
			t.Fatalf("warm-up: %d %q %v", g.status, g.errMsg, g.err)
		}
	}
	e.proxy.BlackHole()
	stop := make(chan struct{})
	done := make(chan []*genReq)
	go func() { done <- e.load(t.Context(), 8, stop) }()
	time.Sleep(2500 * time.Millisecond)
	close(stop)
	all := <-done
	if err := e.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	restored := time.Now()
	rec := e.probe(t, restored)

	counts, _ := checkAnswers(t, all)
	if counts[http.StatusServiceUnavailable] == 0 || counts[http.StatusOK] != 0 {
		t.Errorf("statuses in the black hole = %v, want only 503", counts)
	}
	var lat []time.Duration
	for _, g := range all {
		lat = append(lat, g.end.Sub(g.start))
	}
	// A request makes at most a few store calls, each bounded by the
	// query timeout; anything near the hang guard is a hang.
	if worst := percentile(lat, 1); worst > 4*queryTimeout {
		t.Errorf("slowest 503 took %v, want about the query timeout (%v)", worst, queryTimeout)
	}
	t.Logf("statuses %v; 503 latency p50 %v, max %v (query timeout %v); first success %v after the network returned",
		counts, percentile(lat, 0.5).Round(time.Millisecond), percentile(lat, 1).Round(time.Millisecond), queryTimeout, rec.Round(time.Millisecond))
	e.checkDurable(t, all)
}

// TestPostgresGoneUnderOpenStreams takes PostgreSQL away while chat turns
// stream: every open stream still ends well-formed (final message, then
// __state__, here with state.error because the answer cannot be stored), a
// new turn meanwhile is a 503, and after the return new turns work and the
// acknowledged user echo of the interrupted turns is in the history.
func TestPostgresGoneUnderOpenStreams(t *testing.T) {
	skipWithoutPostgres(t)
	for _, fault := range []string{"refused", "black hole"} {
		t.Run(fault, func(t *testing.T) {
			e := newPostgresEnv(t)
			const n = 4
			streams := make([]*stream, n)
			for i := range streams {
				streams[i] = e.startStream(t, chatstream.Request{Input: inputPaced, ChatID: fmt.Sprintf("gone-%d", i),
					SessionSettings: &chatstream.SessionSettings{ExternalID: fmt.Sprintf("streamer-%d", i)}})
			}
			if fault == "refused" {
				e.proxy.Cut()
			} else {
				e.proxy.BlackHole()
			}
			faulted := time.Now()

			// A new turn while the database is away.
			_, err := collect(t, e, chatstream.Request{Input: "q", SessionSettings: &chatstream.SessionSettings{ExternalID: "latecomer"}})
			if !is503(err) {
				t.Errorf("turn while the database is away: %v, want 503", err)
			}

			var lastEnd time.Time
			for i, s := range streams {
				msgs, err, ended := s.wait(t)
				_, st := checkEnd(t, fmt.Sprintf("stream %d", i), msgs, err)
				if st != nil && st.Error == "" {
					t.Errorf("stream %d: state %+v, want state.error (the answer could not be stored)", i, st)
				}
				if ended.After(lastEnd) {
					lastEnd = ended
				}
			}
			t.Logf("streams ended %v after the fault", lastEnd.Sub(faulted).Round(time.Millisecond))

			if err := e.proxy.Restore(); err != nil {
				t.Fatal(err)
			}
			restored := time.Now()
			for i := range streams {
				msgs, err := collect(t, e, chatstream.Request{Input: "again", ChatID: fmt.Sprintf("gone-%d", i),
					SessionSettings: &chatstream.SessionSettings{ExternalID: fmt.Sprintf("streamer-%d", i)}})
				_, st := checkEnd(t, fmt.Sprintf("turn %d after the return", i), msgs, err)
				if st == nil {
					continue
				}
				if st.Error != "" || st.Aborted {
					t.Errorf("turn %d after the return: state %+v, want a normal end", i, st)
				}
				if !historyHas(st, chatstream.RoleUser, inputPaced) || !historyHas(st, chatstream.RoleAssistant, "ok") {
					t.Errorf("turn %d after the return: history %+v, want the earlier echo and the new answer", i, st.Messages)
				}
			}
			t.Logf("new turns served within %v of the return", time.Since(restored).Round(time.Millisecond))
		})
	}
}

// collect reads a whole stream, bounded by the hang guard.
func collect(t *testing.T, e *env, req chatstream.Request) ([]chatstream.Message, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), hangGuard)
	defer cancel()
	var out []chatstream.Message
	for m, err := range e.client.Stream(ctx, acct, agentID, req) {
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
	return out, nil
}

// TestPostgresBlackHoleAtRollback cuts the network exactly when a
// transaction that failed on a rule (an unknown group: 400) sends its
// ROLLBACK: the request is still answered within about the query timeout,
// because the rollback is bounded too, and the connection is not reused.
func TestPostgresBlackHoleAtRollback(t *testing.T) {
	e := newPostgresEnv(t)
	warm := &genReq{extID: "warm", country: "W", group: "sales"}
	e.generate(t.Context(), warm)
	if warm.status != http.StatusOK {
		t.Fatalf("warm-up: %d %q %v", warm.status, warm.errMsg, warm.err)
	}
	e.proxy.BlackHoleOn("ROLLBACK")
	g := &genReq{extID: "rolled-back", country: "R", group: "no-such-group"}
	e.generate(t.Context(), g)
	took := g.end.Sub(g.start)
	if e.proxy.Mode() != faulttest.BlackHole {
		t.Fatal("no ROLLBACK was sent; the test does not test anything")
	}
	if g.err != nil || (g.status != http.StatusBadRequest && g.status != http.StatusServiceUnavailable) {
		t.Errorf("request whose ROLLBACK was black-holed: %d %q %v after %v, want 400 (or 503)", g.status, g.errMsg, g.err, took)
	}
	if took > 3*queryTimeout {
		t.Errorf("request whose ROLLBACK was black-holed took %v, want about the query timeout (%v) at most", took, queryTimeout)
	}
	if err := e.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	rec := e.probe(t, time.Now())
	t.Logf("answered %d after %v; first success %v after the network returned", g.status, took.Round(time.Millisecond), rec.Round(time.Millisecond))
	if u := e.User(t, acct, g.extID, ""); u.Exists {
		t.Errorf("user of a rejected request stored: %+v", u)
	}
}
