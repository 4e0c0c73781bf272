package chatstream

import (
	"context"
	"testing"
	"time"
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
			tr, err := r.reserve(ctx, key, 2, "bob", "7", 0, TurnLimits{}, false)
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
	tr, err := r.reserve(ctx, key, 2, "bob", "7", 0, TurnLimits{}, false)
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

// TestReserveWaitsForAnothersOpening: a user's thread may be reserved for
// an instant by another user's opening that the store is about to refuse
// (the reservation comes before the store says whose the thread is). The
// user's own input waits for that opening instead of being refused as
// another's chat: once it is refused the user reserves the thread; were it
// to start, the thread would be the other's, and the answer 403.
func TestReserveWaitsForAnothersOpening(t *testing.T) {
	ctx := context.Background()
	key := turnKey{1, "c"}
	reserveAfter := func(r *registry, other *turn, end func()) (*turn, error) {
		type result struct {
			t   *turn
			err error
		}
		got := make(chan result, 1)
		go func() {
			tr, err := r.reserve(ctx, key, 2, "jane", "7", 0, TurnLimits{}, true)
			got <- result{tr, err}
		}()
		select {
		case res := <-got:
			t.Fatalf("reserve did not wait for another's opening: %v, %v", res.t != nil, res.err)
		case <-time.After(50 * time.Millisecond):
		}
		end()
		res := <-got
		return res.t, res.err
	}
	for _, other := range []struct {
		name            string
		userID          int64
		externalID, agt string
	}{{"another user", 3, "mallory", "7"}, {"another agent", 2, "jane", "8"}} {
		t.Run(other.name+", refused", func(t *testing.T) {
			r := newRegistry(nil, nil, nil)
			o, err := r.reserve(ctx, key, other.userID, other.externalID, other.agt, 0, TurnLimits{}, false)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := reserveAfter(r, o, func() { r.drop(o) })
			if err != nil || tr == nil || tr.userID != 2 {
				t.Fatalf("reserve after the other's opening was refused = %v, %v; want the thread reserved", tr != nil, err)
			}
		})
	}
	t.Run("another user, started", func(t *testing.T) {
		r := newRegistry(nil, nil, nil)
		o, err := r.reserve(ctx, key, 3, "mallory", "7", 0, TurnLimits{}, false)
		if err != nil {
			t.Fatal(err)
		}
		_, err = reserveAfter(r, o, func() {
			r.mu.Lock()
			o.started = true
			if o.startedCh != nil {
				close(o.startedCh)
			}
			r.mu.Unlock()
		})
		if err != errNotOwner {
			t.Fatalf("reserve after another user's turn started = %v, want %v", err, errNotOwner)
		}
	})
	t.Run("the user's own opening is 409 at once", func(t *testing.T) {
		r := newRegistry(nil, nil, nil)
		if _, err := r.reserve(ctx, key, 2, "jane", "7", 0, TurnLimits{}, false); err != nil {
			t.Fatal(err)
		}
		if _, err := r.reserve(ctx, key, 2, "jane", "7", 0, TurnLimits{}, true); err != errTurnRunning {
			t.Fatalf("second reserve = %v, want %v", err, errTurnRunning)
		}
	})
	t.Run("bounded by the context", func(t *testing.T) {
		r := newRegistry(nil, nil, nil)
		if _, err := r.reserve(ctx, key, 3, "mallory", "7", 0, TurnLimits{}, false); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if _, err := r.reserve(cctx, key, 2, "jane", "7", 0, TurnLimits{}, true); err != context.DeadlineExceeded {
			t.Fatalf("reserve while another's opening holds the thread past the deadline = %v", err)
		}
	})
}
