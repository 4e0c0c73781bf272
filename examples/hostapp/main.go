// Command hostapp is the README's walkthrough "add embedkit to your
// server" as a program: an existing gorilla/mux application that mounts
// both embedkit APIs under the prefix /analytics, sets its tenant up with
// the operator API, serves an embed page of its own behind the
// embed-session middleware, and answers chat with its own Agent.
//
// It imports only embedkit's exported packages, so it can be copied into
// another module unchanged. Run it with:
//
//	go run ./examples/hostapp
//
// It prints the API key it created (once) and the curl commands to try.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"html/template"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gorilla/mux"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/chatpage"
	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/memstore"
	"github.com/embedkit/embedkit/store/operator"
)

// Prefix is where the host mounts embedkit.
const Prefix = "/analytics"

// App is the host application with embedkit mounted.
type App struct {
	Handler http.Handler
	// APIKey is the admin key created at the first start (on a store that
	// had no key for the account), for the host's backend; "" later.
	APIKey string

	chat   *chatstream.Handler
	reaper *chatstream.Reaper
	st     store.Store
}

// helloAgent is the host's own analytics agent: a tool call, then the
// answer in pieces.
var helloAgent = chatstream.AgentFunc(func(ctx context.Context, t chatstream.Turn, e chatstream.Emitter) error {
	call, err := e.ToolCall("svcMeta", map[string]string{"searchQuery": t.Input})
	if err != nil {
		return err
	}
	if err := call.Result(map[string]any{"cubes": []string{"orders"}}); err != nil {
		return err
	}
	for _, piece := range strings.Fields("You asked: " + t.Input) {
		if err := e.Content(piece + " "); err != nil {
			return err
		}
	}
	return nil
})

// New builds the host application on st: the host's own routes plus
// embedkit under [Prefix].
func New(ctx context.Context, st store.Store, log *slog.Logger) (*App, error) {
	// 1. The tenant: an account with a deployment, an agent and an
	// attribute definition, and an admin API key for the host's backend.
	op := operator.New(st)
	if _, err := op.SaveAccount(ctx, operator.Account{
		Name:           "shop",
		Plan:           store.PlanEnterprise, // chat needs premium or enterprise
		Deployments:    []operator.Deployment{{ID: 1, Name: "production"}},
		Agents:         []operator.Agent{{ID: "assistant", DeploymentID: 1}},
		UserAttributes: []operator.Attribute{{Name: "region", Type: store.TypeString}},
	}); err != nil {
		return nil, err
	}
	// A new key at the first start only: CreateAPIKey makes a new valid
	// key at every call.
	var key string
	keys, err := op.APIKeys(ctx, "shop")
	if err == nil && len(keys) == 0 {
		key, _, err = op.CreateAPIKey(ctx, "shop", operator.APIKey{Admin: true, Name: "backend"})
	}
	if err != nil {
		return nil, err
	}

	// 2. The handlers.
	embed := embedsession.NewHandler(st, embedsession.WithLogger(log))
	chat := chatstream.NewHandler(st, helloAgent, chatstream.WithLogger(log))
	reaper := chatstream.NewReaper(st, time.Minute, chatstream.WithLogger(log))
	reaper.Start()

	// 3. The host's router with its own routes, as it was; embedkit's
	// routes on a router of their own that matches the encoded path (an
	// externalId may hold "/" or be a dot segment), and a ServeMux in
	// front that sends the prefix to it.
	host := mux.NewRouter()
	host.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "the host's own home page")
	})
	host.HandleFunc("/products/{name}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "product %s\n", mux.Vars(r)["name"]) // decoded, as the host's routes always had them
	})
	r := mux.NewRouter().UseEncodedPath()
	front := http.NewServeMux()
	front.Handle(Prefix+"/", r)
	front.Handle("/", host)
	api := r.PathPrefix(Prefix).Subrouter()
	api.Use(middleware.EncodedPathValues(mux.Vars)) // handlers read r.PathValue
	for _, rt := range embed.Routes() {
		api.Handle(rt.Pattern, rt.Handler).Methods(rt.Method)
	}
	for _, rt := range chat.Routes() {
		api.Handle(rt.Pattern, rt.Handler).Methods(rt.Method)
	}

	// 4. An embed page of the host's own, behind the embed-session
	// middleware: ?sessionId= on first use, then its cookie (scoped to the
	// prefix) or a Bearer token.
	session := middleware.Session(st, middleware.WithCookiePath(Prefix), middleware.WithLogger(log))
	api.Handle("/embed/hello", session(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		es, _ := middleware.EmbedSessionFromContext(r.Context())
		attrs, _, err := es.AttributesAndGroups(r.Context(), st)
		if err != nil {
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = helloPage.Execute(w, map[string]any{"Name": es.User.DisplayName, "Attributes": attrs})
	}))).Methods(http.MethodGet)

	// 5. embedkit's chat page for the embed iframe: it exchanges the
	// ?sessionId= itself and chats with the session token (no API key in
	// the browser). The APIs it calls are under the prefix.
	page := chatpage.New(st, chatpage.FixedAgent("assistant"),
		chatpage.WithPath(Prefix+"/embed/chat"),
		chatpage.WithChatBaseURL(Prefix),
		chatpage.WithTitle("Shop analytics"),
		// The origins of the pages that put the chat in an iframe: the
		// host's own, and its product on another origin.
		chatpage.WithFrameAncestors("'self'", "https://app.example.com"),
		chatpage.WithLogger(log))
	for _, rt := range page.Routes() {
		r.Handle(rt.Pattern, rt.Handler).Methods(rt.Method)
	}

	return &App{Handler: http.MaxBytesHandler(front, 1<<20), APIKey: key, chat: chat, reaper: reaper, st: st}, nil
}

var helloPage = template.Must(template.New("hello").Parse(
	`<!doctype html><title>Hello</title><p>Hello, {{.Name}}</p><ul>{{range .Attributes}}<li>{{.Name}}: {{printf "%s" .Value}}</li>{{end}}</ul>`))

// Shutdown ends the running chat turns and stops the reaper.
func (a *App) Shutdown(ctx context.Context) error {
	return errors.Join(a.chat.Shutdown(ctx), a.reaper.Close())
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "address to listen on")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	st := memstore.New()
	defer st.Close()
	app, err := New(ctx, st, logger)
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: app.Handler, ReadHeaderTimeout: 10 * time.Second}
	base := "http://" + ln.Addr().String() + Prefix
	fmt.Printf("host app on http://%s, embedkit under %s\n", ln.Addr(), Prefix)
	if app.APIKey != "" {
		fmt.Printf("admin API key (shown once): %s\n", app.APIKey)
		fmt.Printf("try: curl -s -X POST %s/api/v1/embed/generate-session -H 'Authorization: Api-Key %s' -d '{\"deploymentId\":1,\"externalId\":\"jane\"}'\n", base, app.APIKey)
	}
	go func() { <-ctx.Done(); _ = srv.Shutdown(context.Background()) }()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := app.Shutdown(sctx); err != nil {
		log.Print(err)
	}
}
