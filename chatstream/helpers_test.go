package chatstream_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/chatstreamtest"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/middleware/httperr"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/operator"
)

const (
	acct    = apitest.Account
	agentID = "7"
)

// scripts is an agent that answers each input with the script of that name
// ("" is the default script). Inputs of the form "echo:<text>" answer
// <text> in one piece.
type scripts map[string]*chatstreamtest.ScriptedAgent

func (s scripts) Answer(ctx context.Context, t chatstream.Turn, e chatstream.Emitter) error {
	if text, ok := strings.CutPrefix(t.Input, "echo:"); ok {
		return e.Content(text)
	}
	a, ok := s[t.Input]
	if !ok {
		a = s[""]
	}
	if a == nil {
		return e.Content("ok")
	}
	return a.Answer(ctx, t, e)
}

// defaultScript is the script of the sequence tests.
var defaultScript = &chatstreamtest.ScriptedAgent{Events: []chatstreamtest.Event{
	chatstreamtest.Thinking("Looking for revenue."),
	chatstreamtest.Content("Let me "),
	chatstreamtest.Content("check."),
	chatstreamtest.Tool("svcMeta", map[string]any{"searchQuery": "revenue"},
		map[string]any{"searchQuery": "revenue", "cubes": []any{}}),
	chatstreamtest.ToolError("svcSqlApi", map[string]any{"sqlQuery": "SELECT 1 < 2"}, "branch not found"),
	chatstreamtest.Content(" Revenue "),
	chatstreamtest.Content("is 42."),
}}

// slowScript streams a piece, then pauses long enough to be aborted.
var slowScript = &chatstreamtest.ScriptedAgent{Events: []chatstreamtest.Event{
	chatstreamtest.Content("partial "),
	chatstreamtest.Content("answer"),
	chatstreamtest.Pause(30 * time.Second),
	chatstreamtest.Content(" never"),
}}

func testScripts() scripts {
	pieces := make([]chatstreamtest.Event, 200)
	for i := range pieces {
		pieces[i] = chatstreamtest.Content("p" + string(rune('a'+i%26)) + " ")
	}
	return scripts{
		"":      defaultScript,
		"slow":  slowScript,
		"fail":  {Events: []chatstreamtest.Event{chatstreamtest.Content("half"), chatstreamtest.Fail("database exploded: password=hunter2")}},
		"paced": {Events: pieces[:40], Delay: 5 * time.Millisecond},
		// "paced-long" runs about a second: long enough for rejoins on a
		// loaded machine to find it running.
		"paced-long": {Events: pieces, Delay: 5 * time.Millisecond},
		"wait":       {Events: []chatstreamtest.Event{chatstreamtest.Content("start "), chatstreamtest.Pause(300 * time.Millisecond), chatstreamtest.Content("done")}},
		"tool-open": {Events: []chatstreamtest.Event{
			{Kind: chatstreamtest.KindContent, Text: "x"},
			chatstreamtest.Pause(30 * time.Second),
		}},
	}
}

// env is a test server with the chat routes mounted.
type env struct {
	*apitest.Server
	h      *chatstream.Handler
	client *chatstream.Client
}

type envOpts struct {
	agent chatstream.Agent
	opts  []chatstream.Option
	cfg   func(*operator.Config)
	// store, if set, opens the server's store instead of testdb.Open
	// (two replicas open one database).
	store func(t testing.TB, backend string) store.Store
}

func newEnv(t testing.TB, tg apitest.Target, eo envOpts) *env {
	t.Helper()
	if eo.agent == nil {
		eo.agent = testScripts()
	}
	var h *chatstream.Handler
	aopts := []apitest.Option{apitest.WithRoutes(func(s *apitest.Server) []apitest.Route {
		h = chatstream.NewHandler(s.Store, eo.agent, append([]chatstream.Option{chatstream.WithClock(s.Now)}, eo.opts...)...)
		var rs []apitest.Route
		for _, r := range h.Routes() {
			rs = append(rs, apitest.Route(r))
		}
		return rs
	})}
	if eo.cfg != nil {
		aopts = append(aopts, apitest.WithConfig(eo.cfg))
	}
	if eo.store != nil {
		aopts = append(aopts, apitest.WithStore(eo.store))
	}
	s := apitest.New(t, tg, aopts...)
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("Handler.Close: %v", err)
		}
	})
	return &env{Server: s, h: h, client: chatstream.NewClient(s.URL, chatstream.WithAPIKey(apitest.AdminKey), chatstream.WithHTTPClient(s.Client()))}
}

func ext(id string) *chatstream.SessionSettings {
	return &chatstream.SessionSettings{ExternalID: id}
}

// collect reads a whole stream.
func collect(t testing.TB, c *chatstream.Client, req chatstream.Request) []chatstream.Message {
	t.Helper()
	msgs, err := collectErr(t.Context(), c, req)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	return msgs
}

func collectErr(ctx context.Context, c *chatstream.Client, req chatstream.Request) ([]chatstream.Message, error) {
	var out []chatstream.Message
	for m, err := range c.Stream(ctx, acct, agentID, req) {
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
	return out, nil
}

func conv(msgs []chatstream.Message) *chatstream.Conversation {
	var c chatstream.Conversation
	for _, m := range msgs {
		c.Add(m)
	}
	return &c
}

func last(msgs []chatstream.Message) chatstream.Message {
	if len(msgs) == 0 {
		return chatstream.Message{}
	}
	return msgs[len(msgs)-1]
}

// apiStatus returns the status of an *httperr.Error, or 0.
func apiStatus(err error) int {
	if e, ok := errors.AsType[*httperr.Error](err); ok {
		return e.Status
	}
	return 0
}

// rawLines posts body to the stream endpoint with key and returns the
// response and its lines as generic JSON objects.
func rawLines(t testing.TB, e *env, path, key string, body any) (*http.Response, []map[string]any) {
	t.Helper()
	req := e.Request(t, http.MethodPost, path, key, body)
	resp, err := e.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []map[string]any
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q is not a JSON object: %v", sc.Bytes(), err)
		}
		out = append(out, m)
	}
	return resp, out
}

func streamPath(account, agent string) string {
	return "/api/v1/public/" + account + "/agents/" + agent + "/chat/stream-chat-state"
}

func abortPath(account, agent string) string {
	return "/api/v1/public/" + account + "/agents/" + agent + "/chat/abort"
}

// streamUntil starts a stream in the background and returns once a line
// satisfying cond arrived; the returned function waits for the end of the
// stream and returns every line with the time the stream ended.
func streamUntil(t testing.TB, ctx context.Context, c *chatstream.Client, req chatstream.Request, cond func(chatstream.Message) bool) (got []chatstream.Message, wait func() ([]chatstream.Message, time.Time, error)) {
	t.Helper()
	var (
		mu   sync.Mutex
		msgs []chatstream.Message
		end  time.Time
		serr error
	)
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		signalled := false
		for m, err := range c.Stream(ctx, acct, agentID, req) {
			if err != nil {
				serr = err
				break
			}
			mu.Lock()
			msgs = append(msgs, m)
			mu.Unlock()
			if !signalled && cond(m) {
				signalled = true
				close(ready)
			}
		}
		end = time.Now()
		if !signalled {
			close(ready)
		}
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("stream: condition not met within 10s")
	}
	mu.Lock()
	got = append(got, msgs...)
	mu.Unlock()
	return got, func() ([]chatstream.Message, time.Time, error) {
		<-done
		return msgs, end, serr
	}
}

func isContent(m chatstream.Message) bool {
	return m.Role == chatstream.RoleAssistant && m.IsDelta && m.Content != ""
}

func mustJSON(t testing.TB, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%q is not JSON: %v", s, err)
	}
	return v
}

func jsonOf(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
