package chatstream_test

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/chatstreamtest"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/telemetry"
	"github.com/embedkit/embedkit/store"
)

// TestTurnOfDeletedUserStops: a user deleted while its turn runs
// (deprovisioned, or expired and reaped) takes its threads with it; the
// turn's next checkpoint finds its thread gone and stops the turn, whose
// stream ends with state.error saying so, rather than running its agent
// and tools on for a user that no longer exists.
func TestTurnOfDeletedUserStops(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{agent: streamAnswer()})
		streamDeleting(t, e)
	})
}

// streamAnswer is 30 s of answer, a piece every 50 ms, unless stopped.
func streamAnswer() *chatstreamtest.ScriptedAgent {
	events := []chatstreamtest.Event{chatstreamtest.Content("first ")}
	for range 600 {
		events = append(events, chatstreamtest.Pause(50*time.Millisecond), chatstreamtest.Content("more "))
	}
	return &chatstreamtest.ScriptedAgent{Events: events}
}

// streamDeleting streams a turn of e's agent for the user "dora", deletes
// the user once the first content line came, and checks that the stream
// ends soon after with state.error saying the chat was deleted.
func streamDeleting(t *testing.T, e *env) {
	t.Helper()
	var (
		lastMsg chatstream.Message
		deleted time.Time
	)
	for m, err := range e.client.Stream(t.Context(), acct, agentID, chatstream.Request{Input: "go", ChatID: "doomed", SessionSettings: ext("dora")}) {
		if err != nil {
			t.Fatal(err)
		}
		lastMsg = m
		if isContent(m) && deleted.IsZero() {
			u, err := e.Store.UserByKey(t.Context(), store.UserKey{AccountID: e.Accounts[acct].ID, ExternalID: "dora"}, e.Now())
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Store.DeleteUser(t.Context(), u.ID); err != nil {
				t.Fatal(err)
			}
			deleted = time.Now()
		}
	}
	if took := time.Since(deleted); took > 10*time.Second {
		t.Errorf("the stream ended %v after its user was deleted", took)
	}
	if st := lastMsg.State; lastMsg.ID != chatstream.StateID || st == nil || st.Error != "the chat was deleted while the answer was produced" {
		t.Errorf("last line %+v, want __state__ with state.error saying the chat was deleted", lastMsg)
	}
}

// TestTelemetryOfDeletedUsersTurn: a turn stopped because its user was
// deleted ends its span with outcome deleted, not an error of the server.
func TestTelemetryOfDeletedUsersTurn(t *testing.T) {
	e, rec, _ := telemetryEnv(t, streamAnswer())
	streamDeleting(t, e)
	waitFor(t, func() bool { return len(rec.Ended("invoke_agent")) == 1 })
	turn := one(t, rec, "invoke_agent")
	if attrOf(turn, telemetry.AttrTurnOutcome) != telemetry.OutcomeDeleted || turn.Status().Code == codes.Error {
		t.Errorf("turn of a deleted user: %v %v", turn.Attributes(), turn.Status())
	}
}
