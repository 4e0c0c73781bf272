package faulttest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
)

// Inputs the test agent understands.
const (
	inputPaced = "paced" // 40 pieces, 20 ms apart (about 0.8 s)
	inputShort = "short" // a piece, 200 ms, a piece: finishes within a shutdown deadline
	inputLong  = "long"  // a piece, then 30 s: outlives any deadline of these tests
)

// testAgent answers by input (see the input constants); anything else is
// answered "ok" at once. It returns promptly when its context ends.
var testAgent = chatstream.AgentFunc(func(ctx context.Context, t chatstream.Turn, e chatstream.Emitter) error {
	wait := func(d time.Duration) error {
		tm := time.NewTimer(d)
		defer tm.Stop()
		select {
		case <-tm.C:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	switch t.Input {
	case inputPaced:
		for i := range 40 {
			if err := e.Content(fmt.Sprintf("p%d ", i)); err != nil {
				return err
			}
			if err := wait(20 * time.Millisecond); err != nil {
				return err
			}
		}
		return nil
	case inputShort:
		if err := e.Content("start "); err != nil {
			return err
		}
		if err := wait(200 * time.Millisecond); err != nil {
			return err
		}
		return e.Content("done")
	case inputLong:
		if err := e.Content("partial"); err != nil {
			return err
		}
		return wait(30 * time.Second)
	}
	return e.Content("ok")
})

// stream is a chat stream read in the background.
type stream struct {
	mu    sync.Mutex
	msgs  []chatstream.Message
	err   error
	ended time.Time
	first chan struct{} // closed at the first content piece (or the end)
	done  chan struct{}
}

// startStream starts a turn and reads its stream in the background; it
// returns once the first content piece has arrived.
func (e *env) startStream(t *testing.T, req chatstream.Request) *stream {
	t.Helper()
	s := &stream{first: make(chan struct{}), done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), hangGuard)
	go func() {
		defer cancel()
		defer close(s.done)
		signalled := false
		for m, err := range e.client.Stream(ctx, acct, agentID, req) {
			s.mu.Lock()
			if err != nil {
				s.err = err
			} else {
				s.msgs = append(s.msgs, m)
			}
			s.mu.Unlock()
			if err != nil {
				break
			}
			if !signalled && m.IsDelta && m.Content != "" {
				signalled = true
				close(s.first)
			}
		}
		s.mu.Lock()
		s.ended = time.Now()
		s.mu.Unlock()
		if !signalled {
			close(s.first)
		}
	}()
	select {
	case <-s.first:
	case <-time.After(hangGuard):
		t.Fatalf("stream %s: no content within %v", req.ChatID, hangGuard)
	}
	return s
}

// wait returns the stream's lines and error once it has ended.
func (s *stream) wait(t *testing.T) ([]chatstream.Message, error, time.Time) {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(hangGuard + 10*time.Second):
		// The stream's own context ends hangGuard after it began: past
		// that, the process itself stalled (a loaded machine), and the
		// stream's error says more than this.
		t.Fatalf("stream did not end within %v", hangGuard+10*time.Second)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.msgs, s.err, s.ended
}

// checkEnd checks that a stream ended well-formed: no transport error, a
// final assistant message (full content, not in process, graphPath
// starting with "final"), then __state__ as the last line. It returns the
// final message and the state.
func checkEnd(t *testing.T, name string, msgs []chatstream.Message, err error) (chatstream.Message, *chatstream.State) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: stream error %v, want a clean end", name, err)
	}
	if len(msgs) < 2 {
		t.Errorf("%s: %d lines, want a final message and __state__", name, len(msgs))
		return chatstream.Message{}, nil
	}
	final, state := msgs[len(msgs)-2], msgs[len(msgs)-1]
	if state.ID != chatstream.StateID || state.State == nil {
		t.Errorf("%s: last line %+v, want __state__", name, state)
	}
	if final.Role != chatstream.RoleAssistant || final.IsDelta || final.IsInProcess || len(final.GraphPath) == 0 || final.GraphPath[0] != "final" {
		t.Errorf("%s: line before __state__ %+v, want the final assistant message", name, final)
	}
	return final, state.State
}

// historyHas reports whether a __state__ history holds a message of role
// with content.
func historyHas(st *chatstream.State, role, content string) bool {
	if st == nil {
		return false
	}
	for _, m := range st.Messages {
		if m.Role == role && m.Content == content {
			return true
		}
	}
	return false
}
