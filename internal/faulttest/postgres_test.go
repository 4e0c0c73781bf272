package faulttest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/faulttest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore"
	"github.com/jackc/pgx/v5"
)

func newPostgresEnv(t *testing.T) *env { return newPostgresEnvCluster(t, false) }

// newPostgresEnvCluster is newPostgresEnv with chat turns shared through a
// pgcluster (on the same proxied DSN) when cluster is set.
func newPostgresEnvCluster(t *testing.T, cluster bool) *env {
	t.Helper()
	skipWithoutPostgres(t)
	return newEnv(t, envOpts{
		cluster:   cluster,
		appName:   "embedkit-faulttest-" + strconv.FormatInt(time.Now().UnixNano(), 36),
		backend:   testdb.Postgres,
		agent:     testAgent,
		storeOpts: []gormstore.Option{gormstore.WithQueryTimeout(queryTimeout)},
	})
}

// TestPostgresFaultDuringLoad takes PostgreSQL away in the middle of a load
// run of 8 concurrent generate-session clients and 4 chat clients:
//
//   - "stopped": for a second every connection is closed and new ones are
//     refused, as when PostgreSQL is stopped, then it returns;
//   - "restarted": for a second the server terminates the store's sessions
//     again and again (FATAL 57P01, what a restart or crash does to them)
//     while accepting new ones.
//
// Every request is answered 200 or 503 JSON without hanging (chat: 503
// before the stream, or a stream that ends well-formed), the service
// recovers by itself, and nothing acknowledged is lost: each 200's user,
// attribute, group and sessionId (exchanged for a token), each started
// turn's user echo and each answer whose __state__ reported no error.
// Requests answered 503 left all of their writes or none.
func TestPostgresFaultDuringLoad(t *testing.T) {
	skipWithoutPostgres(t)
	for _, tc := range []struct {
		fault   string
		cluster bool
	}{{"stopped", false}, {"restarted", false}, {"stopped", true}} {
		name, fault := tc.fault, tc.fault
		if tc.cluster {
			name += " with cluster"
		}
		t.Run(name, func(t *testing.T) {
			e := newPostgresEnvCluster(t, tc.cluster)
			stop := make(chan struct{})
			done := make(chan []*genReq)
			go func() { done <- e.load(t.Context(), 8, stop) }()
			chats := make(chan []*chatTurn)
			go func() { chats <- e.chatLoad(t, 4, stop) }()

			// The fault comes once the load runs (a few answers), however
			// busy the machine.
			for deadline := time.Now().Add(20 * time.Second); e.loadOK.Load() < 4 && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond)
			cut := time.Now()
			switch fault {
			case "stopped":
				e.proxy.Cut()
				time.Sleep(time.Second)
				if err := e.proxy.Restore(); err != nil {
					t.Fatal(err)
				}
			case "restarted":
				for time.Since(cut) < time.Second {
					e.terminateBackends(t)
					time.Sleep(50 * time.Millisecond)
				}
			}
			restored := time.Now()
			time.Sleep(1500 * time.Millisecond)
			close(stop)
			all := <-done
			turns := <-chats

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
				t.Errorf("200s before the fault: %d, 503s: %d, 200s started after it: %d; want each > 0", before, during, after)
			}
			rec, ok := recovery(all, restored)
			if !ok {
				rec = e.probe(t, restored)
			}
			t.Logf("generate-session %v over %d requests; slowest 503 %v (query timeout %v); first success %v after PostgreSQL returned",
				counts, len(all), slowest.Round(time.Millisecond), queryTimeout, rec.Round(time.Millisecond))
			e.checkDurable(t, all)
			e.checkTurns(t, turns)
		})
	}
}

// terminateBackends ends the server sessions of the env's store (found by
// the application_name newPostgresEnv gives them) from a direct connection.
func (e *env) terminateBackends(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, os.Getenv(testdb.EnvPostgresDSN))
	if err != nil {
		t.Fatalf("admin connection: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", e.appName); err != nil {
		t.Fatalf("terminate backends: %v", err)
	}
}

// chatTurn is one chat turn of a load run and how it ended.
type chatTurn struct {
	chatID   string
	status   int    // 200 once the stream started, 503 before
	stateErr string // state.error of a stream that started
	err      error
}

// chatLoad runs clients chat clients in closed loops, a new thread per
// turn, until stop is closed.
func (e *env) chatLoad(t *testing.T, clients int, stop <-chan struct{}) []*chatTurn {
	var (
		mu  sync.Mutex
		all []*chatTurn
		wg  sync.WaitGroup
	)
	for c := range clients {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ct := &chatTurn{chatID: fmt.Sprintf("turn-%d-%d", c, i)}
				msgs, err := collect(t, e, chatstream.Request{Input: "q", ChatID: ct.chatID,
					SessionSettings: &chatstream.SessionSettings{ExternalID: fmt.Sprintf("chatter-%d", c)}})
				switch {
				case is503(err):
					ct.status = http.StatusServiceUnavailable
				case err != nil:
					ct.err = err
				default:
					ct.status = http.StatusOK
					if _, st := checkEnd(t, ct.chatID, msgs, nil); st != nil {
						ct.stateErr = st.Error
					}
				}
				mu.Lock()
				all = append(all, ct)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return all
}

// checkTurns checks the chat turns of a load run once the database is
// back: only 200 or 503, and every started turn's echo and every answer
// reported without error are stored.
func (e *env) checkTurns(t *testing.T, turns []*chatTurn) {
	t.Helper()
	counts := map[string]int{}
	for _, ct := range turns {
		switch {
		case ct.err != nil:
			counts["failed"]++
			t.Errorf("chat %s: %v, want 200 or 503", ct.chatID, ct.err)
			continue
		case ct.status == http.StatusServiceUnavailable:
			counts["503"]++
			continue
		case ct.stateErr != "":
			counts["200, state.error"]++
		default:
			counts["200"]++
		}
		msgs, err := e.Store.Messages(t.Context(), e.Accounts[acct].ID, ct.chatID)
		if err != nil {
			t.Errorf("chat %s: history: %v", ct.chatID, err)
			continue
		}
		var echo, answer bool
		for _, m := range msgs {
			var cm chatstream.Message
			if json.Unmarshal(m.Body, &cm) != nil {
				continue
			}
			echo = echo || cm.Role == chatstream.RoleUser && cm.Content == "q"
			answer = answer || cm.Role == chatstream.RoleAssistant && cm.Content == "ok"
		}
		if !echo {
			t.Errorf("chat %s: the user echo of a started turn is not stored", ct.chatID)
		}
		if ct.stateErr == "" && !answer {
			t.Errorf("chat %s: an answer reported without error is not stored", ct.chatID)
		}
	}
	t.Logf("chat turns %v", counts)
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
//
// With a pgcluster, the claims of the interrupted turns cannot be released
// while the database is away; the replica takes over its own stale claims,
// so the threads are free at once when it returns (no 409).
func TestPostgresGoneUnderOpenStreams(t *testing.T) {
	skipWithoutPostgres(t)
	for _, tc := range []struct {
		fault   string
		cluster bool
	}{{"refused", false}, {"black hole", false}, {"refused", true}} {
		name, fault := tc.fault, tc.fault
		if tc.cluster {
			name += " with cluster"
		}
		t.Run(name, func(t *testing.T) {
			e := newPostgresEnvCluster(t, tc.cluster)
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
// transaction that failed on a rule (an unknown group: 400; the new embed
// tenant makes the request a transaction) sends its ROLLBACK: the request is still answered within about the query timeout,
// because the rollback is bounded too, and the connection is not reused.
func TestPostgresBlackHoleAtRollback(t *testing.T) {
	e := newPostgresEnv(t)
	warm := &genReq{extID: "warm", country: "W", group: "sales"}
	e.generate(t.Context(), warm)
	if warm.status != http.StatusOK {
		t.Fatalf("warm-up: %d %q %v", warm.status, warm.errMsg, warm.err)
	}
	e.proxy.BlackHoleOn("ROLLBACK")
	g := &genReq{extID: "rolled-back", country: "R", group: "no-such-group", tenant: "rolled-back-tenant"}
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

// TestPostgresBlackHoleInChatOpening cuts the network when a chat turn's
// opening stores its thread, inside the opening's transaction: the request
// is answered 503 within about the query timeout (a statement in a
// transaction ends with the transaction's deadline), and nothing it wrote
// stays: a user it created is not stored, and a returning user keeps its
// values.
func TestPostgresBlackHoleInChatOpening(t *testing.T) {
	e := newPostgresEnv(t)
	chat := func(extID, country string, ephemeral bool) apitest.Response {
		return e.Send(t, e.Request(t, http.MethodPost, "/api/v1/public/acme/agents/7/chat/stream-chat-state", apitest.AdminKey,
			map[string]any{"input": "echo:hi", "sessionSettings": map[string]any{"externalId": extID, "isEphemeral": ephemeral,
				"userAttributes": []any{map[string]any{"name": "country", "value": country}}}}))
	}
	// The returning user comes from a generate-session: no chat has run
	// yet, so no connection holds the thread's statement prepared, and its
	// text crosses the proxy.
	g := &genReq{extID: "returning", country: "DE", group: "sales"}
	if e.generate(t.Context(), g); g.status != http.StatusOK {
		t.Fatalf("warm-up: %d %q %v", g.status, g.errMsg, g.err)
	}
	for _, c := range []struct {
		name, extID, country string
		ephemeral            bool
	}{
		{"a new persistent user", "newcomer", "FR", false},
		{"a new ephemeral user", "passer-by", "FR", true},
		{"a returning user with a new value", "returning", "FR", false},
	} {
		before := e.User(t, acct, c.extID, "")
		e.proxy.BlackHoleOn("embedkit_threads")
		start := time.Now()
		r := chat(c.extID, c.country, c.ephemeral)
		took := time.Since(start)
		if e.proxy.Mode() != faulttest.BlackHole {
			t.Fatalf("%s: the thread's statement was never sent (%d %s); the test tests nothing", c.name, r.Status, r.Raw)
		}
		if err := e.proxy.Restore(); err != nil {
			t.Fatal(err)
		}
		if r.Status != http.StatusServiceUnavailable || took > 3*queryTimeout {
			t.Errorf("%s: %d %s after %v, want 503 within about the query timeout (%v)", c.name, r.Status, r.Raw, took, queryTimeout)
		}
		e.probe(t, time.Now())
		if after := e.User(t, acct, c.extID, ""); !reflect.DeepEqual(after, before) {
			t.Errorf("%s: the failed request changed the stored user:\n before %+v\n after  %+v", c.name, before, after)
		}
	}
}

// TestClusterBlackHoleAtRefusedClaimRollback: a claim that the running-turn
// limit refuses rolls its transaction back; when the database stops
// answering at that moment, the request is still answered promptly.
func TestClusterBlackHoleAtRefusedClaimRollback(t *testing.T) {
	skipWithoutPostgres(t)
	e := newEnv(t, envOpts{
		cluster:   true,
		appName:   "embedkit-refused-claim-" + strconv.FormatInt(time.Now().UnixNano(), 36),
		backend:   testdb.Postgres,
		agent:     testAgent,
		storeOpts: []gormstore.Option{gormstore.WithQueryTimeout(queryTimeout)},
		chatOpts:  []chatstream.Option{chatstream.WithDefaultLimits(store.Limits{RunningTurnsPerUser: 1})},
	})
	settings := &chatstream.SessionSettings{ExternalID: "limited"}
	e.startStream(t, chatstream.Request{Input: inputLong, ChatID: "long", SessionSettings: settings})
	defer func() { _ = e.client.Abort(context.WithoutCancel(t.Context()), acct, agentID, "long", *settings) }()
	// Only the claim's rollback: the store's connections may roll back
	// first, and black-holing them would hang the claim's BEGIN instead.
	e.proxy.BlackHoleOnApp(e.appName+"-cluster", "rollback")
	start := time.Now()
	_, err := collect(t, e, chatstream.Request{Input: "q", ChatID: "second", SessionSettings: settings})
	took := time.Since(start)
	mode := e.proxy.Mode()
	if err := e.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	if mode != faulttest.BlackHole {
		t.Fatal("no rollback was sent; the test does not test anything")
	}
	if err == nil || took > 3*time.Second {
		t.Errorf("a refused claim whose rollback was black-holed: %v after %v, want an error within about a second", err, took)
	}
}
