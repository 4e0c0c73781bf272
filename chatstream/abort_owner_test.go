package chatstream

import (
	"context"
	"testing"
)

// TestAbortMarksOnlyTheCallersTurn: an abort's checks come before it
// reaches the registry, and in between the caller's opening may be refused
// and another user's reserve the same new chat id; the registry aborts a
// turn only when it is the caller's (its user, or the external id of a new
// user its opening creates, and its agent).
func TestAbortMarksOnlyTheCallersTurn(t *testing.T) {
	ctx := context.Background()
	key := turnKey{1, "new-chat"}
	for _, tc := range []struct {
		name  string
		owner turnOwner
		want  bool
	}{
		{"the same user", turnOwner{userID: 2, agentID: "7"}, true},
		{"the new user's external id", turnOwner{externalID: "bob", agentID: "7"}, true},
		{"another user", turnOwner{userID: 3, agentID: "7"}, false},
		{"another external id", turnOwner{externalID: "alice", agentID: "7"}, false},
		{"another agent", turnOwner{userID: 2, agentID: "8"}, false},
		{"no one", turnOwner{agentID: "7"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRegistry(nil, nil, nil)
			tr, err := r.reserve(ctx, key, 2, "bob", "7", 0, TurnLimits{})
			if err != nil {
				t.Fatal(err)
			}
			got, started, held := r.abort(key, tc.owner)
			if (got != nil) != tc.want || started || !held {
				t.Errorf("abort: turn %v, started %v, held %v; want turn %v, not started, held", got != nil, started, held, tc.want)
			}
			if tr.abortAtStart != tc.want {
				t.Errorf("marked to abort at its start: %v, want %v", tr.abortAtStart, tc.want)
			}
			if r.opening(key, tc.owner) != tc.want {
				t.Errorf("opening for the caller: %v, want %v", !tc.want, tc.want)
			}
		})
	}
	r := newRegistry(nil, nil, nil)
	if got, _, held := r.abort(key, turnOwner{userID: 2, agentID: "7"}); got != nil || held {
		t.Errorf("abort of a chat no turn holds: turn %v, held %v", got != nil, held)
	}
}
