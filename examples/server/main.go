// Command server is the embedkit example server: every endpoint of the embed
// sessions and chat stream specifications on a gorilla/mux router, backed by
// SQLite (default) or PostgreSQL, with the demo analytics agent.
//
//	go run ./examples/server                    # SQLite file embed.db, demo account
//	go run ./examples/server -db :memory: -dev  # in memory, thinking streamed
//	go run ./examples/server -db 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
//
// With a PostgreSQL DSN several processes can serve one database behind a
// load balancer, with no sticky sessions: chat turns are shared through
// pgcluster (an abort or a rejoin reaches the turn on whichever process runs
// it). SQLite is single-process.
//
// Flags and their environment variables:
//
//	-addr         EMBED_ADDR         listen address (127.0.0.1:8080)
//	-db           EMBED_DB           SQLite path, :memory:, or PostgreSQL DSN (embed.db)
//	-config       EMBED_CONFIG       bootstrap JSON file (built-in demo)
//	-dev          EMBED_DEV          development mode: thinking is streamed (false)
//	-agent-delay  EMBED_AGENT_DELAY  pause of the demo agent between pieces (15ms)
//	-vega-dir     EMBED_VEGA_DIR     node_modules folder to serve the chat page's chart libraries from (CDN)
//	-metrics      EMBED_METRICS      serve Prometheus metrics at GET /metrics (false)
//	-agent        EMBED_AGENT        chat agent: demo, or llm (demo)
//	-llm-model    EMBED_LLM_MODEL    model name for -agent llm (none)
//	-data-row-limit EMBED_DATA_ROW_LIMIT rows one data query returns at most (100000)
//
// With -agent llm a language model answers through the demo data set's
// tools; its OpenAI-compatible endpoint is OPENAI_BASE_URL and its key
// OPENAI_API_KEY (see docs/llm-agent.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorilla/mux"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/pgcluster"
	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/middleware/httperr"
	"github.com/embedkit/embedkit/store/operator"
)

func main() {
	// The first SIGINT or SIGTERM stops gracefully, a second one at once;
	// a third gets the default action (the process ends).
	stop, stopNow := stopSignals()
	err := run(stop, stopNow, os.Args[1:], os.Stdout, os.Stderr)
	var usage usageError
	switch {
	case errors.Is(err, flag.ErrHelp): // -h: the usage is printed
	case errors.As(err, &usage):
		os.Exit(2) // the flag package printed the error with the usage
	case err != nil:
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

// usageError is an error of the command line that the flag package has
// printed, with the usage.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// stopSignals returns a context that ends at the first SIGINT or SIGTERM and
// one that ends at the second; then the signals get their default action
// again.
func stopSignals() (stop, stopNow context.Context) {
	stop, first := context.WithCancel(context.Background())
	stopNow, second := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sigs
		first()
		<-sigs
		signal.Stop(sigs)
		second()
	}()
	return stop, stopNow
}

type options struct {
	addr, db, config string
	dev, metrics     bool
	agentDelay       time.Duration
	vegaDir          string
	dataRowLimit     int
	// agent is demo or llm; llmModel, llmBaseURL and llmAPIKey configure llm.
	agent, llmModel, llmBaseURL, llmAPIKey string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", envOr("EMBED_ADDR", "127.0.0.1:8080"), "listen address (env EMBED_ADDR)")
	fs.StringVar(&o.db, "db", envOr("EMBED_DB", "embed.db"), "SQLite file path, :memory:, or a PostgreSQL DSN: postgres://... or key=value (env EMBED_DB)")
	fs.StringVar(&o.config, "config", envOr("EMBED_CONFIG", ""), "bootstrap JSON file; empty for the built-in demo (env EMBED_CONFIG)")
	dev, err := strconv.ParseBool(envOr("EMBED_DEV", "false"))
	if err != nil {
		return o, fmt.Errorf("EMBED_DEV: %w", err)
	}
	fs.BoolVar(&o.dev, "dev", dev, "development mode: thinking is streamed (env EMBED_DEV)")
	delay, err := time.ParseDuration(envOr("EMBED_AGENT_DELAY", "15ms"))
	if err != nil {
		return o, fmt.Errorf("EMBED_AGENT_DELAY: %w", err)
	}
	fs.DurationVar(&o.agentDelay, "agent-delay", delay, "pause of the demo agent between streamed pieces (env EMBED_AGENT_DELAY)")
	fs.StringVar(&o.vegaDir, "vega-dir", envOr("EMBED_VEGA_DIR", ""), "node_modules folder with the pinned vega packages; empty loads them from the CDN (env EMBED_VEGA_DIR)")
	rows, err := strconv.Atoi(envOr("EMBED_DATA_ROW_LIMIT", strconv.Itoa(chatstream.DefaultDataRowLimit)))
	if err != nil {
		return o, fmt.Errorf("EMBED_DATA_ROW_LIMIT: %w", err)
	}
	fs.IntVar(&o.dataRowLimit, "data-row-limit", rows, "rows one request of the data query API (and Download CSV) returns at most (env EMBED_DATA_ROW_LIMIT)")
	metrics, err := strconv.ParseBool(envOr("EMBED_METRICS", "false"))
	if err != nil {
		return o, fmt.Errorf("EMBED_METRICS: %w", err)
	}
	fs.BoolVar(&o.metrics, "metrics", metrics, "serve Prometheus metrics at GET /metrics on the same address (env EMBED_METRICS)")
	fs.StringVar(&o.agent, "agent", envOr("EMBED_AGENT", agentDemo), "chat agent: demo, or llm for a language model at OPENAI_BASE_URL (env EMBED_AGENT)")
	fs.StringVar(&o.llmModel, "llm-model", envOr("EMBED_LLM_MODEL", ""), "model name for -agent llm (env EMBED_LLM_MODEL)")
	o.llmBaseURL, o.llmAPIKey = llmEnv()
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage of server:")
		fs.PrintDefaults()
		fmt.Fprintln(fs.Output(), `
Environment, besides the flags' own:
  OPENAI_BASE_URL         the model endpoint of -agent llm (an OpenAI-compatible API)
  OPENAI_API_KEY          its API key (none: requests carry no Authorization)
  EMBED_ANALYTICS_SCHEMA  on PostgreSQL, the schema of the analytics views, whose roles
                          are named after it (default embedkit_analytics)
  PGPASSWORD              the PostgreSQL password, when the -db DSN has none`)
	}
	if err := fs.Parse(args); err != nil {
		return o, usageError{err}
	}
	if fs.NArg() > 0 { // "-dev true" ends the flags at "true": the ones after it would be ignored
		return o, fmt.Errorf("unexpected argument %q: the server takes flags only (a boolean flag is -name=false, not -name false)", fs.Arg(0))
	}
	if o.agentDelay < 0 {
		return o, fmt.Errorf("-agent-delay (EMBED_AGENT_DELAY) must not be negative, got %v", o.agentDelay)
	}
	if o.dataRowLimit < 1 {
		return o, fmt.Errorf("-data-row-limit (EMBED_DATA_ROW_LIMIT) must be positive, got %d", o.dataRowLimit)
	}
	return o, o.checkAgent()
}

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

// run serves until ctx ends (the first SIGINT or SIGTERM in main), then
// shuts down gracefully: running chat turns get turnGrace to finish, unless
// now ends (the second signal), which aborts them at once.
func run(ctx, now context.Context, args []string, stdout, stderr io.Writer) (err error) {
	// No secret of a flag, the environment or the config reaches the
	// output, nor the error returned (see secrets.go).
	sc := &scrubber{}
	sc.add(envSecrets()...)
	// The demo's lines are constants and the listen address, which hold
	// no secret: written as they are, they stay whole when a short secret
	// is also a word of theirs ("admin").
	plain := stdout
	stdout, stderr = sc.writer(stdout), sc.writer(stderr)
	defer func() { err = sc.scrubErr(err) }()

	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	sc.add(optionSecrets(o)...)
	log := slog.New(slog.NewTextHandler(stderr, nil))

	cfg := operator.DemoConfig()
	if o.config != "" {
		if cfg, err = operator.LoadConfig(o.config); err != nil {
			return err
		}
		sc.add(configSecrets(cfg)...)
	}

	// The address first: a start that fails changes no database.
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	defer ln.Close() // on an error below; Shutdown closes it otherwise

	st, err := openStore(o.db)
	if err != nil {
		return fmt.Errorf("open store %s: %w", dbLabel(o.db), err)
	}
	defer st.Close()
	if err := operator.New(st).Apply(ctx, cfg); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}

	agent, closeAgent, err := newAgent(o, log)
	if err != nil {
		return err
	}
	defer closeAgent()

	// With -metrics, the handlers' metrics go to a Prometheus exporter (see
	// metrics.go).
	metrics, err := startMetrics(o.metrics)
	if err != nil {
		return err
	}
	defer metrics.close()

	// Accounts, deployments and agents come from the bootstrap config and
	// change only at a restart, so caching them for a few seconds is safe
	// and saves store reads on every request. A key revoked through
	// store/operator is refused at once by this process, and by the other
	// replicas once their key caches expire (at most 5 s). An attribute or
	// group definition deleted through the admin API may still be used by
	// chat turns for up to 5 s; the values stored meanwhile are ignored.
	embed := embedsession.NewHandler(st, embedsession.WithLogger(log), embedsession.WithCacheTTL(5*time.Second))
	chatOpts := []chatstream.Option{chatstream.WithDevelopment(o.dev), chatstream.WithLogger(log), chatstream.WithKeyCache(5 * time.Second),
		chatstream.WithDataRowLimit(o.dataRowLimit)}
	// On PostgreSQL, running chat turns are shared with the other
	// processes on the database; SQLite stays single-process.
	var cluster *pgcluster.Cluster
	if isPostgres(o.db) {
		if cluster, err = pgcluster.New(ctx, o.db, pgcluster.WithLogger(log)); err != nil {
			return fmt.Errorf("chat cluster: %w", err)
		}
		// Closed after chat.Shutdown below, which releases the claims.
		defer cluster.Close()
		chatOpts = append(chatOpts, chatstream.WithCluster(cluster))
	}
	chat := chatstream.NewHandler(st, agent, chatOpts...)
	// The janitor: deletes expired ephemeral users, session ids, tokens and
	// quota counters in the background.
	reaper := chatstream.NewReaper(st, 0, chatstream.WithLogger(log))
	reaper.Start()
	defer reaper.Close() // on an error below, before the store closes; at the end, again (it does nothing)

	r := mux.NewRouter().UseEncodedPath() // an externalId may hold "/" or be a dot segment
	// Unmatched paths and methods answer JSON errors like every endpoint.
	notFound := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httperr.Write(w, r, nil, httperr.Errorf(http.StatusNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	r.NotFoundHandler = notFound
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Allow", strings.Join(allowedMethods(r, req), ", "))
		httperr.Write(w, req, nil, httperr.Errorf(http.StatusMethodNotAllowed, "method %s not allowed on %s", req.Method, req.URL.Path))
	})
	r.Use(middleware.EncodedPathValues(mux.Vars))
	for _, rt := range embed.Routes() {
		r.Handle(rt.Pattern, rt.Handler).Methods(methods(rt.Method)...)
	}
	for _, rt := range chat.Routes() {
		r.Handle(rt.Pattern, rt.Handler).Methods(methods(rt.Method)...)
	}
	metrics.mount(r)
	pages := &embedPages{st: st}
	session := middleware.Session(st)
	r.Handle("/embed/whoami", session(http.HandlerFunc(pages.whoami))).Methods(methods(http.MethodGet)...)
	r.Handle("/embed/profile", session(http.HandlerFunc(pages.profile))).Methods(methods(http.MethodGet)...)
	if err := mountChatPage(r, st, cfg, o.config == "", o.vegaDir, log); err != nil {
		return fmt.Errorf("chat page: %w", err)
	}
	r.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store") // a cached "ok" would hide a server that is down
		_, _ = io.WriteString(w, `{"status":"ok"}`+"\n")
	}).Methods(http.MethodGet, http.MethodHead)

	srv := &http.Server{
		Handler:           http.MaxBytesHandler(cleanPathsOnly(r, notFound), 1<<20),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		// Chat streams last up to the turn deadline (5 minutes).
		WriteTimeout:   6 * time.Minute,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	fmt.Fprintf(stdout, "embedkit example server listening on http://%s (db %s)\n", ln.Addr(), dbLabel(o.db))
	if cluster != nil {
		fmt.Fprintf(stdout, "chat turns shared with the other replicas on this database (replica %s)\n", cluster.ReplicaID())
	}
	if o.config == "" {
		fmt.Fprintln(plain, "demo account \"acme\": admin API key sk-acme-admin, user API key sk-acme-user")
		fmt.Fprintln(plain, "try: curl -s -X POST http://"+ln.Addr().String()+"/api/v1/embed/generate-session -H 'Authorization: Api-Key sk-acme-admin' -H 'Content-Type: application/json' -d '{\"deploymentId\":1,\"externalId\":\"jane\"}'")
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	// Running turns may finish for turnGrace, then they are aborted, or
	// at once when now ends; their streams end, so the HTTP server can
	// drain: it gets 10 s more than the turns, so that streams ended at the
	// deadline are not counted as a failed shutdown.
	if n := chat.RunningTurns(); n > 0 {
		fmt.Fprintf(stdout, "shutting down: waiting up to %v for %s; press Ctrl-C again to stop now\n", turnGrace, plural(n, "running chat turn"))
	} else {
		fmt.Fprintln(stdout, "shutting down")
	}
	turnsCtx, cancelTurns := context.WithTimeout(context.Background(), turnGrace)
	defer cancelTurns()
	httpCtx, cancelHTTP := context.WithTimeout(context.Background(), turnGrace+10*time.Second)
	defer cancelHTTP()
	// The second signal aborts the turns (turnsCtx ends) and gives their
	// streams a moment to write their last lines before the connections
	// still open are cut.
	stopNow := context.AfterFunc(now, func() {
		if n := chat.RunningTurns(); n > 0 {
			fmt.Fprintf(stdout, "stopping now: aborting %s\n", plural(n, "running chat turn"))
		}
		cancelTurns()
		time.AfterFunc(2*time.Second, cancelHTTP)
	})
	defer stopNow()
	chatErr := make(chan error, 1)
	go func() { chatErr <- chat.Shutdown(turnsCtx) }()
	err = srv.Shutdown(httpCtx)
	if err != nil && now.Err() != nil {
		err = srv.Close()
	}
	err = errors.Join(err, <-chatErr, reaper.Close())
	if cluster != nil {
		err = errors.Join(err, cluster.Close())
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// turnGrace is how long a graceful stop lets running chat turns finish.
const turnGrace = 30 * time.Second

// plural returns "1 thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}

// isPostgres reports whether db is a PostgreSQL DSN (see openStore).
func isPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://") || pgKeyValue.MatchString(db)
}

// pgKeyValue matches a key=value PostgreSQL DSN, which may name no host
// (PGHOST, the default socket), by a keyword of libpq's (spaces around
// "=" allowed, as libpq allows them).
var pgKeyValue = regexp.MustCompile(`(?:^|\s)(?:host|hostaddr|port|dbname|user|password|passfile|sslmode|service|connect_timeout)\s*=`)

// cleanPathsOnly sends a request whose path is not clean ("//", "/./",
// "/../") to notFound: a JSON 404 like any unknown path, not the router's
// 301 with an empty body to another path (DELETE .../users/a/../b is not
// a request about user b), nor a file server's own cleaning. The path is
// read escaped, so an id sent as %2E%2E or a%2Fb stays one segment.
func cleanPathsOnly(next, notFound http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.EscapedPath()
		c := path.Clean(p)
		if strings.HasSuffix(p, "/") && c != "/" {
			c += "/"
		}
		if p != c {
			notFound.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// allowedMethods lists the methods that router serves at req's path, for
// the Allow header of a 405.
// methods returns the methods a route of method m answers: HEAD wherever
// GET (RFC 9110; http.ServeMux's "GET" patterns do so too, gorilla/mux's
// Methods does not).
func methods(m string) []string {
	if m == http.MethodGet {
		return []string{http.MethodGet, http.MethodHead}
	}
	return []string{m}
}

func allowedMethods(router *mux.Router, req *http.Request) []string {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := req.Clone(req.Context())
		probe.Method = m
		var match mux.RouteMatch
		if router.Match(probe, &match) && match.MatchErr == nil {
			allowed = append(allowed, m)
		}
	}
	return allowed
}
