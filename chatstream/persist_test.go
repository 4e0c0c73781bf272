package chatstream

import (
	"fmt"
	"sync"
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
			const n = 100 + maxPersistBatch
			for i := range n {
				if err := st.CreateThread(ctx, store.Thread{AccountID: acct.ID, ChatID: fmt.Sprint("c", i), AgentID: "a", UserID: u.ID, CreatedAt: time.Now(), UpdatedAt: time.Now()}); err != nil {
					t.Fatal(err)
				}
			}
			p := &persister{st: st}
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
