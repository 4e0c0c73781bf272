package chatstream

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
)

// TestPersisterFinals stores the final messages of many turns
// concurrently (the store merges their transactions on SQLite) and checks
// that each is stored, including when one thread fails.
func TestPersisterFinals(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			st := testdb.Open(t, backend)
			ctx := t.Context()
			const n = 100 + maxPersistBatch
			acct := persistThreads(t, st, n)
			p := newPersister(st)
			var wg sync.WaitGroup
			errs := make([]error, n+1)
			for i := range n + 1 {
				wg.Go(func() {
					chat := fmt.Sprint("c", i) // c<n> does not exist
					errs[i] = p.final(threadWrite{accountID: acct.ID, chatID: chat, lastSort: 5, msgs: []Message{{ID: "m", Role: RoleAssistant, Content: chat, Sort: 5}}})
				})
			}
			wg.Wait()
			if errs[n] == nil {
				t.Errorf("the missing thread was stored")
			}
			for i := range n {
				if errs[i] != nil {
					t.Errorf("turn %d: %v", i, errs[i])
					continue
				}
				msgs, err := st.Messages(ctx, acct.ID, fmt.Sprint("c", i))
				if err != nil || len(msgs) != 1 {
					t.Errorf("thread %d: %d messages, %v", i, len(msgs), err)
				}
				th, err := st.Thread(ctx, acct.ID, fmt.Sprint("c", i))
				if err != nil || th.LastSort != 5 {
					t.Errorf("thread %d: LastSort %d, %v", i, th.LastSort, err)
				}
			}
		})
	}
}

// boundedStore counts the persister's writes in flight.
type boundedStore struct {
	store.Store
	cur, peak, writes atomic.Int64
}

func (s *boundedStore) enter() func() {
	n := s.cur.Add(1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	s.writes.Add(1)
	time.Sleep(time.Millisecond) // a slow database: finals pile up
	return func() { s.cur.Add(-1) }
}

func (s *boundedStore) InTx(ctx context.Context, fn func(store.Tx) error) error {
	defer s.enter()()
	return s.Store.InTx(ctx, fn)
}

func (s *boundedStore) AppendMessages(ctx context.Context, accountID int64, chatID string, lastSort int64, msgs []store.ThreadMessage) error {
	defer s.enter()()
	return s.Store.AppendMessages(ctx, accountID, chatID, lastSort, msgs)
}

// TestPersisterBoundsWrites ends 300 turns at once: at most
// maxPersistWrites writes are in flight, and every one is stored.
func TestPersisterBoundsWrites(t *testing.T) {
	base := testdb.Open(t, testdb.SQLite)
	ctx := t.Context()
	const n = 300
	acct := persistThreads(t, base, n)
	st := &boundedStore{Store: base}
	p := newPersister(st)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			chat := fmt.Sprint("c", i)
			if err := p.final(threadWrite{accountID: acct.ID, chatID: chat, msgs: []Message{{ID: "m", Role: RoleAssistant, Content: chat, Sort: 1}}}); err != nil {
				t.Errorf("turn %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if peak := st.peak.Load(); peak > maxPersistWrites {
		t.Errorf("%d writes in flight at once, want at most %d", peak, maxPersistWrites)
	}
	if st.writes.Load() < n {
		t.Errorf("%d writes for %d finals", st.writes.Load(), n)
	}
	for i := range n {
		if msgs, err := base.Messages(ctx, acct.ID, fmt.Sprint("c", i)); err != nil || len(msgs) != 1 {
			t.Errorf("thread %d: %d messages, %v", i, len(msgs), err)
		}
	}
}

// persistThreads creates an account with a user, an agent and n threads
// c0...c<n-1>.
func persistThreads(t *testing.T, st store.Store, n int) store.Account {
	t.Helper()
	ctx := t.Context()
	acct, err := st.SaveAccount(ctx, store.Account{Name: "p", Plan: store.PlanEnterprise})
	if err != nil {
		t.Fatal(err)
	}
	u, err := st.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: acct.ID, ExternalID: "u"}, Persistent: true, MaxUsers: 10, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SaveAgent(ctx, store.Agent{AccountID: acct.ID, ID: "a"}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := st.CreateThread(ctx, store.Thread{AccountID: acct.ID, ChatID: fmt.Sprint("c", i), AgentID: "a", UserID: u.ID, CreatedAt: time.Now(), UpdatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	return acct
}
