package chatstream_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/operator"
)

// withLimits sets the test account's own limits.
func withLimits(l store.Limits) func(*operator.Config) {
	return func(c *operator.Config) { c.Accounts[0].Limits = l }
}

// startTurn starts a "slow" turn (it pauses after its first pieces) of
// user in chatID and returns once it streams: the turn keeps running.
func startTurn(t *testing.T, e *env, user, chatID string) {
	t.Helper()
	got, _ := streamUntil(t, t.Context(), e.client, chatstream.Request{Input: "slow", ChatID: chatID, SessionSettings: ext(user)}, isPiece("partial "))
	if !slices.ContainsFunc(got, isPiece("partial ")) {
		t.Fatalf("turn of %s in %s did not start: %+v", user, chatID, got)
	}
}

// send posts input for user in chatID and returns the whole answer.
func send(t *testing.T, e *env, user, chatID, input string) apitest.Response {
	t.Helper()
	return e.Send(t, e.Request(t, http.MethodPost, streamPath(acct, agentID), apitest.AdminKey,
		map[string]any{"input": input, "chatId": chatID, "sessionSettings": map[string]any{"externalId": user}}))
}

// wantRefused checks a refusal: the status, the JSON error, and for 429 a
// Retry-After of at least one second.
func wantRefused(t *testing.T, what string, r apitest.Response, status int, msg string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status %d %s, want %d", what, r.Status, r.Raw, status)
	}
	if got, _ := r.Body["error"].(string); msg != "" && got != msg {
		t.Errorf("%s: error %q, want %q", what, got, msg)
	} else if got == "" {
		t.Errorf("%s: body %s has no error", what, r.Raw)
	}
	if status == http.StatusTooManyRequests {
		if n, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || n < 1 {
			t.Errorf("%s: Retry-After %q, want whole seconds ≥ 1", what, r.Header.Get("Retry-After"))
		}
	}
}

// wantNoUser checks that a refused request created no user.
func wantNoUser(t *testing.T, e *env, externalID string) {
	t.Helper()
	_, err := e.Store.UserByKey(t.Context(), store.UserKey{AccountID: e.Accounts[acct].ID, ExternalID: externalID}, e.Now())
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("user %s after a refused request: err = %v, want ErrNotFound", externalID, err)
	}
}

// wantNoChat checks that a refused request created no thread.
func wantNoChat(t *testing.T, e *env, chatID string) {
	t.Helper()
	if _, err := e.Store.Thread(t.Context(), e.Accounts[acct].ID, chatID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("thread %s after a refused request: err = %v, want ErrNotFound", chatID, err)
	}
}

func TestRunningTurnLimits(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{cfg: withLimits(store.Limits{RunningTurns: 3, RunningTurnsPerUser: 2})})
		startTurn(t, e, "u1", "c1")
		startTurn(t, e, "u1", "c2") // the user's last allowed turn
		r := send(t, e, "u1", "c3", "echo:x")
		wantRefused(t, "the user's third turn", r, http.StatusTooManyRequests, "running turn limit of 2 per user reached: wait for a turn to end")
		wantNoChat(t, e, "c3")
		startTurn(t, e, "u2", "c4") // the account's last allowed turn
		r = send(t, e, "u3", "c5", "echo:x")
		wantRefused(t, "the account's fourth turn", r, http.StatusTooManyRequests, "running turn limit of 3 reached for this account: try again later")
		wantNoChat(t, e, "c5")
		wantNoUser(t, e, "u3")
		// A new user's first turn is reserved in the transaction that
		// creates the user; refused, the user is rolled back.
		r = e.Send(t, e.Request(t, http.MethodPost, streamPath(acct, agentID), apitest.AdminKey,
			map[string]any{"input": "echo:x", "sessionSettings": map[string]any{"externalId": "u4"}}))
		wantRefused(t, "a new user's first turn over the account's limit", r, http.StatusTooManyRequests, "running turn limit of 3 reached for this account: try again later")
		wantNoUser(t, e, "u4")

		// An aborted turn frees its place when its agent has returned,
		// which the abort does not wait for (a refused request changes
		// nothing, so it may be sent again).
		if st := e.Send(t, e.Request(t, http.MethodPost, abortPath(acct, agentID), apitest.AdminKey,
			map[string]any{"chatId": "c1", "sessionSettings": map[string]any{"externalId": "u1"}})); st.Status != http.StatusNoContent {
			t.Fatalf("abort: %d %s", st.Status, st.Raw)
		}
		waitFor(t, func() bool {
			r := send(t, e, "u1", "c3", "echo:x")
			if r.Status != http.StatusOK && r.Status != http.StatusTooManyRequests {
				t.Fatalf("after an abort: %d %s, want 200", r.Status, r.Raw)
			}
			return r.Status == http.StatusOK
		})
	})
}

// TestRunningTurnLimitConcurrent starts 64 turns of 64 new users at once
// with an account limit of 5: exactly 5 run. Half of them name their chat
// (the user is created, then the turn reserved), half start a new one (the
// turn is stored, then reserved); the refused users are gone.
func TestRunningTurnLimitConcurrent(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{cfg: withLimits(store.Limits{RunningTurns: 5})})
		refused := runConcurrent(t, 64, 5, func(ctx context.Context, i int) error {
			return firstLine(ctx, e.client, chatstream.Request{Input: "slow", ChatID: mixedChatID(i), SessionSettings: ext(fmt.Sprintf("cu-%d", i))})
		})
		for _, i := range refused {
			wantNoUser(t, e, fmt.Sprintf("cu-%d", i))
		}
	})
}

// mixedChatID is the chat id of request i of a concurrent test: a new
// chat for even i, a named one for odd i.
func mixedChatID(i int) string {
	if i%2 == 0 {
		return ""
	}
	return fmt.Sprintf("cc-%d", i)
}

// TestFirstTurnsOfOneNewUser starts 32 first turns of one new user in new
// chats at once, with a per-user limit of 2: exactly 2 run, and the user
// and their threads survive the 30 refused ones, rolled back.
func TestFirstTurnsOfOneNewUser(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{cfg: withLimits(store.Limits{RunningTurnsPerUser: 2})})
		var (
			mu    sync.Mutex
			chats []string
		)
		runConcurrent(t, 32, 2, func(ctx context.Context, i int) error {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			for m, err := range e.client.Stream(ctx, acct, agentID, chatstream.Request{Input: "slow", SessionSettings: ext("newcomer")}) {
				if err == nil {
					mu.Lock()
					chats = append(chats, m.State.ChatID)
					mu.Unlock()
				}
				return err
			}
			return errors.New("empty stream")
		})
		u, err := e.Store.UserByKey(t.Context(), store.UserKey{AccountID: e.Accounts[acct].ID, ExternalID: "newcomer"}, e.Now())
		if err != nil {
			t.Fatalf("the user of the running turns: %v", err)
		}
		for _, id := range chats {
			th, err := e.Store.Thread(t.Context(), e.Accounts[acct].ID, id)
			if err != nil || th.UserID != u.ID {
				t.Errorf("thread %s of a running turn: %+v, %v", id, th, err)
			}
		}
	})
}

// TestRunningTurnsPerUserConcurrent starts 64 turns of one user at once
// with a per-user limit of 3: exactly 3 run.
func TestRunningTurnsPerUserConcurrent(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{cfg: withLimits(store.Limits{RunningTurnsPerUser: 3})})
		send(t, e, "one", "warm", "echo:x") // the user exists: no upsert races
		runConcurrent(t, 64, 3, func(ctx context.Context, i int) error {
			return firstLine(ctx, e.client, chatstream.Request{Input: "slow", ChatID: fmt.Sprintf("pu-%d", i), SessionSettings: ext("one")})
		})
	})
}

// firstLine starts a stream and returns once its first line arrived (nil),
// or with the request's error; the turn runs on.
func firstLine(ctx context.Context, c *chatstream.Client, req chatstream.Request) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, err := range c.Stream(ctx, acct, agentID, req) {
		return err
	}
	return errors.New("empty stream")
}

// runConcurrent runs n calls of fn at once and checks that exactly want
// succeed and the others get 429; it returns the i of those refused.
func runConcurrent(t *testing.T, n, want int, fn func(ctx context.Context, i int) error) (refusedCalls []int) {
	t.Helper()
	var ok, refused atomic.Int64
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			err := fn(t.Context(), i)
			switch {
			case err == nil:
				ok.Add(1)
			case apiStatus(err) == http.StatusTooManyRequests:
				refused.Add(1)
				mu.Lock()
				refusedCalls = append(refusedCalls, i)
				mu.Unlock()
			default:
				t.Errorf("request %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if ok.Load() != int64(want) || refused.Load() != int64(n-want) {
		t.Errorf("%d succeeded and %d got 429, want %d and %d", ok.Load(), refused.Load(), want, n-want)
	}
	return refusedCalls
}

func TestNewEphemeralUserLimit(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{cfg: withLimits(store.Limits{NewEphemeralUsersPerMinute: 3})})
		// The window is the clock minute: start at its beginning.
		e.Advance(e.Now().Truncate(time.Minute).Add(time.Minute).Sub(e.Now()))
		for i := range 3 {
			if r := send(t, e, fmt.Sprintf("e%d", i), fmt.Sprintf("ec%d", i), "echo:x"); r.Status != http.StatusOK {
				t.Fatalf("new user %d: %d %s", i, r.Status, r.Raw)
			}
		}
		e.Advance(59 * time.Second)
		r := send(t, e, "e3", "ec3", "echo:x")
		wantRefused(t, "the fourth new user of the minute", r, http.StatusTooManyRequests,
			"new ephemeral user limit of 3 per minute reached for this account: try again later")
		if got := r.Header.Get("Retry-After"); got != "1" {
			t.Errorf("Retry-After %q one second before the window ends, want 1", got)
		}
		wantNoUser(t, e, "e3")
		wantNoChat(t, e, "ec3")
		// Known users, and persistent ones, are not counted.
		if r := send(t, e, "e0", "ec0", "echo:y"); r.Status != http.StatusOK {
			t.Fatalf("a known user: %d %s", r.Status, r.Raw)
		}
		if r := e.Send(t, e.Request(t, http.MethodPost, streamPath(acct, agentID), apitest.AdminKey,
			map[string]any{"input": "echo:x", "sessionSettings": map[string]any{"externalId": "p1", "isEphemeral": false}})); r.Status != http.StatusOK {
			t.Fatalf("a new persistent user: %d %s", r.Status, r.Raw)
		}
		e.Advance(time.Second) // the next minute
		if r := send(t, e, "e3", "ec3", "echo:x"); r.Status != http.StatusOK {
			t.Fatalf("in the next minute: %d %s", r.Status, r.Raw)
		}
	})
}

func TestNewEphemeralUserLimitConcurrent(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{cfg: withLimits(store.Limits{NewEphemeralUsersPerMinute: 10})})
		e.Advance(e.Now().Truncate(time.Minute).Add(time.Minute).Sub(e.Now()))
		runConcurrent(t, 64, 10, func(ctx context.Context, i int) error {
			_, err := collectErr(ctx, e.client, chatstream.Request{Input: "echo:x", SessionSettings: ext(fmt.Sprintf("n-%d", i))})
			return err
		})
	})
}

func TestThreadLimits(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{cfg: withLimits(store.Limits{ThreadTurns: 2})})
		for i := range 2 {
			if r := send(t, e, "u", "full", "echo:x"); r.Status != http.StatusOK {
				t.Fatalf("turn %d: %d %s", i+1, r.Status, r.Raw)
			}
		}
		before, err := e.Store.Messages(t.Context(), e.Accounts[acct].ID, "full")
		if err != nil {
			t.Fatal(err)
		}
		r := send(t, e, "u", "full", "echo:x")
		wantRefused(t, "the third turn", r, http.StatusConflict, "thread is full: start a new chat")
		after, err := e.Store.Messages(t.Context(), e.Accounts[acct].ID, "full")
		if err != nil {
			t.Fatal(err)
		}
		if len(after) != len(before) {
			t.Errorf("history has %d messages after the refusal, %d before", len(after), len(before))
		}
		if r := send(t, e, "u", "new", "echo:x"); r.Status != http.StatusOK {
			t.Fatalf("a new chat: %d %s", r.Status, r.Raw)
		}

		// threadBytes: the stored size of the thread's messages.
		a := e.Accounts[acct]
		setBytes := func(n int64) {
			a.Limits = store.Limits{ThreadBytes: n}
			if _, err := e.Store.SaveAccount(t.Context(), a); err != nil {
				t.Fatal(err)
			}
		}
		size := func() int64 {
			msgs, err := e.Store.Messages(t.Context(), a.ID, "big")
			if err != nil {
				t.Fatal(err)
			}
			var n int64
			for _, m := range msgs {
				n += int64(len(m.Body))
			}
			return n
		}
		if r := send(t, e, "u", "big", "echo:x"); r.Status != http.StatusOK {
			t.Fatalf("first turn: %d %s", r.Status, r.Raw)
		}
		setBytes(size() + 4096) // room for the input: allowed
		if r := send(t, e, "u", "big", "echo:x"); r.Status != http.StatusOK {
			t.Fatalf("below threadBytes: %d %s", r.Status, r.Raw)
		}
		n := size()
		setBytes(n + 100) // room, but not for this input
		r = send(t, e, "u", "big", "echo:"+strings.Repeat("y", 200))
		wantRefused(t, "an input that does not fit", r, http.StatusConflict, "thread is full: start a new chat")
		if size() != n {
			t.Errorf("the refused turn changed the thread")
		}
		setBytes(n) // at the limit
		r = send(t, e, "u", "big", "echo:x")
		wantRefused(t, "at threadBytes", r, http.StatusConflict, "thread is full: start a new chat")
		if size() != n {
			t.Errorf("the refused turn changed the thread")
		}
	})
}

// TestLimitsAcrossReplicas: two replicas on one PostgreSQL database share
// the running-turn count and the new-ephemeral-user window.
func TestLimitsAcrossReplicas(t *testing.T) {
	t.Run("running turns", func(t *testing.T) {
		p := newPair(t, pairOpts{handler: []chatstream.Option{chatstream.WithDefaultLimits(store.Limits{RunningTurns: 2})}})
		startTurn(t, p.a, "u1", "c1")
		startTurn(t, p.b, "u2", "c2")
		for _, e := range []*env{p.a, p.b} {
			r := send(t, e, "u3", "c3", "echo:x")
			wantRefused(t, "a third turn", r, http.StatusTooManyRequests, "running turn limit of 2 reached for this account: try again later")
			wantNoChat(t, e, "c3")
		}
	})
	t.Run("running turns at once", func(t *testing.T) {
		p := newPair(t, pairOpts{handler: []chatstream.Option{chatstream.WithDefaultLimits(store.Limits{RunningTurns: 5})}})
		runConcurrent(t, 64, 5, func(ctx context.Context, i int) error {
			e := p.a
			if i%2 == 1 {
				e = p.b
			}
			return firstLine(ctx, e.client, chatstream.Request{Input: "slow", ChatID: mixedChatID(i), SessionSettings: ext(fmt.Sprintf("cu-%d", i))})
		})
	})
	t.Run("new ephemeral users", func(t *testing.T) {
		p := newPair(t, pairOpts{handler: []chatstream.Option{chatstream.WithDefaultLimits(store.Limits{NewEphemeralUsersPerMinute: 3})}})
		next := p.a.Now().Truncate(time.Minute).Add(time.Minute)
		p.a.Advance(next.Sub(p.a.Now()))
		p.b.Advance(next.Sub(p.b.Now()))
		for i, e := range []*env{p.a, p.b, p.a} {
			if r := send(t, e, fmt.Sprintf("e%d", i), fmt.Sprintf("ec%d", i), "echo:x"); r.Status != http.StatusOK {
				t.Fatalf("new user %d: %d %s", i, r.Status, r.Raw)
			}
		}
		r := send(t, p.b, "e3", "ec3", "echo:x")
		wantRefused(t, "the fourth new user, on the other replica", r, http.StatusTooManyRequests, "")
		wantNoUser(t, p.b, "e3")
	})
}

// TestThreadBytesCapsTheTurn: an input that does not fit in threadBytes is
// refused, and a turn whose answer would take the thread past threadBytes
// is cut like a too-long answer, so that the thread stays near its limit.
func TestThreadBytesCapsTheTurn(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{cfg: withLimits(store.Limits{ThreadBytes: 4096})})
		r := send(t, e, "u", "long", "echo:"+strings.Repeat("x", 8000))
		wantRefused(t, "an input larger than threadBytes", r, http.StatusConflict, "thread is full: start a new chat")
		wantNoChat(t, e, "long")
		long := "echo:" + strings.Repeat("x", 3000)
		msgs := collect(t, e.client, chatstream.Request{Input: long, ChatID: "long", SessionSettings: ext("u")})
		if st := last(msgs).State; st == nil || st.Error == "" {
			t.Fatalf("a turn past threadBytes ends with %+v, want state.error", st)
		}
		stored, err := e.Store.Messages(t.Context(), e.Accounts[acct].ID, "long")
		if err != nil {
			t.Fatal(err)
		}
		var n int
		for _, m := range stored {
			n += len(m.Body)
		}
		if n > 4096+512 {
			t.Errorf("the thread stores %d bytes", n)
		}
		r = send(t, e, "u", "long", "echo:"+strings.Repeat("y", 1000))
		wantRefused(t, "a next input that does not fit", r, http.StatusConflict, "thread is full: start a new chat")
	})
}

// TestRefusedTurnGivesBackEphemeralPlace: a new ephemeral user whose turn is
// refused (the account's running turns) is deleted and its place in the
// minute's count of new ephemeral users given back, so that the refused
// request changes nothing: the next ephemeral user of the minute is
// admitted.
func TestRefusedTurnGivesBackEphemeralPlace(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{cfg: withLimits(store.Limits{NewEphemeralUsersPerMinute: 1, RunningTurns: 1})})
		e.Advance(e.Now().Truncate(time.Minute).Add(time.Minute).Sub(e.Now())) // the minute's start
		// A persistent user's turn, held, fills the running turns.
		if r := e.Send(t, e.Request(t, http.MethodPost, streamPath(acct, agentID), apitest.AdminKey,
			map[string]any{"input": "echo:x", "sessionSettings": map[string]any{"externalId": "p", "isEphemeral": false}})); r.Status != http.StatusOK {
			t.Fatalf("persistent user: %d %s", r.Status, r.Raw)
		}
		startTurn(t, e, "p", "held")
		r := send(t, e, "e1", "c1", "echo:x")
		wantRefused(t, "over the running turns", r, http.StatusTooManyRequests, "running turn limit of 1 reached for this account: try again later")
		wantNoUser(t, e, "e1")
		if st := e.Send(t, e.Request(t, http.MethodPost, abortPath(acct, agentID), apitest.AdminKey,
			map[string]any{"chatId": "held", "sessionSettings": map[string]any{"externalId": "p"}})); st.Status != http.StatusNoContent {
			t.Fatalf("abort: %d %s", st.Status, st.Raw)
		}
		// The running turn's place comes back once its agent has returned;
		// the persistent user waits for it, creating no ephemeral user.
		waitFor(t, func() bool { return send(t, e, "p", "probe", "echo:x").Status == http.StatusOK })
		if r := send(t, e, "e2", "c2", "echo:x"); r.Status != http.StatusOK {
			t.Errorf("the minute's first ephemeral user with a turn: %d %s (the refused one kept its place)", r.Status, r.Raw)
		}
	})
}
