package chatstream_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gorilla/mux"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore/sqlite"
	"github.com/embedkit/embedkit/store/operator"
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

// seed sets up the account "acme" with the API key "sk-acme" and agent "7"
// through the operator API (see docs/operator.md).
func seed(ctx context.Context, st store.Store) error {
	_, err := operator.New(st).SaveAccount(ctx, operator.Account{
		Name:        "acme",
		Plan:        store.PlanEnterprise, // chat needs premium or enterprise
		APIKeys:     []operator.APIKey{{Key: "sk-acme"}},
		Deployments: []operator.Deployment{{ID: 1, Name: "production"}},
		Agents:      []operator.Agent{{ID: "7", DeploymentID: 1}},
	})
	return err
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

// Example_gorilla mounts the chat routes on gorilla/mux as the README's
// step 4 does: on a router of embedkit's own that matches the encoded path
// (a path parameter may hold an escaped "/"), with
// middleware.EncodedPathValues copying mux.Vars, decoded, into
// r.PathValue, behind a ServeMux that sends the prefix to it. The host's own router is left as it was, so its routes keep
// their decoded mux.Vars.
func Example_gorilla() {
	st, err := sqlite.Open("embed.db")
	if err != nil {
		log.Fatal(err)
	}
	h := chatstream.NewHandler(st, revenueAgent, chatstream.WithDevelopment(true))
	host := mux.NewRouter()               // the host's router, with its own routes
	r := mux.NewRouter().UseEncodedPath() // embedkit's routes only
	front := http.NewServeMux()
	front.Handle("/analytics/", r)
	front.Handle("/", host)
	api := r.PathPrefix("/analytics").Subrouter()
	api.Use(middleware.EncodedPathValues(mux.Vars))
	for _, rt := range h.Routes() {
		api.Handle(rt.Pattern, rt.Handler).Methods(rt.Method)
	}
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: front}
	// On SIGTERM: h.Shutdown(ctx) first (running turns finish until ctx
	// ends, the rest are aborted, so their streams end), then
	// srv.Shutdown(ctx), which waits for open requests.
	log.Fatal(srv.ListenAndServe())
}

// ExampleHandler_RunningTurns stops a server gracefully: the first signal
// says what the stop waits for and lets running turns finish, a second one
// aborts them at once.
func ExampleHandler_RunningTurns() {
	st, err := sqlite.Open("embed.db")
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	h := chatstream.NewHandler(st, revenueAgent)
	sm := http.NewServeMux()
	for _, rt := range h.Routes() {
		sm.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: sm}
	go func() {
		if err := srv.ListenAndServe(); err != http.ErrServerClosed {
			log.Fatal(err)
		}
	}()

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	<-sigs
	if n := h.RunningTurns(); n > 0 {
		log.Printf("waiting up to 30s for %d running chat turns; press Ctrl-C again to stop now", n)
	}
	turnsCtx, stopTurns := context.WithTimeout(context.Background(), 30*time.Second)
	defer stopTurns()
	go func() {
		<-sigs
		stopTurns() // the remaining turns are aborted, their streams end
	}()
	chatDone := make(chan error, 1)
	go func() { chatDone <- h.Shutdown(turnsCtx) }()
	httpCtx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if err := errors.Join(srv.Shutdown(httpCtx), <-chatDone); err != nil {
		log.Print(err)
	}
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
