package chatstream_test

import (
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/chatstreamtest"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/store"
)

// TestTurnOfDeletedUserStops: a user deleted while its turn runs
// (deprovisioned, or expired and reaped) takes its threads with it; the
// turn's next checkpoint finds its thread gone and stops the turn, whose
// stream ends with state.error saying so, rather than running its agent
// and tools on for a user that no longer exists.
func TestTurnOfDeletedUserStops(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		events := []chatstreamtest.Event{chatstreamtest.Content("first ")}
		for range 600 { // 30 s of answer, unless stopped
			events = append(events, chatstreamtest.Pause(50*time.Millisecond), chatstreamtest.Content("more "))
		}
		e := newEnv(t, tg, envOpts{agent: &chatstreamtest.ScriptedAgent{Events: events}})
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
	})
}
