package chatstream_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/chatstreamtest"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
)

// TestSortsStayBelowTheStoredMark streams many more lines than one
// reserved block of sorts without pausing, then holds the turn: at that
// moment the thread's stored LastSort (where a restarted server would
// continue) is above every sort the client saw, and the stored history
// already holds the answer so far as a complete message.
func TestSortsStayBelowTheStoredMark(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		events := make([]chatstreamtest.Event, 0, 6001)
		for range 6000 {
			events = append(events, chatstreamtest.Content("x"))
		}
		events = append(events, chatstreamtest.Pause(30*time.Second))
		e := newEnv(t, tg, envOpts{agent: scripts{"many": {Events: events}}})
		var seen int64
		var pieces int
		got, _ := streamUntil(t, t.Context(), e.client, chatstream.Request{Input: "many", ChatID: "many", SessionSettings: ext("u")},
			func(m chatstream.Message) bool {
				if isContent(m) {
					pieces++
				}
				return pieces == 6000
			})
		for i, m := range got {
			if i > 0 && m.Sort <= got[i-1].Sort {
				t.Fatalf("line %d: sort %d after %d", i, m.Sort, got[i-1].Sort)
			}
			seen = max(seen, m.Sort)
		}
		th, err := e.Store.Thread(t.Context(), e.Accounts[acct].ID, "many")
		if err != nil {
			t.Fatal(err)
		}
		if th.LastSort <= seen {
			t.Errorf("stored LastSort %d, not above the %d the client saw", th.LastSort, seen)
		}
		// A checkpoint comes within a second.
		deadline := time.Now().Add(3 * time.Second)
		for {
			msgs, err := e.Store.Messages(t.Context(), e.Accounts[acct].ID, "many")
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) == 2 && strings.Contains(string(msgs[1].Body), strings.Repeat("x", 6000)) &&
				strings.Contains(string(msgs[1].Body), `"isInProcess":false`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no checkpoint with the whole answer so far: %d messages", len(msgs))
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// appendRecorder counts, per message id, the AppendMessages calls that
// store it, in and outside transactions.
type appendRecorder struct {
	store.Store
	mu     sync.Mutex
	writes map[string]int
}

func (s *appendRecorder) record(msgs []store.ThreadMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		s.writes[m.ID]++
	}
}

func (s *appendRecorder) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes[id]
}

func (s *appendRecorder) AppendMessages(ctx context.Context, accountID int64, chatID string, lastSort int64, msgs []store.ThreadMessage) error {
	s.record(msgs)
	return s.Store.AppendMessages(ctx, accountID, chatID, lastSort, msgs)
}

func (s *appendRecorder) InTx(ctx context.Context, fn func(store.Tx) error) error {
	return s.Store.InTx(ctx, func(tx store.Tx) error { return fn(recordingTx{tx, s}) })
}

type recordingTx struct {
	store.Tx
	s *appendRecorder
}

func (t recordingTx) AppendMessages(ctx context.Context, accountID int64, chatID string, lastSort int64, msgs []store.ThreadMessage) error {
	t.s.record(msgs)
	return t.Tx.AppendMessages(ctx, accountID, chatID, lastSort, msgs)
}

// TestCheckpointsStoreCompletedMessagesOnce runs a turn with a tool call
// and then pauses over several checkpoint ticks: the completed tool call is
// stored once (by the first checkpoint; later checkpoints and the final
// write leave it out), the answer so far at every checkpoint, and the
// thread ends with the echo, the tool call and the final answer in order.
func TestCheckpointsStoreCompletedMessagesOnce(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		rec := &appendRecorder{writes: map[string]int{}}
		e := newEnv(t, tg, envOpts{
			agent: scripts{"slow tool": {Events: []chatstreamtest.Event{
				chatstreamtest.Tool("lookup", map[string]any{"q": 1}, map[string]any{"rows": 3}),
				chatstreamtest.Content("one "), chatstreamtest.Pause(700 * time.Millisecond),
				chatstreamtest.Content("two "), chatstreamtest.Pause(700 * time.Millisecond),
				chatstreamtest.Content("three"), chatstreamtest.Pause(700 * time.Millisecond),
			}}},
			store: func(t testing.TB, backend string) store.Store {
				rec.Store = testdb.Open(t, backend)
				return rec
			},
		})
		msgs := collect(t, e.client, chatstream.Request{Input: "slow tool", ChatID: "slow-tool", SessionSettings: ext("ck")})
		var toolID, answerID string
		for _, m := range msgs {
			switch {
			case m.ToolCall != nil:
				toolID = m.ID
			case m.Role == chatstream.RoleAssistant && m.IsDelta:
				answerID = m.ID
			}
		}
		if toolID == "" || answerID == "" {
			t.Fatalf("no tool call or answer in %s", jsonOf(t, msgs))
		}
		if n := rec.count(toolID); n != 1 {
			t.Errorf("the tool call was stored %d times, want 1", n)
		}
		// At least two checkpoints (after "one" and "two") and the final
		// answer.
		if n := rec.count(answerID); n < 3 {
			t.Errorf("the answer was stored %d times, want checkpoints and the final write", n)
		}
		stored, err := e.Store.Messages(t.Context(), e.Accounts[acct].ID, "slow-tool")
		if err != nil {
			t.Fatal(err)
		}
		if len(stored) != 3 || stored[1].ID != toolID || stored[2].ID != answerID ||
			!strings.Contains(string(stored[2].Body), `"content":"one two three"`) ||
			!strings.Contains(string(stored[2].Body), `"isInProcess":false`) {
			t.Fatalf("stored history %s", jsonOf(t, stored))
		}
	})
}

// blockedAppends is a store whose AppendMessages (the checkpoints' and
// final writes) wait until release is closed.
type blockedAppends struct {
	store.Store
	release chan struct{}
}

func (s *blockedAppends) InTx(ctx context.Context, fn func(store.Tx) error) error {
	return s.Store.InTx(ctx, func(tx store.Tx) error { return fn(blockedTx{tx, s.release}) })
}

func (s *blockedAppends) AppendMessages(ctx context.Context, accountID int64, chatID string, lastSort int64, msgs []store.ThreadMessage) error {
	<-s.release
	return s.Store.AppendMessages(ctx, accountID, chatID, lastSort, msgs)
}

type blockedTx struct {
	store.Tx
	release chan struct{}
}

func (t blockedTx) AppendMessages(ctx context.Context, accountID int64, chatID string, lastSort int64, msgs []store.ThreadMessage) error {
	<-t.release
	return t.Tx.AppendMessages(ctx, accountID, chatID, lastSort, msgs)
}

// TestEmittersNeverWaitForWrites streams more lines than a reserved block
// of sorts while the store cannot write: the agent's emitter calls all
// return at once, the lines past the reserved mark reach the client only
// once a checkpoint has stored a new mark, and then all of them do.
func TestEmittersNeverWaitForWrites(t *testing.T) {
	const n = 6000
	emitted := make(chan struct{})
	agent := chatstream.AgentFunc(func(ctx context.Context, _ chatstream.Turn, e chatstream.Emitter) error {
		for range n {
			if err := e.Content("x"); err != nil {
				return err
			}
		}
		close(emitted)
		<-ctx.Done()
		return nil
	})
	release := make(chan struct{})
	released := sync.OnceFunc(func() { close(release) })
	e := newEnv(t, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux}, envOpts{agent: agent,
		store: func(t testing.TB, backend string) store.Store {
			return &blockedAppends{Store: testdb.Open(t, backend), release: release}
		}})
	t.Cleanup(released) // before the env's cleanup, which ends the turn
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var (
		mu     sync.Mutex
		pieces int
	)
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return pieces
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range e.client.Stream(ctx, acct, agentID, chatstream.Request{Input: "go", ChatID: "unblocked", SessionSettings: ext("u")}) {
			if err == nil && isContent(m) {
				mu.Lock()
				pieces++
				mu.Unlock()
			}
		}
	}()
	defer func() { cancel(); <-done }()
	select {
	case <-emitted:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent's emitter waited for the store")
	}
	time.Sleep(time.Second) // a checkpoint tick, blocked
	if got := count(); got >= n {
		t.Fatalf("%d pieces reached the client before any checkpoint was stored", got)
	}
	released()
	deadline := time.Now().Add(10 * time.Second)
	for count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d pieces reached the client after the store came back", count(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// failingAppends fails every AppendMessages outside a transaction (the
// turns' checkpoints and final writes; the openings write in one) while
// failing is set.
type failingAppends struct {
	store.Store
	failing *atomic.Bool
}

func (s failingAppends) AppendMessages(ctx context.Context, accountID int64, chatID string, lastSort int64, msgs []store.ThreadMessage) error {
	if s.failing.Load() {
		return store.ErrUnavailable
	}
	return s.Store.AppendMessages(ctx, accountID, chatID, lastSort, msgs)
}

// TestFailedFinalWriteKeepsSortsBelowTheMark: a turn streams more lines
// than its reserved block of sorts while every checkpoint and then its
// final write fail. The stream still ends with __state__ (saying the
// answer could not be saved), no line it carries sorts above the thread's
// stored LastSort, and the next turn's lines sort above every line of the
// failed one, in the stream and in a client that reads them with
// resumeAfterSort.
func TestFailedFinalWriteKeepsSortsBelowTheMark(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		events := make([]chatstreamtest.Event, 0, 3000)
		for range 3000 {
			events = append(events, chatstreamtest.Content("x"))
		}
		failing := new(atomic.Bool)
		e := newEnv(t, tg, envOpts{
			agent: scripts{"many": {Events: events}},
			store: func(t testing.TB, backend string) store.Store {
				return failingAppends{testdb.Open(t, backend), failing}
			},
		})
		failing.Store(true)
		ss := ext("u")
		got, _ := collectErr(t.Context(), e.client, chatstream.Request{Input: "many", ChatID: "many", SessionSettings: ss})
		if len(got) == 0 || got[len(got)-1].ID != chatstream.StateID {
			t.Fatalf("the stream did not end with __state__: %d lines", len(got))
		}
		st := got[len(got)-1]
		if st.State.Error == "" {
			t.Errorf("__state__ has no error: %+v", st.State)
		}
		var seen int64
		for i, m := range got {
			if i > 0 && m.Sort <= got[i-1].Sort {
				t.Fatalf("line %d: sort %d after %d", i, m.Sort, got[i-1].Sort)
			}
			seen = max(seen, m.Sort)
		}
		for _, m := range st.State.Messages {
			seen = max(seen, m.Sort)
		}
		th, err := e.Store.Thread(t.Context(), e.Accounts[acct].ID, "many")
		if err != nil {
			t.Fatal(err)
		}
		if th.LastSort < seen {
			t.Errorf("stored LastSort %d, below the sort %d the client saw", th.LastSort, seen)
		}
		failing.Store(false)
		next := collect(t, e.client, chatstream.Request{Input: "echo:again", ChatID: "many", SessionSettings: ss})
		if len(next) < 2 || next[1].Sort <= seen {
			t.Fatalf("the next turn starts at sort %d, not above the %d seen", next[1].Sort, seen)
		}
	})
}

// TestFailedFinalWriteStillEndsWithFinalMessage: a turn that streamed
// past its block of sorts, with an open tool call, whose checkpoints and
// final write all fail, still ends with the tool call's end, the final
// message (its whole content, not in process) and __state__, within the
// stored mark; the Go client's conversation holds the final answer and no
// message in process.
func TestFailedFinalWriteStillEndsWithFinalMessage(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		// 3,000 pieces, then a tool call left open.
		agent := chatstream.AgentFunc(func(ctx context.Context, _ chatstream.Turn, e chatstream.Emitter) error {
			for range 3000 {
				if err := e.Content("x"); err != nil {
					return err
				}
			}
			_, err := e.ToolCall("svcSqlApi", map[string]any{"q": 1})
			return err
		})
		failing := new(atomic.Bool)
		e := newEnv(t, tg, envOpts{
			agent: agent,
			store: func(t testing.TB, backend string) store.Store {
				return failingAppends{testdb.Open(t, backend), failing}
			},
		})
		failing.Store(true)
		got, _ := collectErr(t.Context(), e.client, chatstream.Request{Input: "many", ChatID: "many", SessionSettings: ext("u")})
		n := len(got)
		if n < 3 || got[n-1].ID != chatstream.StateID || got[n-2].GraphPath[0] != "final" || got[n-3].ToolCall == nil || got[n-3].IsInProcess {
			t.Fatalf("the stream does not end with the tool end, the final message and __state__: %d lines", n)
		}
		c := conv(got)
		if fa, ok := c.FinalAnswer(); !ok || fa.IsInProcess || len(fa.Content) != 3000 {
			t.Errorf("final answer found %v: %d bytes, in process %v", ok, len(fa.Content), fa.IsInProcess)
		}
		for _, m := range c.History() {
			if m.IsInProcess {
				t.Errorf("message %s left in process with %d bytes", m.ID, len(m.Content))
			}
		}
		th, err := e.Store.Thread(t.Context(), e.Accounts[acct].ID, "many")
		if err != nil {
			t.Fatal(err)
		}
		if last := got[n-1].Sort; th.LastSort != last {
			t.Errorf("__state__ at sort %d, the stored LastSort %d", last, th.LastSort)
		}
		for i := 1; i < n; i++ {
			if got[i].Sort <= got[i-1].Sort {
				t.Fatalf("line %d: sort %d after %d", i, got[i].Sort, got[i-1].Sort)
			}
		}
	})
}
