package chatstream_test

import (
	"strings"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/chatstreamtest"
	"github.com/embedkit/embedkit/internal/apitest"
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
