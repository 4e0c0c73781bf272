package faulttest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/pgcluster"
	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/faulttest"
	"github.com/embedkit/embedkit/internal/logbuf"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/middleware/httperr"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore"
)

const (
	acct    = apitest.Account
	agentID = "7"

	// queryTimeout is the store's query timeout in the PostgreSQL fault
	// tests: small, so that a fault turns into a 503 quickly.
	queryTimeout = time.Second
	// hangGuard bounds any single request or stream: far above what the
	// query timeout allows, so it only catches hangs.
	hangGuard = 10 * time.Second
)

// env is a test server whose store reaches the database through a proxy
// (PostgreSQL) or directly (SQLite), with embedsession and chatstream
// mounted.
type env struct {
	*apitest.Server
	proxy      *faulttest.Proxy // nil on SQLite
	dsn        string           // what the store opened (the proxy's DSN on PostgreSQL)
	clusterDSN string           // what the cluster opens
	appName    string           // application_name of the store's PostgreSQL sessions
	chat       *chatstream.Handler
	client     *chatstream.Client
	// loadOK counts load's requests answered 200, as they are.
	loadOK atomic.Int64
}

type envOpts struct {
	backend string
	appName string // PostgreSQL application_name of the store's sessions
	// cluster shares chat turns through a pgcluster on the same database;
	// with appName set, its sessions are named appName+"-cluster".
	cluster   bool
	agent     chatstream.Agent
	storeOpts []gormstore.Option
	chatOpts  []chatstream.Option
}

// newEnv builds the server. On PostgreSQL the store's DSN points at a
// proxy in front of EMBEDKIT_TEST_POSTGRES_DSN's server, on a fresh schema;
// the test skips when the variable is unset.
func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	e := &env{}
	open := func(t testing.TB, backend string) store.Store {
		dsn := testdb.OpenDSN(t, backend)
		if backend == testdb.Postgres {
			target, err := faulttest.PostgresAddr(dsn)
			if err != nil {
				t.Fatal(err)
			}
			e.proxy = faulttest.NewProxy(t, target)
			if dsn, err = faulttest.ProxiedDSN(dsn, e.proxy.Addr()); err != nil {
				t.Fatal(err)
			}
			e.clusterDSN = dsn
			if o.appName != "" {
				e.clusterDSN = dsn + "&application_name=" + o.appName + "-cluster"
				dsn += "&application_name=" + o.appName
				e.appName = o.appName
			}
		}
		e.dsn = dsn
		st, err := testdb.OpenStore(dsn, o.storeOpts...)
		if err != nil {
			t.Fatalf("open store: %v", err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	// Server-side errors (causes of 5xx, turns not stored) are shown when
	// the test fails.
	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	routes := func(s *apitest.Server) []apitest.Route {
		opts := []chatstream.Option{chatstream.WithClock(s.Now), chatstream.WithLogger(log)}
		if o.cluster {
			ctx, cancel := context.WithTimeout(t.Context(), hangGuard)
			defer cancel()
			cl, err := pgcluster.New(ctx, e.clusterDSN, pgcluster.WithLogger(log))
			if err != nil {
				t.Fatalf("pgcluster: %v", err)
			}
			t.Cleanup(func() { _ = cl.Close() }) // runs after the handler's Close
			opts = append(opts, chatstream.WithCluster(cl))
		}
		e.chat = chatstream.NewHandler(s.Store, o.agent, append(opts, o.chatOpts...)...)
		var rs []apitest.Route
		for _, r := range e.chat.Routes() {
			rs = append(rs, apitest.Route(r))
		}
		return rs
	}
	e.Server = apitest.New(t, apitest.Target{Backend: o.backend, Router: apitest.ServeMux},
		apitest.WithStore(open), apitest.WithRoutes(routes), apitest.WithEmbedOptions(embedsession.WithLogger(log)))
	t.Cleanup(func() {
		if err := e.chat.Close(); err != nil {
			t.Errorf("chat handler Close: %v", err)
		}
	})
	e.client = chatstream.NewClient(e.URL, chatstream.WithAPIKey(apitest.AdminKey), chatstream.WithHTTPClient(e.Client()))
	return e
}

// skipWithoutPostgres skips before any setup when the PostgreSQL DSN is
// unset.
func skipWithoutPostgres(t *testing.T) {
	t.Helper()
	if os.Getenv(testdb.EnvPostgresDSN) == "" {
		t.Skip(testdb.EnvPostgresDSN + " not set; skipping PostgreSQL fault tests")
	}
}

// genReq is one generate-session request of a load run and what it got.
type genReq struct {
	extID   string
	country string
	group   string
	tenant  string // embedTenantName, if any: a new one makes the request a transaction

	start, end time.Time
	status     int    // 0 when the request itself failed
	ctype      string // Content-Type of the answer
	errMsg     string // "error" of a non-2xx answer
	sessionID  string // of a 200
	err        error  // transport error (a hang guard tripped, a reset)
}

func (g *genReq) body() map[string]any {
	b := map[string]any{
		"deploymentId":   1,
		"externalId":     g.extID,
		"userAttributes": []any{map[string]any{"name": "country", "value": g.country}},
		"groups":         []string{g.group},
	}
	if g.tenant != "" {
		b["embedTenantName"] = g.tenant
	}
	return b
}

// generate sends one generate-session request, bounded by hangGuard.
func (e *env) generate(ctx context.Context, g *genReq) {
	ctx, cancel := context.WithTimeout(ctx, hangGuard)
	defer cancel()
	b, _ := json.Marshal(g.body())
	g.start = time.Now()
	defer func() { g.end = time.Now() }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL+embedsession.PathGenerateSession, bytes.NewReader(b))
	if err != nil {
		g.err = err
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Api-Key "+apitest.AdminKey)
	resp, err := e.Client().Do(req)
	if err != nil {
		g.err = err
		return
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		g.err = err
		return
	}
	g.status, g.ctype = resp.StatusCode, resp.Header.Get("Content-Type")
	var out struct {
		SessionID string `json:"sessionId"`
		Error     string `json:"error"`
	}
	_ = json.Unmarshal(raw, &out)
	g.sessionID, g.errMsg = out.SessionID, out.Error
}

// load runs workers clients of generate-session in closed loops until stop
// is closed and returns every request, in no particular order.
func (e *env) load(ctx context.Context, workers int, stop <-chan struct{}) []*genReq {
	var (
		mu  sync.Mutex
		all []*genReq
		wg  sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				g := &genReq{
					extID:   fmt.Sprintf("load-%d-%d", w, i),
					country: fmt.Sprintf("C%d-%d", w, i),
					group:   []string{"sales", "marketing"}[i%2],
				}
				e.generate(ctx, g)
				if g.status == http.StatusOK {
					e.loadOK.Add(1)
				}
				mu.Lock()
				all = append(all, g)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	sort.Slice(all, func(i, j int) bool { return all[i].start.Before(all[j].start) })
	return all
}

// checkAnswers checks the spec's promise for a fault: every request is
// answered 200 or 503 with a JSON {"error": ...}, within the hang guard.
// It returns the counts by status and the slowest 503.
func checkAnswers(t *testing.T, all []*genReq) (counts map[int]int, slowest503 time.Duration) {
	t.Helper()
	counts = map[int]int{}
	for _, g := range all {
		if g.err != nil {
			t.Errorf("%s: request failed after %v: %v", g.extID, g.end.Sub(g.start), g.err)
			continue
		}
		counts[g.status]++
		switch g.status {
		case http.StatusOK:
			if g.sessionID == "" {
				t.Errorf("%s: 200 without sessionId", g.extID)
			}
		case http.StatusServiceUnavailable:
			slowest503 = max(slowest503, g.end.Sub(g.start))
			if g.ctype != "application/json" || g.errMsg == "" {
				t.Errorf("%s: 503 with Content-Type %q and error %q, want a JSON {\"error\": ...}", g.extID, g.ctype, g.errMsg)
			}
		default:
			t.Errorf("%s: status %d (%q), want 200 or 503", g.extID, g.status, g.errMsg)
		}
	}
	return counts, slowest503
}

// checkDurable checks that every acknowledged generate-session is stored
// with its attribute and group and that its sessionId is exchangeable for a
// token, and that a request answered 503 left either nothing or all of its
// writes (all or nothing).
func (e *env) checkDurable(t *testing.T, all []*genReq) {
	t.Helper()
	acked, partial := 0, 0
	for _, g := range all {
		if g.err != nil {
			continue
		}
		u := e.User(t, acct, g.extID, "")
		want := fmt.Sprintf("%q", g.country)
		complete := u.Exists && u.Attributes["country"] == want && slices.Equal(u.Groups, []string{g.group})
		switch g.status {
		case http.StatusOK:
			acked++
			if !complete {
				t.Errorf("%s: acknowledged, stored as %+v; want country %s and groups [%s]", g.extID, u, want, g.group)
			}
			r := e.Send(t, e.Request(t, http.MethodPost, embedsession.PathSessionToken, "", map[string]string{"sessionId": g.sessionID}))
			if r.Status != http.StatusOK || r.Body["token"] == "" {
				t.Errorf("%s: token exchange of an acknowledged session = %d %s, want 200", g.extID, r.Status, r.Raw)
			}
		default:
			if u.Exists && !complete {
				partial++
				t.Errorf("%s: answered %d, stored partly: %+v", g.extID, g.status, u)
			}
		}
	}
	t.Logf("%d acknowledged writes checked, %d partial", acked, partial)
}

// recovery returns how long after restored the first request that started
// after it succeeded (its end), or false when none did.
func recovery(all []*genReq, restored time.Time) (time.Duration, bool) {
	var first time.Time
	for _, g := range all {
		if g.status == http.StatusOK && !g.start.Before(restored) && (first.IsZero() || g.end.Before(first)) {
			first = g.end
		}
	}
	if first.IsZero() {
		return 0, false
	}
	return first.Sub(restored), true
}

// probe sends generate-session requests one after another from restored
// on until one succeeds (or the hang guard passes) and returns the time
// from restored to that success.
func (e *env) probe(t *testing.T, restored time.Time) time.Duration {
	t.Helper()
	for i := 0; time.Since(restored) < hangGuard; i++ {
		g := &genReq{extID: fmt.Sprintf("probe-%d", i), country: "P", group: "sales"}
		e.generate(t.Context(), g)
		if g.status == http.StatusOK {
			return g.end.Sub(restored)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no successful request within %v of the database's return", hangGuard)
	return 0
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// is503 reports whether err is a chatstream API error with status 503.
func is503(err error) bool {
	e, ok := errors.AsType[*httperr.Error](err)
	return ok && e.Status == http.StatusServiceUnavailable
}
