package pgcluster_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/pgcluster"
)

// Example shows the calls the chat handler makes: the replica that runs a
// turn claims the thread, publishes its lines and releases it; any replica
// joins or aborts it.
func Example() {
	ctx := context.Background()
	cl, err := pgcluster.New(ctx, os.Getenv("DATABASE_URL"),
		pgcluster.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()

	key := chatstream.ThreadKey{AccountID: 1, ChatID: "chat-1"}
	turn, err := cl.Claim(ctx, key, 42, chatstream.TurnLimits{Account: 200, User: 3})
	if e, ok := errors.AsType[*chatstream.TurnElsewhereError](err); ok {
		fmt.Println("running elsewhere for user", e.UserID) // 409, or 403 for another user
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	stop := turn.AfterAbort(func() { fmt.Println("aborted") }) // Abort on any replica
	defer stop()
	turn.Publish([]chatstream.Line{{Sort: 5, Data: []byte(`{"id":"m1","content":"Hel"}` + "\n")}})
	_ = turn.Release(ctx, []chatstream.Line{{Sort: 7, State: true, Data: []byte(`{"id":"__state__"}` + "\n")}})

	// On another replica: rejoin the running turn.
	if rt, ok, err := cl.Join(ctx, key); err == nil && ok {
		for pos := 0; ; {
			lines, done, err := rt.Next(ctx, pos)
			pos += len(lines)
			for _, l := range lines {
				os.Stdout.Write(l.Data)
			}
			if done || err != nil {
				break
			}
		}
	}
}
