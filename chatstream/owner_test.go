package chatstream_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
)

// userReads counts the user lookups the handler makes outside transactions.
type userReads struct {
	store.Store
	n atomic.Int64
}

func (s *userReads) UserByExternalID(ctx context.Context, accountID int64, externalID string, now time.Time) (store.User, error) {
	s.n.Add(1)
	return s.Store.UserByExternalID(ctx, accountID, externalID, now)
}

func (s *userReads) InternalUser(ctx context.Context, accountID int64, username string) (store.User, error) {
	s.n.Add(1)
	return s.Store.InternalUser(ctx, accountID, username)
}

// TestReturningUserIsNotLookedUp checks that a returning user's turn takes
// the user's id from the handler's hint instead of reading it, and that a
// stale hint (the user deleted since) still gives a turn, for the user the
// request provisions anew.
func TestReturningUserIsNotLookedUp(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		reads := &userReads{}
		e := newEnv(t, tg, envOpts{store: func(t testing.TB, backend string) store.Store {
			reads.Store = testdb.Open(t, backend)
			return reads
		}})
		ctx := t.Context()
		acctID := e.Accounts[acct].ID
		turn := func(s *chatstream.SessionSettings) *chatstream.Conversation {
			t.Helper()
			return conv(collect(t, e.client, chatstream.Request{Input: "echo:hi", SessionSettings: s}))
		}
		for _, s := range []*chatstream.SessionSettings{ext("hinted"), {InternalID: apitest.InternalUser}} {
			before := reads.n.Load()
			turn(s)
			turn(s)
			if n := reads.n.Load() - before; n != 1 {
				t.Errorf("%+v: two turns looked the user up %d times, want 1", *s, n)
			}
		}

		old, err := reads.Store.UserByExternalID(ctx, acctID, "hinted", e.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := reads.Store.DeleteUser(ctx, old.ID); err != nil {
			t.Fatal(err)
		}
		c := turn(ext("hinted"))
		nu, err := reads.Store.UserByExternalID(ctx, acctID, "hinted", e.Now())
		if err != nil {
			t.Fatalf("the user of a turn after its deletion: %v", err)
		}
		if nu.ID == old.ID {
			t.Fatalf("deleted user %d came back", old.ID)
		}
		th, err := reads.Store.Thread(ctx, acctID, c.ChatID())
		if err != nil || th.UserID != nu.ID {
			t.Errorf("thread of the turn after the deletion = %+v, %v; want user %d", th, err, nu.ID)
		}
		before := reads.n.Load()
		turn(ext("hinted"))
		if n := reads.n.Load() - before; n != 0 {
			t.Errorf("the next turn looked the user up %d times, want 0", n)
		}
	})
}
