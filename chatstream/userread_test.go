package chatstream

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
)

// readBoundedStore counts the UserData calls in flight, each slow.
type readBoundedStore struct{ boundedStore }

func (s *readBoundedStore) UserData(ctx context.Context, userID int64, sc store.Scope) (store.UserData, error) {
	defer s.enter()()
	return s.Store.UserData(ctx, userID, sc)
}

// TestUserReadsBounded starts 100 turns' reads of their user at once: at
// most maxUserReads run at once and every one succeeds; a turn that ends
// while it waits for a slot stops waiting with its context's cause.
func TestUserReadsBounded(t *testing.T) {
	base := testdb.Open(t, testdb.SQLite)
	acct := persistThreads(t, base, 0)
	u, err := base.UserByKey(t.Context(), store.UserKey{AccountID: acct.ID, ExternalID: "u"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	st := &readBoundedStore{boundedStore{Store: base}}
	h := &Handler{st: st, userReads: make(chan struct{}, maxUserReads)}
	read := h.userReader(u, store.TenantWide(acct.ID), nil)
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			if got, err := read(t.Context()); err != nil || got.ExternalID != "u" {
				t.Errorf("read = %+v, %v", got, err)
			}
		})
	}
	wg.Wait()
	if peak := st.peak.Load(); peak > maxUserReads || st.writes.Load() != 100 {
		t.Errorf("%d reads at once (want at most %d), %d reads in all (want 100)", peak, maxUserReads, st.writes.Load())
	}

	for range maxUserReads {
		h.userReads <- struct{}{} // every slot taken
	}
	cause := errors.New("turn aborted")
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(cause)
	if _, err := read(ctx); !errors.Is(err, cause) {
		t.Errorf("read with no slot and an ended turn = %v, want %v", err, cause)
	}
}
