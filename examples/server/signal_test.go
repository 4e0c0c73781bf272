package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
)

// waitOutput waits until the replica has written a line containing want.
func waitOutput(t *testing.T, r *replica, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(r.stdout.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q within 30s; stdout:\n%s\nstderr:\n%s", want, r.stdout, r.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestInterruptTwice runs the server binary, starts a chat turn and presses
// Ctrl-C (SIGINT): the server says what it waits for and the turn goes on.
// A second Ctrl-C aborts the turn at once: its stream ends with
// state.aborted and state.error, and the server exits cleanly.
func TestInterruptTwice(t *testing.T) {
	// Slow pieces: the turn would run for many seconds.
	r := startReplica(t, "server", "-db", filepath.Join(t.TempDir(), "ctrlc.db"), "-agent-delay", "1s")
	client := chatstream.NewClient(r.base, chatstream.WithAPIKey("sk-acme-user"))
	lines, wait := follow(t.Context(), client, chatstream.Request{Input: "revenue by country", ChatID: "ctrl-c",
		SessionSettings: &chatstream.SessionSettings{ExternalID: "interrupted"}})
	waitFor(t, lines, "the turn", isLiveContent)

	if err := r.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, r, "shutting down: waiting up to 30s for 1 running chat turn; press Ctrl-C again to stop now")
	// The turn goes on after the first Ctrl-C.
	waitFor(t, lines, "the turn after the first Ctrl-C", isLiveContent)
	select {
	case <-r.exited:
		t.Fatalf("the server exited after the first Ctrl-C: %v", r.err)
	default:
	}

	sent := time.Now()
	if err := r.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	msgs, err := wait()
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	last := lastMessage(msgs)
	if last.ID != chatstream.StateID || last.State == nil || !last.State.Aborted || last.State.Error == "" {
		t.Errorf("the stream's last line = %+v, want __state__ with aborted and an error", last)
	}
	select {
	case <-r.exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("the server still runs 15s after the second Ctrl-C; stdout:\n%s", r.stdout)
	}
	if r.err != nil {
		t.Errorf("exit status %v; stderr:\n%s", r.err, r.stderr)
	}
	t.Logf("the stream ended and the server exited %v after the second Ctrl-C", time.Since(sent).Round(time.Millisecond))
	if out := r.stdout.String(); !strings.Contains(out, "stopping now: aborting 1 running chat turn") {
		t.Errorf("stdout does not say the turn is aborted:\n%s", out)
	}
}
