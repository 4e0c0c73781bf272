package chatstream_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gorilla/mux"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore/sqlite"
)

// revenueAgent is an Agent written as a function: one tool call, then the
// answer in pieces.
var revenueAgent = chatstream.AgentFunc(func(ctx context.Context, t chatstream.Turn, e chatstream.Emitter) error {
	_ = e.Thinking("The user asks about revenue; search the model first.")
	call, err := e.ToolCall("svcMeta", map[string]string{"searchQuery": t.Input})
	if err != nil {
		return err
	}
	if err := call.Result(map[string]any{"searchQuery": t.Input, "cubes": []any{}}); err != nil {
		return err
	}
	for _, piece := range []string{"Revenue ", "grew ", "12% ", "last month."} {
		if err := e.Content(piece); err != nil {
			return err // the turn is over (aborted, timed out, shut down)
		}
	}
	return nil
})

// seed creates an account "acme" with API key "sk-acme" and agent "7".
func seed(ctx context.Context, st store.Store) error {
	acct, err := st.SaveAccount(ctx, store.Account{Name: "acme", Plan: store.PlanEnterprise})
	if err != nil {
		return err
	}
	h := sha256.Sum256([]byte("sk-acme"))
	if err := st.SaveAPIKey(ctx, store.APIKey{Hash: h[:], AccountID: acct.ID}); err != nil {
		return err
	}
	if err := st.SaveDeployment(ctx, store.Deployment{AccountID: acct.ID, ID: 1, Name: "production"}); err != nil {
		return err
	}
	return st.SaveAgent(ctx, store.Agent{AccountID: acct.ID, ID: "7", DeploymentID: 1})
}

// Example mounts the chat routes on an http.ServeMux, streams one turn with
// the Go client and rebuilds the answer with a Conversation.
func Example() {
	ctx := context.Background()
	st, err := sqlite.Open(":memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	if err := seed(ctx, st); err != nil {
		log.Fatal(err)
	}

	h := chatstream.NewHandler(st, revenueAgent, chatstream.WithTurnTimeout(time.Minute))
	defer h.Close() // or h.Shutdown(ctx) from the server's graceful stop
	reaper := chatstream.NewReaper(st, time.Minute)
	reaper.Start()
	defer reaper.Close()

	sm := http.NewServeMux()
	for _, rt := range h.Routes() {
		sm.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}
	srv := httptest.NewServer(sm)
	defer srv.Close()

	client := chatstream.NewClient(srv.URL, chatstream.WithAPIKey("sk-acme"))
	var conv chatstream.Conversation
	req := chatstream.Request{
		Input:           "How is revenue?",
		SessionSettings: &chatstream.SessionSettings{ExternalID: "jane"},
	}
	for m, err := range client.Stream(ctx, "acme", "7", req) {
		if err != nil {
			log.Fatal(err)
		}
		conv.Add(m)
	}
	answer, _ := conv.FinalAnswer()
	fmt.Println(answer.Content)
	fmt.Println(len(conv.State().Messages), "messages in the history")
	// Output:
	// Revenue grew 12% last month.
	// 3 messages in the history
}

// Example_gorilla mounts the chat routes on a gorilla/mux router; the
// PathValues middleware copies mux.Vars into r.PathValue.
func Example_gorilla() {
	st, err := sqlite.Open("embed.db")
	if err != nil {
		log.Fatal(err)
	}
	h := chatstream.NewHandler(st, revenueAgent, chatstream.WithDevelopment(true))
	r := mux.NewRouter()
	r.Use(middleware.PathValues(mux.Vars))
	for _, rt := range h.Routes() {
		r.Handle(rt.Pattern, rt.Handler).Methods(rt.Method)
	}
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: r}
	// On SIGTERM: h.Shutdown(ctx) first (running turns finish until ctx
	// ends, the rest are aborted, so their streams end), then
	// srv.Shutdown(ctx), which waits for open requests.
	log.Fatal(srv.ListenAndServe())
}

// ExampleConversation rebuilds messages from streamed lines.
func ExampleConversation() {
	var c chatstream.Conversation
	yes := false
	for _, m := range []chatstream.Message{
		{ID: chatstream.CutoffID, Role: "assistant", State: &chatstream.State{ChatID: "c1"}},
		{ID: "u1", Role: "user", Content: "Hi", Sort: 1},
		{ID: "a1", Role: "assistant", IsDelta: true, IsInProcess: true, GraphPath: []string{"agent"}, IsStructuredResponse: &yes, Sort: 2},
		{ID: "a1", Role: "assistant", Content: "Hel", IsDelta: true, IsInProcess: true, Sort: 3},
		{ID: "a1", Role: "assistant", Content: "lo", IsDelta: true, IsInProcess: true, Sort: 4},
		{ID: "a1", Role: "assistant", Content: "Hello", GraphPath: []string{"final", "agent"}, Sort: 5},
	} {
		c.Add(m)
	}
	for _, m := range c.History() {
		fmt.Printf("%s: %s\n", m.Role, m.Content)
	}
	a, _ := c.FinalAnswer()
	fmt.Println(c.ChatID(), a.Content)
	// Output:
	// user: Hi
	// assistant: Hello
	// c1 Hello
}
