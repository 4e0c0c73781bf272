package llmagent_test

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/llmagent"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/memstore"
)

// chatServer mounts a real chat handler with agent over a memstore seeded
// with account "acme" (API key "sk-acme"), agent "7".
func chatServer(t testing.TB, agent chatstream.Agent, opts ...chatstream.Option) *chatstream.Client {
	t.Helper()
	ctx := context.Background()
	st := memstore.New()
	acct, err := st.SaveAccount(ctx, store.Account{Name: "acme", Plan: store.PlanEnterprise})
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte("sk-acme"))
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(st.SaveAPIKey(ctx, store.APIKey{Hash: h[:], AccountID: acct.ID}))
	must(st.SaveDeployment(ctx, store.Deployment{AccountID: acct.ID, ID: 1, Name: "production"}))
	must(st.SaveAgent(ctx, store.Agent{AccountID: acct.ID, ID: "7", DeploymentID: 1}))
	ch := chatstream.NewHandler(st, agent, opts...)
	sm := http.NewServeMux()
	for _, rt := range ch.Routes() {
		sm.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}
	srv := httptest.NewServer(sm)
	t.Cleanup(func() {
		srv.Close()
		ch.Close()
		st.Close()
	})
	return chatstream.NewClient(srv.URL, chatstream.WithAPIKey("sk-acme"))
}

func stream(t testing.TB, c *chatstream.Client, req chatstream.Request) []chatstream.Message {
	t.Helper()
	if req.SessionSettings == nil {
		req.SessionSettings = &chatstream.SessionSettings{ExternalID: "jane"}
	}
	var lines []chatstream.Message
	for m, err := range c.Stream(context.Background(), "acme", "7", req) {
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, m)
	}
	return lines
}

// TestThroughChatHandler runs two turns of one thread through a real chat
// handler and checks the wire lines and what the model got.
func TestThroughChatHandler(t *testing.T) {
	f := newFake(t,
		reply{chunks: []string{role(),
			reasoning("reasoning_content", "Need the SQL tool."),
			text("Let me check. "),
			toolStart(0, "call_q", "svcSqlApi", `{"sqlQuery":`),
			toolArgs(0, `"SELECT 42"}`),
			finish("tool_calls"), usage(50, 10)}},
		say("Revenue ", "is 42."),
		say("Still 42."))
	sql := &fakeTool{name: "svcSqlApi", result: map[string]any{"data": [][]any{{42}}, "totalRows": 1}}
	a, _ := newAgent(t, f, []llmagent.Tool{sql})
	c := chatServer(t, a, chatstream.WithDevelopment(true))

	lines := stream(t, c, chatstream.Request{Input: "What is revenue?"})
	var conv chatstream.Conversation
	var deltas []string
	var thinking string
	var tool *chatstream.Message
	for _, m := range lines {
		conv.Add(m)
		if m.IsDelta && m.Content != "" {
			deltas = append(deltas, m.Content)
		}
		if m.Thinking != nil && m.IsDelta {
			thinking += *m.Thinking
		}
		if m.ToolCall != nil && m.ToolCall.Result != nil {
			tool = &m
		}
	}
	if got := strings.Join(deltas, "|"); got != "Let me check. |Revenue |is 42." {
		t.Errorf("content deltas = %q", got)
	}
	if thinking != "Need the SQL tool." {
		t.Errorf("thinking = %q", thinking)
	}
	if tool == nil || tool.ToolCall.Name != "svcSqlApi" || tool.ToolCall.Input != `{"sqlQuery":"SELECT 42"}` ||
		*tool.ToolCall.Result != `{"data":[[42]],"totalRows":1}` || tool.IsInProcess {
		t.Errorf("tool call line = %+v", tool)
	}
	final, ok := conv.FinalAnswer()
	if !ok || final.Content != "Let me check. Revenue is 42." {
		t.Errorf("final = %q", final.Content)
	}
	st := conv.State()
	if st == nil || st.Error != "" || st.Aborted || len(st.Messages) != 3 {
		t.Fatalf("state = %+v", st)
	}

	// The second turn sends the thread's history to the model.
	stream(t, c, chatstream.Request{Input: "And now?", ChatID: conv.ChatID()})
	ms := messages(t, f, 2)
	if roles(ms) != "system,user,assistant,tool,assistant,user" {
		t.Fatalf("second turn roles = %s", roles(ms))
	}
	if ms[1]["content"] != "What is revenue?" || ms[4]["content"] != "Let me check. Revenue is 42." || ms[5]["content"] != "And now?" {
		t.Errorf("second turn messages = %v", ms)
	}
	if ms[3]["content"] != `{"data":[[42]],"totalRows":1}` {
		t.Errorf("tool result in history = %v", ms[3]["content"])
	}
}

// TestModelFailureBecomesStateError checks that a failed model request
// ends the turn with state.error and the standard final message.
func TestModelFailureBecomesStateError(t *testing.T) {
	f := newFake(t, reply{status: 500, body: `{"error":{"message":"internal"}}`})
	a, _ := newAgent(t, f, nil)
	c := chatServer(t, a)
	var conv chatstream.Conversation
	for _, m := range stream(t, c, chatstream.Request{Input: "hi"}) {
		conv.Add(m)
	}
	st := conv.State()
	if st == nil || st.Error != "the answer could not be produced" {
		t.Errorf("state = %+v", st)
	}
	// Exactly the handler's standard texts: nothing of the model's failure.
	if final, _ := conv.FinalAnswer(); final.Content != "Sorry, the answer could not be produced. Please try again." {
		t.Errorf("final = %q", final.Content)
	}
	if n := len(f.reqs()); n != 2 {
		t.Errorf("%d model requests, want 2", n)
	}
}

// TestAbortThroughHandler aborts a turn with the abort endpoint while the
// model streams: the model request is cancelled and the partial answer kept.
func TestAbortThroughHandler(t *testing.T) {
	f := newFake(t, reply{chunks: []string{role(), text("partial ")}, hang: true})
	a, _ := newAgent(t, f, nil)
	c := chatServer(t, a)
	var conv chatstream.Conversation
	for m, err := range c.Stream(context.Background(), "acme", "7", chatstream.Request{Input: "hi", SessionSettings: &chatstream.SessionSettings{ExternalID: "jane"}}) {
		if err != nil {
			t.Fatal(err)
		}
		conv.Add(m)
		if m.IsDelta && m.Content == "partial " {
			if err := c.Abort(context.Background(), "acme", "7", conv.ChatID(), chatstream.SessionSettings{ExternalID: "jane"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case <-f.cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the model request was not cancelled")
	}
	st := conv.State()
	if st == nil || !st.Aborted {
		t.Errorf("state = %+v", st)
	}
	if final, _ := conv.FinalAnswer(); final.Content != "partial " {
		t.Errorf("final = %q", final.Content)
	}
}
