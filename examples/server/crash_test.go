package main

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/middleware/httperr"
)

// kill ends the replica with SIGKILL (kill -9): nothing of its shutdown
// runs. Its cleanup then finds it exited, as expected.
func (r *replica) kill(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-r.exited
	r.err = nil // killed on purpose
}

// TestCrashMidTurn kills the server (kill -9) while a turn streams, starts
// it again on the same SQLite file, and checks that the history keeps the
// partial answer as a complete message and that the next turn's sorts
// continue above every sort the client saw.
func TestCrashMidTurn(t *testing.T) {
	crashMidTurn(t, filepath.Join(t.TempDir(), "crash.db"))
}

// TestCrashMidTurnPostgres is TestCrashMidTurn on PostgreSQL, where the
// killed server's turn claim is left behind until its lease runs out.
func TestCrashMidTurnPostgres(t *testing.T) {
	crashMidTurn(t, testdb.OpenDSN(t, testdb.Postgres)) // skips without EMBEDKIT_TEST_POSTGRES_DSN
}

func crashMidTurn(t *testing.T, db string) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, []byte(replicasConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	// Slow pieces: the turn runs for seconds.
	args := []string{"-db", db, "-config", cfg, "-agent-delay", "200ms"}
	a := startReplica(t, "server", args...)
	client := chatstream.NewClient(a.base, chatstream.WithAPIKey("sk-acme-user"))
	user := chatstream.SessionSettings{ExternalID: "crasher"}
	const id = "crash-chat"
	ctx := t.Context()

	lines, _ := follow(ctx, client, chatstream.Request{Input: "revenue by country", ChatID: id, SessionSettings: &user})
	var (
		seen    int64  // highest sort the client saw
		content string // the answer's content the client saw
		pieces  int
	)
	deadline := time.After(30 * time.Second)
	for pieces < 5 {
		select {
		case m, ok := <-lines:
			if !ok {
				t.Fatal("the stream ended before the crash")
			}
			seen = max(seen, m.Sort)
			if isLiveContent(m) {
				content += m.Content
				pieces++
			}
		case <-deadline:
			t.Fatal("no content within 30s")
		}
	}
	// What the client had read more than a second before the crash must
	// be stored.
	before := content
	time.Sleep(1100 * time.Millisecond)
	for drained := false; !drained; {
		select {
		case m, ok := <-lines:
			if !ok {
				drained = true
				break
			}
			seen = max(seen, m.Sort)
			if isLiveContent(m) {
				content += m.Content
			}
		default:
			drained = true
		}
	}
	a.kill(t)
	t.Logf("killed after sort %d, content %q", seen, content)

	b := startReplica(t, "restarted server", args...)
	client = chatstream.NewClient(b.base, chatstream.WithAPIKey("sk-acme-user"))
	var state chatstream.Message
	for m, err := range client.Stream(ctx, "acme", "7", chatstream.Request{ChatID: id, SessionSettings: &user}) {
		if err != nil {
			t.Fatal(err)
		}
		state = m
	}
	if state.ID != chatstream.StateID || state.State == nil {
		t.Fatalf("state after the restart: %+v", state)
	}
	hist := state.State.Messages
	if len(hist) != 2 || hist[0].Role != chatstream.RoleUser || hist[1].Role != chatstream.RoleAssistant {
		t.Fatalf("history after the restart: %+v, want the echo and the partial answer", hist)
	}
	partial := hist[1]
	if partial.IsInProcess || partial.IsDelta || partial.Content == "" {
		t.Errorf("partial answer %+v, want a complete message with content", partial)
	}
	// Stored at most a second behind: it holds everything the client had
	// read a second before the crash (and may hold more).
	if !strings.HasPrefix(partial.Content, before) {
		t.Errorf("stored partial answer %q does not start with what the client had read a second before the crash: %q", partial.Content, before)
	}
	if state.Sort <= seen {
		t.Errorf("__state__ sort %d after the restart, not above the %d the client saw", state.Sort, seen)
	}

	// The next turn continues above every sort the client saw. On
	// PostgreSQL the dead claim may still hold the thread for its lease.
	var first int64
	for retry := time.Now().Add(20 * time.Second); ; {
		var err error
		for m, serr := range client.Stream(ctx, "acme", "7", chatstream.Request{Input: "and now?", ChatID: id, SessionSettings: &user}) {
			if err = serr; err != nil {
				break
			}
			if m.ID != chatstream.CutoffID && first == 0 {
				first = m.Sort
			}
		}
		if e, ok := errors.AsType[*httperr.Error](err); ok && e.Status == http.StatusConflict && time.Now().Before(retry) {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	if first <= seen {
		t.Errorf("the next turn starts at sort %d, not above the %d the client saw", first, seen)
	}
}
