package faulttest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/testdb"
)

// TestGracefulShutdown stops the chat handler the way a host's graceful
// stop does, with two turns running: the short one finishes within the
// deadline and ends normally; the long one is aborted at the deadline, its
// stream ending with the in-process message completed and __state__
// aborted; both answers are stored; new turns are 503 meanwhile, and the
// history is still served.
func TestGracefulShutdown(t *testing.T) {
	e := newEnv(t, envOpts{backend: testdb.SQLite, agent: testAgent})
	user := &chatstream.SessionSettings{ExternalID: "shutdown"}
	short := e.startStream(t, chatstream.Request{Input: inputShort, ChatID: "shutdown-short", SessionSettings: user})
	long := e.startStream(t, chatstream.Request{Input: inputLong, ChatID: "shutdown-long", SessionSettings: user})

	const deadline = 700 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	began := time.Now()
	shut := make(chan error, 1)
	go func() { shut <- e.chat.Shutdown(ctx) }()

	msgs, err, shortEnd := short.wait(t)
	final, st := checkEnd(t, "short turn", msgs, err)
	if st != nil && (st.Aborted || st.Error != "") || final.Content != "start done" {
		t.Errorf("short turn: final %q, state %+v; want the whole answer and a normal end", final.Content, st)
	}
	if shortEnd.Sub(began) >= deadline {
		t.Errorf("short turn ended %v after Shutdown, after the deadline (%v)", shortEnd.Sub(began), deadline)
	}

	msgs, err, longEnd := long.wait(t)
	final, st = checkEnd(t, "long turn", msgs, err)
	if st != nil && !st.Aborted || final.Content != "partial" {
		t.Errorf("long turn: final %q, state %+v; want the partial answer and state.aborted", final.Content, st)
	}
	if d := longEnd.Sub(began); d < deadline || d > deadline+5*time.Second {
		t.Errorf("long turn ended %v after Shutdown, want at its deadline (%v)", d, deadline)
	}

	select {
	case err := <-shut:
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	case <-time.After(hangGuard):
		t.Fatal("Shutdown did not return")
	}
	t.Logf("short turn ended %v, long turn %v after Shutdown began (deadline %v)",
		shortEnd.Sub(began).Round(time.Millisecond), longEnd.Sub(began).Round(time.Millisecond), deadline)

	if _, err := collect(t, e, chatstream.Request{Input: "q", SessionSettings: user}); !is503(err) {
		t.Errorf("turn after Shutdown: %v, want 503", err)
	}
	for chatID, answer := range map[string]string{"shutdown-short": "start done", "shutdown-long": "partial"} {
		msgs, err := collect(t, e, chatstream.Request{ChatID: chatID, SessionSettings: user})
		if err != nil || len(msgs) == 0 {
			t.Errorf("history of %s: %d lines, %v", chatID, len(msgs), err)
			continue
		}
		if st := msgs[len(msgs)-1].State; !historyHas(st, chatstream.RoleAssistant, answer) {
			t.Errorf("history of %s = %+v, want the stored answer %q", chatID, st, answer)
		}
	}
}

// TestCloseWithDatabaseBlackHoled: Close with turns running while every
// packet to PostgreSQL is dropped stops them all at once, so that its
// grace bounds the whole, not the grace plus a final write's timeout per
// turn (8 turns took 35 s when they were stopped one after another).
func TestCloseWithDatabaseBlackHoled(t *testing.T) {
	skipWithoutPostgres(t)
	e := newEnv(t, envOpts{backend: testdb.Postgres, agent: testAgent, appName: fmt.Sprintf("close-bh-%d", time.Now().UnixNano())})
	var streams []*stream
	for i := range 8 {
		streams = append(streams, e.startStream(t, chatstream.Request{Input: inputLong, ChatID: fmt.Sprintf("bh-%d", i),
			SessionSettings: &chatstream.SessionSettings{ExternalID: fmt.Sprintf("bh-%d", i)}}))
	}
	e.proxy.BlackHole()
	began := time.Now()
	err := e.chat.Close()
	if took := time.Since(began); took > 15*time.Second {
		t.Errorf("Close took %v with the database black-holed (%v): the turns were not stopped together", took.Round(time.Millisecond), err)
	}
	_ = e.proxy.Restore()
	for _, s := range streams {
		s.wait(t)
	}
}
