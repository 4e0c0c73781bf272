package chatstream

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
)

// TestPersisterGroupCommit stores many turns concurrently and checks that
// each is stored exactly once, including when one of a batch fails.
func TestPersisterGroupCommit(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			st := testdb.Open(t, backend)
			ctx := t.Context()
			acct, err := st.SaveAccount(ctx, store.Account{Name: "p", Plan: store.PlanEnterprise})
			if err != nil {
				t.Fatal(err)
			}
			u, err := st.UpsertExternalUser(ctx, store.ExternalUserUpsert{AccountID: acct.ID, ExternalID: "u", Persistent: true, MaxUsers: 10, Now: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.SaveAgent(ctx, store.Agent{AccountID: acct.ID, ID: "a"}); err != nil {
				t.Fatal(err)
			}
			const n = 100
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
					chat := fmt.Sprint("c", i) // c100 does not exist
					body, _ := json.Marshal(Message{ID: "m", Role: RoleAssistant, Content: chat, Sort: 5})
					errs[i] = p.persist(context.WithoutCancel(ctx), acct.ID, chat, 5, []store.ThreadMessage{{ID: "m", Sort: 5, Body: body}})
				})
			}
			wg.Wait()
			t.Logf("missing thread: %v", errs[n])
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
			if p.busy || len(p.queue) != 0 {
				t.Errorf("persister left busy=%v queue=%d", p.busy, len(p.queue))
			}
		})
	}
}
