package chatstream_test

import (
	"context"
	"fmt"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/memstore"
)

// ExampleWithDefaultLimits sets the chat limits of accounts that have none
// of their own, gives one account its own, and starts the janitor.
func ExampleWithDefaultLimits() {
	ctx := context.Background()
	st := memstore.New()
	defer st.Close()

	// One account may run 20 turns at once; the others use the defaults.
	acct, err := st.SaveAccount(ctx, store.Account{Name: "acme", Plan: store.PlanEnterprise,
		Limits: store.Limits{RunningTurns: 20}})
	if err != nil {
		fmt.Println(err)
		return
	}

	h := chatstream.NewHandler(st, revenueAgent, chatstream.WithDefaultLimits(store.Limits{
		RunningTurns:        500, // per account, across replicas
		RunningTurnsPerUser: 2,
		ThreadTurns:         100,
	}))
	defer h.Close()

	// The janitor deletes expired users, session ids, tokens and quota
	// counters.
	reaper := chatstream.NewReaper(st, time.Minute)
	reaper.Start()
	defer reaper.Close()

	fmt.Println(acct.Limits.RunningTurns)
	// Output: 20
}
