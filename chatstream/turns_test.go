package chatstream_test

import (
	"bufio"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/chatstreamtest"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
)

// TestHeldTurnGoroutines holds turns open on a paused agent, after a line
// that a checkpoint stores: besides the client's two goroutines, a held
// stream runs two on the server, one that follows the turn on the
// connection it took over from net/http and one that reads it (the
// request's goroutine and net/http's reader have ended), and its turn one,
// its agent's; the checkpoint's goroutine has ended.
func TestHeldTurnGoroutines(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		testHeldTurnGoroutines(t, func(agent chatstream.Agent) *env {
			return newEnv(t, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux}, envOpts{agent: agent})
		})
	})
	// In a cluster, waiting for an abort from another replica costs no
	// goroutine either.
	t.Run("pgcluster", func(t *testing.T) {
		testHeldTurnGoroutines(t, func(agent chatstream.Agent) *env {
			dsn := testdb.OpenDSN(t, testdb.Postgres) // skips without EMBEDKIT_TEST_POSTGRES_DSN
			cl := openCluster(t, dsn)
			return newEnv(t, apitest.Target{Backend: testdb.Postgres, Router: apitest.ServeMux}, envOpts{agent: agent,
				opts:  []chatstream.Option{chatstream.WithCluster(cl)},
				store: storeOn(dsn)})
		})
	})
}

func testHeldTurnGoroutines(t *testing.T, open func(chatstream.Agent) *env) {
	agent := &chatstreamtest.ScriptedAgent{Events: []chatstreamtest.Event{
		chatstreamtest.Content("a"), chatstreamtest.Pause(time.Minute),
	}}
	e := open(agent)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	const n = 3 // the default limit of running turns per user
	g0 := runtime.NumGoroutine()
	for i := range n {
		body := fmt.Sprintf(`{"input":"go","sessionSettings":{"externalId":"held"},"chatId":"held-%d"}`, i)
		req, _ := http.NewRequest(http.MethodPost, e.URL+streamPath(acct, agentID), strings.NewReader(body))
		req.Header.Set("Authorization", "Api-Key "+apitest.AdminKey)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %s", i, resp.Status)
		}
		br := bufio.NewReader(resp.Body)
		for range 4 { // __cutoff__, echo, start, the piece
			if _, err := br.ReadString('\n'); err != nil {
				t.Fatal(err)
			}
		}
	}
	const want = n * 5 // client 2; server: the detached stream's 2 (follower, reader), agent 1
	var got int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got = runtime.NumGoroutine() - g0; got <= want {
			break
		}
	}
	if got > want {
		t.Errorf("%d goroutines for %d held turns, want at most %d: %d per turn besides its connection's", got, n, want, (got-n*4)/n)
	}
}
