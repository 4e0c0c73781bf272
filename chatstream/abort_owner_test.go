package chatstream

import (
	"context"
	"testing"
)

// TestAbortMarksOnlyTheCallersTurn: an abort's checks come before it
// reaches the registry, and in between the caller's opening may be refused
// and another user's reserve the same new chat id; the registry aborts a
// turn only when it is the caller's (its user, or the external id the
// request names, which is all a new user's opening is known by, and its
// agent).
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
		{"the external id, under the id of a user committed meanwhile", turnOwner{userID: 5, externalID: "bob", agentID: "7"}, true},
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
			got, started, mine := r.abort(key, tc.owner)
			if got != tr || started || mine != tc.want {
				t.Errorf("abort: the turn %v, started %v, the caller's %v; want the turn, not started, the caller's %v", got == tr, started, mine, tc.want)
			}
			if tr.abortAtStart != tc.want {
				t.Errorf("marked to abort at its start: %v, want %v", tr.abortAtStart, tc.want)
			}
			if got := r.opening(key, tc.owner); got != tc.want {
				t.Errorf("opening for the caller: %v, want %v", got, tc.want)
			}
		})
	}
	r := newRegistry(nil, nil, nil)
	if got, _, mine := r.abort(key, turnOwner{userID: 2, agentID: "7"}); got != nil || mine {
		t.Errorf("abort of a chat no turn holds: turn %v, the caller's %v", got != nil, mine)
	}
	// A new user's opening that runs again under the id of the user
	// committed meanwhile is the caller's by that id once it rebinds.
	tr, err := r.reserve(ctx, key, 2, "bob", "7", 0, TurnLimits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.rebind(ctx, tr, 5, TurnLimits{}); err != nil {
		t.Fatal(err)
	}
	if _, _, mine := r.abort(key, turnOwner{userID: 5, agentID: "7"}); !mine {
		t.Error("abort by the rebound user's id: not the caller's turn")
	}
}

// TestReserveAgainstAnothersOpening: a thread held by another user's (or
// agent's) opening that has not started is errOthersOpening (or
// errOthersOpeningAgent), for open to ask the store whose the thread is;
// once that turn started, it is another's as before.
func TestReserveAgainstAnothersOpening(t *testing.T) {
	ctx := context.Background()
	key := turnKey{1, "c"}
	for _, tc := range []struct {
		name             string
		userID           int64
		agent            string
		opening, started error
	}{
		{"another user", 3, "7", errOthersOpening, errNotOwner},
		{"another agent", 2, "8", errOthersOpeningAgent, errChatGone},
		{"the user's own", 2, "7", errOwnOpening, errTurnRunning},
	} {
		r := newRegistry(nil, nil, nil)
		o, err := r.reserve(ctx, key, tc.userID, "x", tc.agent, 0, TurnLimits{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.reserve(ctx, key, 2, "jane", "7", 0, TurnLimits{}); err != tc.opening {
			t.Errorf("%s, opening: reserve = %v, want %v", tc.name, err, tc.opening)
		}
		r.mu.Lock()
		o.started = true
		r.mu.Unlock()
		if _, err := r.reserve(ctx, key, 2, "jane", "7", 0, TurnLimits{}); err != tc.started {
			t.Errorf("%s, started: reserve = %v, want %v", tc.name, err, tc.started)
		}
	}
}
