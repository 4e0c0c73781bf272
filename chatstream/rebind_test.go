package chatstream

import (
	"context"
	"testing"
)

// TestRebindKeepsUserLimit: a reservation given to another user id (a
// retried opening that found the user created meanwhile) is refused, as
// reserve is, when that user holds its running turns already.
func TestRebindKeepsUserLimit(t *testing.T) {
	r := newRegistry(nil, nil, nil)
	ctx := context.Background()
	lim := TurnLimits{User: 1}
	// user 2 holds its one allowed turn
	if _, err := r.reserve(ctx, turnKey{1, "b"}, 2, "x", "7", 0, lim); err != nil {
		t.Fatal(err)
	}
	if _, err := r.reserve(ctx, turnKey{1, "c"}, 2, "x", "7", 0, lim); err == nil {
		t.Fatal("reserve: second turn of user 2 accepted")
	}
	t1, err := r.reserve(ctx, turnKey{1, "a"}, 1, "x", "7", 0, lim)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.rebind(ctx, t1, 2, lim); err == nil {
		t.Errorf("rebind to user 2 accepted: user 2 now has %d turns under a limit of 1", r.perUser[2])
	}
}
