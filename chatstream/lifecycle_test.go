package chatstream_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/chatstreamtest"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/middleware/httperr"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/operator"
)

// goroutines counts the goroutines, leaving out pgx's background reader:
// pgx starts one on a connection whose write takes more than 15 ms (a
// loaded machine), and it may stay blocked reading the idle pooled
// connection until that connection is used again or closed. At most one
// per connection of a pool, owned by the pool: not a leak.
func goroutines() (int, []byte) {
	buf := stacks()
	count := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if len(g) > 0 && !bytes.Contains(g, []byte("bgreader.(*BGReader).bgRead")) {
			count++
		}
	}
	return count, buf
}

// waitGoroutines waits until the number of goroutines (see goroutines) is
// at most want.
func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, stacks := goroutines()
		if n <= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, want at most %d:\n%s", n, want, stacks)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{})
		ctx := t.Context()
		idle := func() {
			e.Client().CloseIdleConnections()
			if tr, ok := e.Client().Transport.(*http.Transport); ok {
				tr.CloseIdleConnections()
			}
		}
		// Warm up the pools, then take the baseline.
		collect(t, e.client, chatstream.Request{Input: "q", SessionSettings: ext("leak")})
		idle()
		time.Sleep(50 * time.Millisecond)
		base, _ := goroutines()

		// Completed turns.
		for range 5 {
			collect(t, e.client, chatstream.Request{Input: "q", SessionSettings: ext("leak")})
		}
		// Aborted turns.
		for i := range 3 {
			id := fmt.Sprintf("leak-abort-%d", i)
			_, wait := streamUntil(t, ctx, e.client, chatstream.Request{Input: "slow", ChatID: id, SessionSettings: ext("leak")}, isContent)
			if err := e.client.Abort(ctx, acct, agentID, id, chatstream.SessionSettings{ExternalID: "leak"}); err != nil {
				t.Fatal(err)
			}
			wait()
		}
		// A disconnected client whose turn runs on.
		dctx, cancel := context.WithCancel(ctx)
		_, wait := streamUntil(t, dctx, e.client, chatstream.Request{Input: "wait", ChatID: "leak-disc", SessionSettings: ext("leak")}, isContent)
		cancel()
		wait()
		// A rejoiner, then a running turn stopped by Shutdown.
		collect(t, e.client, chatstream.Request{ChatID: "leak-disc", SessionSettings: ext("leak")})
		_, wait = streamUntil(t, ctx, e.client, chatstream.Request{Input: "slow", ChatID: "leak-shutdown", SessionSettings: ext("leak")}, isContent)
		sctx, scancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer scancel()
		if err := e.h.Shutdown(sctx); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		msgs, _, _ := wait()
		if st := last(msgs).State; st == nil || !st.Aborted || st.Error == "" {
			t.Errorf("state after shutdown = %+v, want aborted with error", st)
		}
		// New turns are refused once shut down.
		if _, err := collectErr(ctx, e.client, chatstream.Request{Input: "q", SessionSettings: ext("leak")}); apiStatus(err) != http.StatusServiceUnavailable {
			t.Errorf("turn after Shutdown: %v, want 503", err)
		}
		if _, err := collectErr(ctx, e.client, chatstream.Request{Input: "q", SessionSettings: ext("leak-new")}); apiStatus(err) != http.StatusServiceUnavailable {
			t.Errorf("a new user's first turn after Shutdown: %v, want 503", err)
		}
		if _, err := e.Store.UserByKey(ctx, store.UserKey{AccountID: e.Accounts[acct].ID, ExternalID: "leak-new"}, e.Now()); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the new user of a refused turn: err = %v, want ErrNotFound", err)
		}
		idle()
		waitGoroutines(t, base)
	})
}

func TestShutdownLetsTurnsFinish(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{})
		ctx := t.Context()
		_, wait := streamUntil(t, ctx, e.client, chatstream.Request{Input: "wait", SessionSettings: ext("drain")}, isContent)
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := e.h.Shutdown(sctx); err != nil {
			t.Fatal(err)
		}
		msgs, _, _ := wait()
		if st := last(msgs).State; st == nil || st.Aborted || st.Error != "" {
			t.Errorf("state = %+v, want a normal end", st)
		}
		if fa, _ := conv(msgs).FinalAnswer(); fa.Content != "start done" {
			t.Errorf("answer = %q", fa.Content)
		}
	})
}

func TestTurnTimeout(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		// The slow script emits its partial answer at once and then waits
		// 30 s; 500 ms leaves a loaded machine time to emit it first.
		e := newEnv(t, tg, envOpts{opts: []chatstream.Option{chatstream.WithTurnTimeout(500 * time.Millisecond)}})
		msgs := collect(t, e.client, chatstream.Request{Input: "slow", SessionSettings: ext("timeout")})
		st := last(msgs).State
		if st == nil || st.Error == "" || st.Aborted {
			t.Errorf("state = %+v, want error", st)
		}
		if fa, _ := conv(msgs).FinalAnswer(); fa.Content != "partial answer" {
			t.Errorf("answer = %q", fa.Content)
		}
	})
}

func TestEmitterMisuse(t *testing.T) {
	var got atomic.Value
	agent := chatstream.AgentFunc(func(ctx context.Context, tr chatstream.Turn, e chatstream.Emitter) error {
		var report []string
		tc, err := e.ToolCall("svcMeta", map[string]string{"searchQuery": "x"})
		if err != nil {
			return err
		}
		report = append(report, fmt.Sprint(errors.Is(e.Content("no"), chatstream.ErrToolCallOpen)))
		_, err = e.ToolCall("other", nil)
		report = append(report, fmt.Sprint(errors.Is(err, chatstream.ErrToolCallOpen)))
		report = append(report, fmt.Sprint(tc.Result(map[string]int{"n": 1}) == nil))
		report = append(report, fmt.Sprint(errors.Is(tc.Result(nil), chatstream.ErrToolCallDone)))
		report = append(report, fmt.Sprint(errors.Is(tc.Fail("x"), chatstream.ErrToolCallDone)))
		_, err = e.ToolCall("bad", func() {})
		report = append(report, fmt.Sprint(err != nil))
		got.Store(strings.Join(report, ","))
		if err := e.Content("fine"); err != nil {
			return err
		}
		_, err = e.ToolCall("left-open", 1)
		return err
	})
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{agent: agent})
		msgs := collect(t, e.client, chatstream.Request{Input: "q", SessionSettings: ext("misuse")})
		if r := got.Load(); r != "true,true,true,true,true,true" {
			t.Errorf("emitter answers = %v", r)
		}
		c := conv(msgs)
		fa, _ := c.FinalAnswer()
		if fa.Content != "fine" {
			t.Errorf("answer = %q", fa.Content)
		}
		var tools int
		for _, m := range c.History() {
			if m.ToolCall != nil {
				tools++
				if m.IsInProcess || m.ToolCall.Result == nil {
					t.Errorf("tool call left in process: %+v", m)
				}
			}
		}
		if tools != 2 {
			t.Errorf("%d tool calls, want 2", tools)
		}
		if st := last(msgs).State; st == nil || st.Error != "" {
			t.Errorf("state = %+v", st)
		}
	})
}

func TestAgentPanic(t *testing.T) {
	agent := chatstream.AgentFunc(func(ctx context.Context, _ chatstream.Turn, e chatstream.Emitter) error {
		_ = e.Content("a")
		var m map[string]int
		m["boom"]++ // nil map write
		return nil
	})
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{agent: agent})
		msgs := collect(t, e.client, chatstream.Request{Input: "q", SessionSettings: ext("panic")})
		if st := last(msgs).State; st == nil || st.Error == "" {
			t.Errorf("state = %+v, want error", st)
		}
	})
}

// TestBoundedWrites checks that a turn writes to the database a bounded
// number of times, whatever the number of content pieces.
func TestBoundedWrites(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			var writes atomic.Int64
			hook := func(_ context.Context, sql string) {
				s := strings.ToUpper(strings.TrimSpace(sql))
				if strings.HasPrefix(s, "INSERT") || strings.HasPrefix(s, "UPDATE") || strings.HasPrefix(s, "DELETE") {
					writes.Add(1)
				}
			}
			many := make([]chatstreamtest.Event, 1000)
			for i := range many {
				many[i] = chatstreamtest.Content("x")
			}
			agent := scripts{
				"few":  {Events: many[:3]},
				"many": {Events: many},
			}
			var h *chatstream.Handler
			s := apitest.New(t, apitest.Target{Backend: backend, Router: apitest.ServeMux},
				apitest.WithStore(func(t testing.TB, backend string) store.Store {
					return testdb.OpenWithHook(t, backend, hook)
				}),
				apitest.WithRoutes(func(s *apitest.Server) []apitest.Route {
					h = chatstream.NewHandler(s.Store, agent, chatstream.WithClock(s.Now))
					var rs []apitest.Route
					for _, r := range h.Routes() {
						rs = append(rs, apitest.Route(r))
					}
					return rs
				}))
			t.Cleanup(func() { _ = h.Close() })
			c := chatstream.NewClient(s.URL, chatstream.WithAPIKey(apitest.AdminKey), chatstream.WithHTTPClient(s.Client()))
			count := func(input string) int64 {
				collect(t, c, chatstream.Request{Input: "warm", ChatID: "w-" + input, SessionSettings: ext("writer")})
				before := writes.Load()
				collect(t, c, chatstream.Request{Input: input, ChatID: "w-" + input, SessionSettings: ext("writer")})
				return writes.Load() - before
			}
			few, lots := count("few"), count("many")
			if few != lots {
				t.Errorf("writes per turn: %d with 3 pieces, %d with 1000", few, lots)
			}
			if lots > 12 {
				t.Errorf("%d writes per turn, want a small bound", lots)
			}
			t.Logf("%d write statements per turn", lots)
		})
	}
}

func TestTurnTooLong(t *testing.T) {
	var agentErr atomic.Value
	agent := chatstream.AgentFunc(func(ctx context.Context, _ chatstream.Turn, e chatstream.Emitter) error {
		piece := strings.Repeat("x", 1000)
		for range 1000 {
			if err := e.Content(piece); err != nil {
				agentErr.Store(err)
				return nil // ignores the error: the turn still ends as failed
			}
		}
		return nil
	})
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{agent: agent, opts: []chatstream.Option{chatstream.WithMaxTurnBytes(20000)}})
		msgs := collect(t, e.client, chatstream.Request{Input: "q", SessionSettings: ext("long")})
		if err, _ := agentErr.Load().(error); !errors.Is(err, chatstream.ErrTurnTooLong) {
			t.Errorf("agent got %v, want ErrTurnTooLong", err)
		}
		if st := last(msgs).State; st == nil || st.Error == "" {
			t.Errorf("state = %+v, want error", st)
		}
		if fa, _ := conv(msgs).FinalAnswer(); len(fa.Content) > 200 {
			t.Errorf("final message carries %d bytes", len(fa.Content))
		}
		if len(msgs) > 30 {
			t.Errorf("%d lines streamed past a 20 kB cap", len(msgs))
		}
	})
}

// TestTurnTooLongInOneLine: no single event takes a turn's stream past its
// cap: a content piece, a thought or a tool call's input larger than the
// room left is refused with ErrTurnTooLong, never streamed or stored.
func TestTurnTooLongInOneLine(t *testing.T) {
	huge := strings.Repeat("x", 100000)
	for name, emit := range map[string]func(chatstream.Emitter) error{
		"content":  func(e chatstream.Emitter) error { return e.Content(huge) },
		"thinking": func(e chatstream.Emitter) error { return e.Thinking(huge) },
		"tool input": func(e chatstream.Emitter) error {
			_, err := e.ToolCall("svcSqlApi", map[string]string{"sql": huge})
			return err
		},
		// The result's line repeats the input.
		"tool result": func(e chatstream.Emitter) error {
			tc, err := e.ToolCall("svcSqlApi", map[string]string{"sql": huge[:12000]})
			if err != nil {
				return err
			}
			return tc.Result(map[string]string{"rows": huge[:15000]})
		},
		// Escapes make a line up to six times its text.
		"escaped content": func(e chatstream.Emitter) error { return e.Content(strings.Repeat("\x01", 15000)) },
	} {
		t.Run(name, func(t *testing.T) {
			var agentErr atomic.Value
			agent := chatstream.AgentFunc(func(ctx context.Context, _ chatstream.Turn, e chatstream.Emitter) error {
				if err := emit(e); err != nil {
					agentErr.Store(err)
				}
				return nil
			})
			e := newEnv(t, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux},
				envOpts{agent: agent, opts: []chatstream.Option{chatstream.WithMaxTurnBytes(20000), chatstream.WithDevelopment(true)}})
			msgs := collect(t, e.client, chatstream.Request{Input: "q", SessionSettings: ext("long")})
			if err, _ := agentErr.Load().(error); !errors.Is(err, chatstream.ErrTurnTooLong) {
				t.Errorf("agent got %v, want ErrTurnTooLong", err)
			}
			for _, m := range msgs {
				if b, _ := json.Marshal(m); len(b) > 20000 {
					t.Errorf("a %d-byte line (%s) was streamed past a 20 kB cap", len(b), m.ID)
				}
			}
		})
	}
}

// userGoneStore deletes the user of a thread being created just before
// creating it, in the same transaction: as if an operator had deleted the
// user between the turn's provisioning and its opening.
type userGoneStore struct{ store.Store }

func (s userGoneStore) InTx(ctx context.Context, fn func(store.Tx) error) error {
	return s.Store.InTx(ctx, func(tx store.Tx) error { return fn(userGoneTx{tx}) })
}

type userGoneTx struct{ store.Tx }

func (t userGoneTx) CreateThread(ctx context.Context, th store.Thread, msgs ...store.ThreadMessage) error {
	if err := t.Tx.DeleteUser(ctx, th.UserID); err != nil {
		return err
	}
	return t.Tx.CreateThread(ctx, th, msgs...)
}

// TestOpeningWhoseUserIsGone: a turn whose user was deleted between its
// provisioning and its opening is 503 (try again), and the request leaves
// nothing behind.
func TestOpeningWhoseUserIsGone(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{store: func(t testing.TB, backend string) store.Store {
			return userGoneStore{testdb.Open(t, backend)}
		}})
		err := firstLine(t.Context(), e.client, chatstream.Request{Input: "hi", ChatID: "gone-user", SessionSettings: ext("gone")})
		if apiStatus(err) != http.StatusServiceUnavailable {
			t.Fatalf("got %v, want 503", err)
		}
		if _, err := e.Store.Thread(t.Context(), e.Accounts[acct].ID, "gone-user"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the thread was stored: %v", err)
		}
		// The user the request would have created is rolled back with it.
		if _, err := e.Store.UserByKey(t.Context(), store.UserKey{AccountID: e.Accounts[acct].ID, ExternalID: "gone"}, e.Now()); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the user the refused request created: %v", err)
		}
	})
}

// gateStore holds the next InTx once armed: the opening of a turn in an
// existing chat waits there, reserved but not started.
type gateStore struct {
	store.Store
	armed   *atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s gateStore) InTx(ctx context.Context, fn func(store.Tx) error) error {
	if s.armed.CompareAndSwap(true, false) {
		close(s.entered)
		<-s.release
	}
	return s.Store.InTx(ctx, fn)
}

// hold arms gs, sends req through c on a goroutine of its own and returns
// once gs holds that request's opening; the channel gets the request's
// error when it ends.
func (gs gateStore) hold(c *chatstream.Client, req chatstream.Request) <-chan error {
	gs.armed.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := collectErr(context.Background(), c, req)
		done <- err
	}()
	<-gs.entered
	return done
}

func newGateStore() gateStore {
	return gateStore{armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
}

// gatedEnv returns an env of target tg, with agent 8 beside agent 7, whose
// store holds the next InTx once gs is armed.
func gatedEnv(t *testing.T, tg apitest.Target) (e *env, gs gateStore) {
	gs = newGateStore()
	e = newEnv(t, tg, envOpts{store: func(t testing.TB, backend string) store.Store {
		gs.Store = testdb.Open(t, backend)
		return gs
	}, cfg: withAgent8})
	return e, gs
}

// TestAbortDuringOpening: an abort that comes while the turn is still
// opening (reserved, its transaction under way), in an existing chat or in
// the first turn of a new one, aborts the turn as it starts, and is
// answered once the thread is free: an input sent right after the 204
// opens the next turn.
func TestAbortDuringOpening(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		for _, newChat := range []bool{false, true} {
			gs := gateStore{armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
			e := newEnv(t, tg, envOpts{store: func(t testing.TB, backend string) store.Store {
				gs.Store = testdb.Open(t, backend)
				return gs
			}, cfg: func(c *operator.Config) {
				c.Accounts[0].Agents = append(c.Accounts[0].Agents, operator.Agent{ID: "8", DeploymentID: 1})
			}})
			ss, chatID := ext("abort-open"), "ao"
			if newChat {
				collect(t, e.client, chatstream.Request{Input: "echo:hi", ChatID: "earlier", SessionSettings: ss})
			} else {
				collect(t, e.client, chatstream.Request{Input: "echo:hi", ChatID: chatID, SessionSettings: ss})
			}
			gs.armed.Store(true)
			res := make(chan []chatstream.Message, 1)
			go func() {
				msgs, _ := collectErr(context.Background(), e.client, chatstream.Request{Input: "wait", ChatID: chatID, SessionSettings: ss})
				res <- msgs
			}()
			<-gs.entered
			// Through another agent's path the chat does not exist.
			if err := e.client.Abort(t.Context(), acct, "8", chatID, *ss); apiStatus(err) != http.StatusNotFound {
				t.Errorf("new chat %v: abort through another agent during the opening: %v, want 404", newChat, err)
			}
			aborted := make(chan error, 1)
			go func() { aborted <- e.client.Abort(t.Context(), acct, agentID, chatID, *ss) }()
			select {
			case err := <-aborted:
				close(gs.release)
				t.Fatalf("new chat %v: the abort was answered (%v) while the opening turn still held the thread", newChat, err)
			case <-time.After(100 * time.Millisecond): // the abort waits for the opening turn
			}
			close(gs.release)
			if err := <-aborted; err != nil {
				t.Fatalf("new chat %v: abort: %v", newChat, err)
			}
			if _, err := collectErr(t.Context(), e.client, chatstream.Request{Input: "echo:next", ChatID: chatID, SessionSettings: ss}); err != nil {
				t.Errorf("new chat %v: an input right after the abort's 204: %v, want the next turn", newChat, err)
			}
			select {
			case msgs := <-res:
				if st := last(msgs).State; st == nil || !st.Aborted {
					t.Errorf("new chat %v: the abort was answered, but the turn ran to its end: last state %+v", newChat, st)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the stream did not end")
			}
		}
	})
}

// TestOwnInputWhileAnothersOpeningHoldsTheChat: another user's input on
// a user's chat is reserved before the store refuses it; the user's own
// input that comes meanwhile is 409, try again (the chat is the user's,
// busy for an instant), not 403 as if the chat were the other's; once the
// other's is refused, the user's next input opens its turn. Through
// another agent, the other's input is 404 as usual.
func TestOwnInputWhileAnothersOpeningHoldsTheChat(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		for _, other := range []struct {
			name   string
			ss     *chatstream.SessionSettings
			agent  string
			status int
		}{{"another user", ext("mallory"), agentID, http.StatusForbidden}, {"the user through another agent", ext("jane"), "8", http.StatusNotFound}} {
			e, gs := gatedEnv(t, tg)
			jane, chatID := ext("jane"), "janes"
			collect(t, e.client, chatstream.Request{Input: "echo:hi", ChatID: chatID, SessionSettings: jane})
			for _, err := range e.client.Stream(t.Context(), acct, other.agent, chatstream.Request{Input: "echo:hi", ChatID: "others", SessionSettings: other.ss}) {
				if err != nil {
					t.Fatal(err)
				}
			}
			gs.armed.Store(true)
			refused := make(chan error, 1)
			go func() {
				var err error
				for _, e := range e.client.Stream(context.Background(), acct, other.agent, chatstream.Request{Input: "echo:mine?", ChatID: chatID, SessionSettings: other.ss}) {
					err = cmp.Or(err, e)
				}
				refused <- err
			}()
			<-gs.entered // the other opening holds the chat's reservation
			_, err := collectErr(t.Context(), e.client, chatstream.Request{Input: "echo:again", ChatID: chatID, SessionSettings: jane})
			close(gs.release)
			if apiStatus(err) != http.StatusConflict || !strings.Contains(err.Error(), "try again") {
				t.Errorf("%s: the user's input while the other's opening held its chat: %v, want 409, try again", other.name, err)
			}
			if err := <-refused; apiStatus(err) != other.status {
				t.Errorf("%s: the other input on the chat: %v, want %d", other.name, err, other.status)
			}
			if _, err := collectErr(t.Context(), e.client, chatstream.Request{Input: "echo:again", ChatID: chatID, SessionSettings: jane}); err != nil {
				t.Errorf("%s: the user's input once the other's was refused: %v, want its turn", other.name, err)
			}
		}
	})
}

// TestOthersWhileOwnersOpeningHoldsTheChat: while the owner's own opening
// holds its chat (not started), everyone else is answered as the spec
// says, not with the owner's 409, try again: another user 403, any caller
// through another agent 404 (which tells nothing of the chat), a new user
// (whose opening reserves inside its transaction) the same.
func TestOthersWhileOwnersOpeningHoldsTheChat(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e, gs := gatedEnv(t, tg)
		collect(t, e.client, chatstream.Request{Input: "echo:hi", ChatID: "janes", SessionSettings: ext("jane")})
		collect(t, e.client, chatstream.Request{Input: "echo:hi", ChatID: "m", SessionSettings: ext("mallory")})
		held := gs.hold(e.client, chatstream.Request{Input: "echo:held", ChatID: "janes", SessionSettings: ext("jane")})
		othersAnswered(t, e, "janes")
		close(gs.release)
		if err := <-held; err != nil {
			t.Errorf("the owner's held opening: %v", err)
		}
	})
}

// othersAnswered checks what others get for input on jane's chat chatID
// on e while her opening holds it.
func othersAnswered(t *testing.T, e *env, chatID string) {
	t.Helper()
	for _, c := range []struct {
		name, agent string
		ss          *chatstream.SessionSettings
		want        int
	}{
		{"another user", agentID, ext("mallory"), http.StatusForbidden},
		{"another user through another agent", "8", ext("mallory"), http.StatusNotFound},
		{"the owner through another agent", "8", ext("jane"), http.StatusNotFound},
		{"a new user", agentID, ext("newbie"), http.StatusForbidden},
		{"a new user through another agent", "8", ext("newbie2"), http.StatusNotFound},
	} {
		var err error
		for _, e := range e.client.Stream(t.Context(), acct, c.agent, chatstream.Request{Input: "echo:x", ChatID: chatID, SessionSettings: c.ss}) {
			err = cmp.Or(err, e)
		}
		if apiStatus(err) != c.want {
			t.Errorf("%s: %v, want %d", c.name, err, c.want)
		}
	}
}

// TestOwnSecondInputOnAnothersChat: a user's second input on another
// user's chat while the first is still being refused is 403 like the
// first, not 409 as if the chat were the user's with a turn running.
func TestOwnSecondInputOnAnothersChat(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e, gs := gatedEnv(t, tg)
		collect(t, e.client, chatstream.Request{Input: "echo:hi", ChatID: "j", SessionSettings: ext("jane")})
		collect(t, e.client, chatstream.Request{Input: "echo:hi", ChatID: "mallorys", SessionSettings: ext("mallory")})
		first := gs.hold(e.client, chatstream.Request{Input: "echo:one", ChatID: "mallorys", SessionSettings: ext("jane")})
		_, err := collectErr(t.Context(), e.client, chatstream.Request{Input: "echo:two", ChatID: "mallorys", SessionSettings: ext("jane")})
		close(gs.release)
		if apiStatus(err) != http.StatusForbidden {
			t.Errorf("the second input on another user's chat: %v, want 403", err)
		}
		if err := <-first; apiStatus(err) != http.StatusForbidden {
			t.Errorf("the first input on another user's chat: %v, want 403", err)
		}
	})
}

// txGateStore holds CreateThread inside the opening's transaction once
// armed: a new user's turn is then reserved (inside the transaction) but
// not started.
type txGateStore struct {
	store.Store
	armed   *atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s txGateStore) InTx(ctx context.Context, fn func(store.Tx) error) error {
	return s.Store.InTx(ctx, func(tx store.Tx) error { return fn(txGateTx{tx, s}) })
}

type txGateTx struct {
	store.Tx
	s txGateStore
}

func (t txGateTx) CreateThread(ctx context.Context, th store.Thread, msgs ...store.ThreadMessage) error {
	if t.s.armed.CompareAndSwap(true, false) {
		close(t.s.entered)
		<-t.s.release
	}
	return t.Tx.CreateThread(ctx, th, msgs...)
}

// TestAbortDuringNewUsersOpening: as TestAbortDuringOpening, for the first
// turn of a user that does not exist yet, created in the opening's
// transaction, which no other request sees until it commits: the abort
// finds the opening by the request's external id, waits, and the turn is
// aborted as it starts.
func TestAbortDuringNewUsersOpening(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		gs := txGateStore{armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
		e := newEnv(t, tg, envOpts{store: func(t testing.TB, backend string) store.Store {
			gs.Store = testdb.Open(t, backend)
			return gs
		}})
		gs.armed.Store(true)
		abortHeldOpening(t, e, ext("brand-new"), "new-user-chat", gs.entered, gs.release)
	})
}

// abortHeldOpening starts a turn of ss in chatID whose opening a test
// store holds (entered once it does, until release is closed), aborts it
// meanwhile, and checks that the abort waits for the opening, is answered
// 204, and that the turn is aborted as it starts.
func abortHeldOpening(t *testing.T, e *env, ss *chatstream.SessionSettings, chatID string, entered, release chan struct{}) {
	t.Helper()
	res := make(chan []chatstream.Message, 1)
	go func() {
		msgs, _ := collectErr(context.Background(), e.client, chatstream.Request{Input: "wait", ChatID: chatID, SessionSettings: ss})
		res <- msgs
	}()
	<-entered
	aborted := make(chan error, 1)
	go func() { aborted <- e.client.Abort(t.Context(), acct, agentID, chatID, *ss) }()
	var abortErr error
	select {
	case abortErr = <-aborted:
	case <-time.After(200 * time.Millisecond): // the abort waits for the opening
	}
	close(release)
	if abortErr == nil {
		abortErr = <-aborted
	}
	if abortErr != nil {
		t.Fatalf("abort during the opening: %v (status %d), want 204", abortErr, apiStatus(abortErr))
	}
	select {
	case msgs := <-res:
		if st := last(msgs).State; st == nil || !st.Aborted {
			t.Errorf("abort answered 204 during the opening, but the turn was not aborted: last state %+v", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end")
	}
}

// threadReadGate holds the first read of a thread outside a transaction
// that finds none, once armed: an abort's first check of a new chat.
type threadReadGate struct {
	store.Store
	armed   *atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s threadReadGate) Thread(ctx context.Context, accountID int64, chatID string) (store.Thread, error) {
	th, err := s.Store.Thread(ctx, accountID, chatID)
	if errors.Is(err, store.ErrNotFound) && s.armed.CompareAndSwap(true, false) {
		close(s.entered)
		<-s.release
	}
	return th, err
}

// openingAndReadGated returns an env whose store holds a turn's opening
// transaction (gs) and a read of a thread that finds none (rg), once each
// is armed, with the functions that release them (also at the test's end).
func openingAndReadGated(t *testing.T, tg apitest.Target) (e *env, gs txGateStore, rg threadReadGate, relOpen, relRead func()) {
	gs = txGateStore{armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
	rg = threadReadGate{armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
	e = newEnv(t, tg, envOpts{store: func(t testing.TB, backend string) store.Store {
		gs.Store = testdb.Open(t, backend)
		rg.Store = gs
		return rg
	}})
	relOpen, relRead = sync.OnceFunc(func() { close(gs.release) }), sync.OnceFunc(func() { close(rg.release) })
	t.Cleanup(relOpen)
	t.Cleanup(relRead)
	return e, gs, rg, relOpen, relRead
}

// TestAbortRacingNewChatOpening: without a cluster, an abort received
// while the first turn of a new chat is opening (its thread not stored at
// the abort's first read) whose opening then commits and starts before the
// abort looks for the opening turn: the abort must still stop the turn
// (the turn was opening when the abort was received), not answer 404
// while the turn runs on.
func TestAbortRacingNewChatOpening(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		for _, returning := range []bool{false, true} {
			user := "race-new"
			if returning {
				user = "race-returning"
			}
			e, gs, rg, relOpen, relRead := openingAndReadGated(t, tg)
			ctx, ss, chatID := t.Context(), ext(user), user+"-chat"
			if returning {
				collect(t, e.client, chatstream.Request{Input: "echo:hi", ChatID: user + "-earlier", SessionSettings: ss})
			}
			gs.armed.Store(true)
			started := make(chan func() ([]chatstream.Message, time.Time, error), 1)
			go func() {
				_, wait := streamUntil(t, ctx, e.client, chatstream.Request{Input: "slow", ChatID: chatID, SessionSettings: ss}, isPiece("answer"))
				started <- wait
			}()
			<-gs.entered // the opening holds its transaction: the thread is not stored
			rg.armed.Store(true)
			aborted := make(chan error, 1)
			go func() { aborted <- e.client.Abort(ctx, acct, agentID, chatID, *ss) }()
			<-rg.entered // the abort found no thread
			relOpen()
			wait := <-started // the turn opened and started
			relRead()
			if err := <-aborted; err != nil {
				t.Errorf("returning %v: abort received during the opening: %v (status %d), want 204 and the turn aborted", returning, err, apiStatus(err))
			}
			waitEnd := make(chan []chatstream.Message, 1)
			go func() { msgs, _, _ := wait(); waitEnd <- msgs }()
			select {
			case msgs := <-waitEnd:
				if st := last(msgs).State; st == nil || !st.Aborted {
					t.Errorf("returning %v: last state %+v, want aborted", returning, st)
				}
			case <-time.After(5 * time.Second):
				t.Errorf("returning %v: the turn runs on after the abort was answered", returning)
				_ = e.client.Abort(ctx, acct, agentID, chatID, *ss)
				<-waitEnd
			}
		}
	})
}

// TestAbortDuringOpeningOverExpiredOwnersThread: the first turn of
// a chat whose stored thread belongs to an expired ephemeral user (as
// invisible as its owner: for the caller, a new chat, which the opening
// creates anew) is opening; its user's abort must abort it as for any new
// chat (docs/http-reference.md: "this holds for the first turn of a new
// chat too"), not answer 404 while the turn runs on.
func TestAbortDuringOpeningOverExpiredOwnersThread(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		for _, heir := range []string{"gone-owner", "heir"} { // the same externalId again, another user
			gs := txGateStore{armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
			e := newEnv(t, tg, envOpts{store: func(t testing.TB, backend string) store.Store {
				gs.Store = testdb.Open(t, backend)
				return gs
			}})
			ttl := int64(60)
			chatID := "gone-chat-" + heir
			collect(t, e.client, chatstream.Request{Input: "echo:a", ChatID: chatID,
				SessionSettings: &chatstream.SessionSettings{ExternalID: "gone-owner", EphemeralTTLSeconds: &ttl}})
			e.Advance(61 * time.Second)
			gs.armed.Store(true)
			t.Run(heir, func(t *testing.T) {
				abortHeldOpening(t, e, ext(heir), chatID, gs.entered, gs.release)
			})
		}
	})
}

// TestAnotherUsersAbortStraddlingCommit: without a cluster, another
// user's abort received while the first turn of a new chat is opening,
// whose first read finds no thread and whose later reads come after the
// opening committed, is 404: the chat did not exist when the abort came
// (docs/http-reference.md).
func TestAnotherUsersAbortStraddlingCommit(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e, gs, rg, relOpen, relRead := openingAndReadGated(t, tg)
		gs.armed.Store(true)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = collectErr(context.Background(), e.client, chatstream.Request{Input: "echo:x", ChatID: "straddle", SessionSettings: ext("owner")})
		}()
		<-gs.entered // the owner's opening holds its transaction
		rg.armed.Store(true)
		other := make(chan error, 1)
		go func() { other <- e.client.Abort(t.Context(), acct, agentID, "straddle", *ext("intruder")) }()
		<-rg.entered // the intruder's abort found no thread
		relOpen()
		<-done // the owner's turn opened (and ended)
		relRead()
		if err := <-other; apiStatus(err) != http.StatusNotFound {
			t.Errorf("another user's abort received during the opening: %v, want 404 (the chat did not exist yet)", err)
		}
	})
}

// TestAbortDuringOpeningReadFails: without a cluster, the user's abort of
// the first turn of a new chat, received while that turn is opening
// (reserved here, its transaction held), whose read of the thread in the
// check for an opening here fails (the database briefly unavailable)
// while the reads around it succeed: the abort aborts the turn (204) or
// reports the failure (503), never 404 while the turn runs on.
func TestAbortDuringOpeningReadFails(t *testing.T) {
	const chatID = "opening-read-fails"
	gs := gateStore{armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
	rg := nthMissGate{chatID: chatID, n: new(atomic.Int32), fail: true, failed: new(atomic.Bool), reached: new(atomic.Bool),
		entered: make(chan struct{}), release: make(chan struct{})}
	e := newEnv(t, apitest.Target{Backend: testdb.Postgres, Router: apitest.ServeMux}, envOpts{store: func(t testing.TB, backend string) store.Store {
		gs.Store = testdb.Open(t, backend)
		rg.Store = gs
		return rg
	}})
	rel := sync.OnceFunc(func() { close(gs.release) })
	t.Cleanup(rel)
	ss := ext("read-fails")
	collect(t, e.client, chatstream.Request{Input: "echo:hi", ChatID: "earlier", SessionSettings: ss}) // a returning user: reserved before the transaction
	gs.armed.Store(true)
	res := make(chan []chatstream.Message, 1)
	go func() {
		msgs, _ := collectErr(context.Background(), e.client, chatstream.Request{Input: "wait", ChatID: chatID, SessionSettings: ss})
		res <- msgs
	}()
	<-gs.entered  // reserved, its transaction not begun: no thread stored
	rg.n.Store(1) // threadOf finds no thread; the next read (firstTurnOpening's) fails
	aborted := make(chan error, 1)
	go func() { aborted <- e.client.Abort(t.Context(), acct, agentID, chatID, *ss) }()
	var err error
	select {
	case err = <-aborted:
	case <-time.After(300 * time.Millisecond): // waiting for the opening: the right thing
	}
	rel()
	if err == nil {
		err = <-aborted
	}
	if !rg.failed.Load() {
		t.Fatal("no read of the thread failed")
	}
	msgs := <-res
	st := last(msgs).State
	if apiStatus(err) == http.StatusNotFound || (err == nil && (st == nil || !st.Aborted)) {
		t.Errorf("abort of the caller's opening turn whose second read failed: %v (status %d); the turn's last state %+v: want 204 with the turn aborted, or 503", err, apiStatus(err), st)
	}
}

// TestAbortReadFailsMessage: an abort whose deciding read of the thread
// fails (the database unavailable) is 503 with the database's message, as
// docs/http-reference.md's abort table says.
func TestAbortReadFailsMessage(t *testing.T) {
	const chatID = "read-fails-message"
	rg := nthMissGate{chatID: chatID, n: new(atomic.Int32), fail: true, failed: new(atomic.Bool), reached: new(atomic.Bool),
		entered: make(chan struct{}), release: make(chan struct{})}
	e := newEnv(t, apitest.Target{Backend: testdb.Postgres, Router: apitest.ServeMux}, envOpts{store: func(t testing.TB, backend string) store.Store {
		rg.Store = testdb.Open(t, backend)
		return rg
	}})
	rg.n.Store(2) // threadOf and firstTurnOpening find no thread; the deciding read fails
	err := e.client.Abort(t.Context(), acct, agentID, chatID, *ext("reader"))
	if !rg.failed.Load() {
		t.Fatal("no read of the thread failed")
	}
	he, _ := errors.AsType[*httperr.Error](err)
	if he == nil || he.Status != http.StatusServiceUnavailable || he.Message != "service unavailable, try again" {
		t.Errorf("abort whose read of the thread failed: %v, want 503 %q (docs/http-reference.md)", err, "service unavailable, try again")
	}
}

// slowAppendStore delays AppendMessages of chatID by delay once armed.
type slowAppendStore struct {
	store.Store
	chatID string
	delay  time.Duration
	armed  *atomic.Bool
}

func (s slowAppendStore) AppendMessages(ctx context.Context, accountID int64, chatID string, lastSort int64, msgs []store.ThreadMessage) error {
	if s.armed.Load() && chatID == s.chatID {
		time.Sleep(s.delay)
	}
	return s.Store.AppendMessages(ctx, accountID, chatID, lastSort, msgs)
}

// TestAbortOfLocalTurnBoundedOnSlowDatabase: docs/http-reference.md says
// "Should the turn take longer than 5 seconds to end (a database far too
// slow), the 204 is sent then". An abort of a turn started in this process
// waits for t.stop, whose final write is bounded by persistTimeout (10 s)
// and release by another 10 s, not by clusterTimeout.
func TestAbortOfLocalTurnBoundedOnSlowDatabase(t *testing.T) {
	const chatID = "slow-db-abort"
	armed := new(atomic.Bool)
	e := newEnv(t, apitest.Target{Backend: testdb.Postgres, Router: apitest.ServeMux}, envOpts{store: func(t testing.TB, backend string) store.Store {
		return slowAppendStore{Store: testdb.Open(t, backend), chatID: chatID, delay: 8 * time.Second, armed: armed}
	}})
	ctx := t.Context()
	_, wait := streamUntil(t, ctx, e.client, chatstream.Request{Input: "slow", ChatID: chatID, SessionSettings: ext("slowdb")},
		func(m chatstream.Message) bool { return isContent(m) && m.Content == "answer" })
	armed.Store(true)
	start := time.Now()
	err := e.client.Abort(ctx, acct, agentID, chatID, chatstream.SessionSettings{ExternalID: "slowdb"})
	d := time.Since(start)
	_, _, _ = wait()
	if err != nil {
		t.Fatalf("abort: %v", err)
	}
	if d > 6*time.Second {
		t.Errorf("abort of a local turn on a slow database answered after %v; docs/http-reference.md: the 204 is sent after 5 seconds", d)
	}
}

// TestEphemeralUsersTurnEndsAtExpiry: an ephemeral user is invisible from
// the moment its TTL passes, with its threads, so its running turn ends
// then (its stream with state.error, as for a deleted chat) rather than at
// the turn's deadline; the chat id is then free for a new input of the same
// externalId (a new user), where a running turn would hold it.
func TestEphemeralUsersTurnEndsAtExpiry(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{})
		ttl := int64(1)
		settings := &chatstream.SessionSettings{ExternalID: "shortlived", EphemeralTTLSeconds: &ttl}
		start := time.Now()
		msgs, err := collectErr(t.Context(), e.client, chatstream.Request{Input: "slow", ChatID: "expiring", SessionSettings: settings})
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("the turn ended after %v, not at the user's expiry", took)
		}
		if st := last(msgs).State; st == nil || st.Error == "" || st.IsStreaming {
			t.Errorf("last line %+v, want a __state__ with an error", last(msgs))
		}
		if n := e.h.RunningTurns(); n != 0 {
			t.Errorf("%d turns running after the expiry", n)
		}
		e.Advance(2 * time.Second) // the handler's clock: the user has expired
		after := collect(t, e.client, chatstream.Request{Input: "echo:again", ChatID: "expiring", SessionSettings: ext("shortlived")})
		if st := last(after).State; st == nil || st.Error != "" || len(st.Messages) != 2 {
			t.Errorf("input on the expired user's chat id: %+v, want a new thread of two messages", last(after))
		}
	})
}

// TestEphemeralUserMadePersistentKeepsItsTurn: a turn of an ephemeral user
// made persistent while it runs goes on past the old expiry.
func TestEphemeralUserMadePersistentKeepsItsTurn(t *testing.T) {
	agent := testScripts()
	agent["long"] = &chatstreamtest.ScriptedAgent{Events: []chatstreamtest.Event{
		chatstreamtest.Content("start "), chatstreamtest.Pause(2500 * time.Millisecond), chatstreamtest.Content("done"),
	}}
	e := newEnv(t, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux}, envOpts{agent: agent})
	ttl := int64(1)
	_, wait := streamUntil(t, t.Context(), e.client, chatstream.Request{Input: "long", ChatID: "kept",
		SessionSettings: &chatstream.SessionSettings{ExternalID: "converted", EphemeralTTLSeconds: &ttl}}, isPiece("start "))
	persistent := false
	collect(t, e.client, chatstream.Request{Input: "echo:x", ChatID: "other",
		SessionSettings: &chatstream.SessionSettings{ExternalID: "converted", IsEphemeral: &persistent}})
	msgs, _, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if st := last(msgs).State; st == nil || st.Error != "" || !slices.ContainsFunc(msgs, isPiece("done")) {
		t.Errorf("the turn ended with %+v, want it complete", last(msgs))
	}
}
