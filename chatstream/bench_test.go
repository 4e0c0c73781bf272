package chatstream_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/chatstreamtest"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/operator"
)

func benchEnv(b *testing.B, agent chatstream.Agent) *env {
	b.Helper()
	return newEnv(b, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux}, envOpts{agent: agent})
}

func pieces(n int) *chatstreamtest.ScriptedAgent {
	ev := make([]chatstreamtest.Event, n)
	for i := range ev {
		ev[i] = chatstreamtest.Content("word ")
	}
	return &chatstreamtest.ScriptedAgent{Events: ev}
}

// BenchmarkStreamLines streams turns of 10,000 content pieces from a
// zero-delay agent over loopback HTTP and reports lines per second on one
// stream. The client only splits lines ("raw") or decodes them with
// chatstream.Client ("client").
func BenchmarkStreamLines(b *testing.B) {
	e := benchEnv(b, pieces(10000))
	body := []byte(`{"input":"go","sessionSettings":{"externalId":"bench"}}`)
	b.Run("raw", func(b *testing.B) {
		b.ReportAllocs()
		var lines int
		start := time.Now()
		for b.Loop() {
			req, _ := http.NewRequest(http.MethodPost, e.URL+streamPath(acct, agentID), bytes.NewReader(body))
			req.Header.Set("Authorization", "Api-Key "+apitest.AdminKey)
			req.Header.Set("Content-Type", "application/json")
			resp, err := e.Client().Do(req)
			if err != nil {
				b.Fatal(err)
			}
			br := bufio.NewReaderSize(resp.Body, 64<<10)
			for {
				_, err := br.ReadSlice('\n')
				if err == bufio.ErrBufferFull {
					continue
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				lines++
			}
			resp.Body.Close()
		}
		b.ReportMetric(float64(lines)/time.Since(start).Seconds(), "lines/s")
	})
	b.Run("client", func(b *testing.B) {
		b.ReportAllocs()
		var lines int
		start := time.Now()
		for b.Loop() {
			for _, err := range e.client.Stream(b.Context(), acct, agentID, chatstream.Request{Input: "go", SessionSettings: ext("bench")}) {
				if err != nil {
					b.Fatal(err)
				}
				lines++
			}
		}
		b.ReportMetric(float64(lines)/time.Since(start).Seconds(), "lines/s")
	})
}

// BenchmarkTimeToFirstLine measures the time from sending a chat request to
// reading the first line (__cutoff__), which includes provisioning the
// user, creating the thread and storing the user echo. It reports the
// latency of the first line and of the first content line.
func BenchmarkTimeToFirstLine(b *testing.B) {
	e := benchEnv(b, pieces(1))
	b.ReportAllocs()
	var first, content time.Duration
	for b.Loop() {
		t0 := time.Now()
		n := 0
		for m, err := range e.client.Stream(b.Context(), acct, agentID, chatstream.Request{Input: "go", SessionSettings: ext("ttfl")}) {
			if err != nil {
				b.Fatal(err)
			}
			if n == 0 {
				first += time.Since(t0)
			}
			if isContent(m) {
				content += time.Since(t0)
			}
			n++
		}
	}
	b.ReportMetric(float64(first.Microseconds())/float64(b.N), "µs/first-line")
	b.ReportMetric(float64(content.Microseconds())/float64(b.N), "µs/first-content")
}

// BenchmarkTimeToFirstLineNewUser is BenchmarkTimeToFirstLine for a new
// user each turn (the user's first turn: the opening transaction creates the
// user with the thread and the echo). The account's limit of new ephemeral
// users is off.
func BenchmarkTimeToFirstLineNewUser(b *testing.B) {
	e := newEnv(b, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux}, envOpts{agent: pieces(1),
		cfg: func(c *operator.Config) { c.Accounts[0].Limits.NewEphemeralUsersPerMinute = -1 }})
	b.ReportAllocs()
	var first time.Duration
	i := 0
	for b.Loop() {
		i++
		t0 := time.Now()
		n := 0
		for _, err := range e.client.Stream(b.Context(), acct, agentID, chatstream.Request{Input: "go", SessionSettings: ext(fmt.Sprint("new-", i))}) {
			if err != nil {
				b.Fatal(err)
			}
			if n == 0 {
				first += time.Since(t0)
			}
			n++
		}
	}
	b.ReportMetric(float64(first.Microseconds())/float64(b.N), "µs/first-line")
}

// BenchmarkOpenStreamHeap holds 1,000 and 10,000 streams open on a slow
// agent and reports the heap and the goroutine stacks in use per open
// stream, and the goroutines per stream. Client and server share the
// process, so the figures are upper bounds for the server alone. The
// account's turn limits are off.
func BenchmarkOpenStreamHeap(b *testing.B) {
	b.Run("loopback-1000", func(b *testing.B) { benchOpenStreamHeap(b, 1000, false) })
	// 10,000 loopback streams need 20,000 descriptors in one process (client
	// and server): more than this machine allows. In-memory pipes carry the
	// same HTTP/1.1 exchange without descriptors or kernel buffers.
	b.Run("pipe-10000", func(b *testing.B) { benchOpenStreamHeap(b, 10000, true) })
}

// pipeListener is a net.Listener whose connections are net.Pipe ends.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error { l.once.Do(func() { close(l.done) }); return nil }

func (l *pipeListener) Addr() net.Addr { return &net.UnixAddr{Name: "pipe", Net: "pipe"} }

func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	c, s := net.Pipe()
	select {
	case l.conns <- s:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func benchOpenStreamHeap(b *testing.B, n int, pipes bool) {
	slow := &chatstreamtest.ScriptedAgent{Events: []chatstreamtest.Event{
		chatstreamtest.Content("a"), chatstreamtest.Pause(time.Hour),
	}}
	tr := &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: 0, ReadBufferSize: 1024, WriteBufferSize: 1024}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	for b.Loop() {
		b.StopTimer()
		// The account's turn limits would refuse most of these streams.
		e := newEnv(b, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux}, envOpts{agent: slow,
			cfg: func(c *operator.Config) {
				l := &c.Accounts[0].Limits
				l.RunningTurns, l.RunningTurnsPerUser, l.NewEphemeralUsersPerMinute = -1, -1, -1
			}})
		url := e.URL
		if pipes {
			ln := newPipeListener()
			srv := &http.Server{Handler: e.Config.Handler}
			go func() { _ = srv.Serve(ln) }()
			defer srv.Close()
			tr.DialContext = ln.dial
			url = "http://pipe"
		}
		b.StartTimer()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		g0 := runtime.NumGoroutine()
		resps := make([]*http.Response, 0, n)
		for i := range n {
			body := fmt.Sprintf(`{"input":"go","sessionSettings":{"externalId":"heap-%d"}}`, i%50)
			req, _ := http.NewRequest(http.MethodPost, url+streamPath(acct, agentID), strings.NewReader(body))
			req.Header.Set("Authorization", "Api-Key "+apitest.AdminKey)
			resp, err := hc.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				msg, _ := io.ReadAll(resp.Body)
				b.Fatalf("stream %d: %s %s", i, resp.Status, msg)
			}
			// Read up to the first content line so the turn is running.
			br := bufio.NewReaderSize(resp.Body, 512)
			for j := range 4 {
				if _, err := br.ReadSlice('\n'); err != nil && err != bufio.ErrBufferFull {
					b.Fatalf("stream %d, line %d: %v", i, j+1, err)
				}
			}
			resps = append(resps, resp)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/float64(n), "heap-B/stream")
		b.ReportMetric(float64(after.StackInuse-before.StackInuse)/float64(n), "stack-B/stream")
		// The client's transport runs two of them per connection.
		b.ReportMetric(float64(runtime.NumGoroutine()-g0)/float64(n), "goroutines/stream")
		b.StopTimer()
		for _, r := range resps {
			r.Body.Close()
		}
		if err := e.h.Close(); err != nil {
			b.Fatal(err)
		}
		tr.CloseIdleConnections()
		b.StartTimer()
	}
}

// BenchmarkParallelTurns runs short turns (one piece) from many concurrent
// clients and reports turns per second: the ceiling set by the two
// transactions of a turn (start and end) on the store.
func BenchmarkParallelTurns(b *testing.B) {
	e := benchEnv(b, pieces(1))
	var n atomic.Int64
	b.SetParallelism(16)
	b.ReportAllocs()
	start, cpu0 := time.Now(), cpuTime(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := n.Add(1)
			for _, err := range e.client.Stream(b.Context(), acct, agentID, chatstream.Request{Input: "go", SessionSettings: ext(fmt.Sprintf("par-%d", id%100))}) {
				if err != nil {
					b.Error(err)
					return
				}
			}
		}
	})
	b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "turns/s")
	// CPU of the whole process (server, store and the benchmark's own
	// clients) per turn: an upper bound of the library's per-turn work.
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(n.Load())/1e3, "cpu-µs/turn")
}

// BenchmarkAbortLatency starts a turn whose agent waits, aborts it, and
// reports the time from the abort's 204 to the end of the stream (p50, p99).
func BenchmarkAbortLatency(b *testing.B) {
	agent := &chatstreamtest.ScriptedAgent{Events: []chatstreamtest.Event{
		chatstreamtest.Content("partial "), chatstreamtest.Pause(time.Minute),
	}}
	e := benchEnv(b, agent)
	ctx := b.Context()
	var lat []time.Duration
	i := 0
	for b.Loop() {
		i++
		id := fmt.Sprintf("abort-bench-%d", i)
		_, wait := streamUntil(b, ctx, e.client, chatstream.Request{Input: "wait", ChatID: id, SessionSettings: ext("abort-bench")},
			func(m chatstream.Message) bool { return isContent(m) })
		if err := e.client.Abort(ctx, acct, agentID, id, chatstream.SessionSettings{ExternalID: "abort-bench"}); err != nil {
			b.Fatal(err)
		}
		acked := time.Now()
		_, end, err := wait()
		if err != nil {
			b.Fatal(err)
		}
		// The stream may end before the client has read the 204: count 0.
		lat = append(lat, max(0, end.Sub(acked)))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// txCounter counts the store's transactions and the AppendMessages calls
// in them.
type txCounter struct {
	store.Store
	n, appends atomic.Int64
}

func (s *txCounter) InTx(ctx context.Context, fn func(store.Tx) error) error {
	s.n.Add(1)
	return s.Store.InTx(ctx, func(tx store.Tx) error { return fn(countingTx{tx, s}) })
}

type countingTx struct {
	store.Tx
	s *txCounter
}

func (t countingTx) AppendMessages(ctx context.Context, accountID int64, chatID string, lastSort int64, msgs []store.ThreadMessage) error {
	t.s.appends.Add(1)
	return t.Tx.AppendMessages(ctx, accountID, chatID, lastSort, msgs)
}

// BenchmarkHeldStreamTransactions holds 1,000 and 10,000 streams open on an
// agent that streams a piece every 400 ms (so that each stream has
// something new at each tick of the checkpoint clock), and reports the store's
// transactions per second while they run (their checkpoints; no turn opens
// or ends meanwhile) and the mean time between two checkpoints of a
// stream: the checkpoints cost a near-constant number of transactions
// whatever the number of streams. On PostgreSQL the handler has a
// pgcluster too, and db-tx/s counts every write transaction the database
// ran meanwhile (the store's and the cluster's: its heartbeat; no line is
// written, since no stream on another replica asks for one).
func BenchmarkHeldStreamTransactions(b *testing.B) {
	for _, backend := range testdb.Backends() {
		for _, n := range []int{1000, 10000} {
			b.Run(fmt.Sprint(backend, "-", n), func(b *testing.B) { benchHeldStreamTransactions(b, backend, n) })
		}
	}
}

// writeXacts returns the number of transaction ids PostgreSQL has handed
// out (one per write transaction), without taking one.
func writeXacts(b *testing.B, db *pgx.Conn) int64 {
	var n int64
	if err := db.QueryRow(b.Context(), `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

func benchHeldStreamTransactions(b *testing.B, backend string, n int) {
	var dsn string
	if backend == testdb.Postgres {
		dsn = testdb.OpenDSN(b, testdb.Postgres) // skips without EMBEDKIT_TEST_POSTGRES_DSN
	}
	ev := make([]chatstreamtest.Event, 0, 400)
	for range 200 {
		ev = append(ev, chatstreamtest.Content("word "), chatstreamtest.Pause(400*time.Millisecond))
	}
	agent := &chatstreamtest.ScriptedAgent{Events: ev}
	tr := &http.Transport{MaxIdleConnsPerHost: n, ReadBufferSize: 1024, WriteBufferSize: 1024}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	for b.Loop() {
		b.StopTimer()
		var (
			counter *txCounter
			opts    []chatstream.Option
			db      *pgx.Conn
		)
		open := func(t testing.TB, backend string) store.Store { return testdb.Open(t, backend) }
		if dsn != "" {
			opts = append(opts, chatstream.WithCluster(openCluster(b, dsn)))
			open = storeOn(dsn)
			var err error
			if db, err = pgx.Connect(b.Context(), dsn); err != nil {
				b.Fatal(err)
			}
		}
		e := newEnv(b, apitest.Target{Backend: backend, Router: apitest.ServeMux}, envOpts{agent: agent, opts: opts,
			store: func(t testing.TB, backend string) store.Store {
				counter = &txCounter{Store: open(t, backend)}
				return counter
			},
			cfg: func(c *operator.Config) {
				l := &c.Accounts[0].Limits
				l.RunningTurns, l.RunningTurnsPerUser, l.NewEphemeralUsersPerMinute = -1, -1, -1
			}})
		ln := newPipeListener()
		srv := &http.Server{Handler: e.Config.Handler}
		go func() { _ = srv.Serve(ln) }()
		tr.DialContext = ln.dial
		resps := make([]*http.Response, 0, n)
		var wg sync.WaitGroup
		for i := range n {
			body := fmt.Sprintf(`{"input":"go","sessionSettings":{"externalId":"held-%d"}}`, i%50)
			req, _ := http.NewRequest(http.MethodPost, "http://pipe"+streamPath(acct, agentID), strings.NewReader(body))
			req.Header.Set("Authorization", "Api-Key "+apitest.AdminKey)
			resp, err := hc.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				msg, _ := io.ReadAll(resp.Body)
				b.Fatalf("stream %d: %s %s", i, resp.Status, msg)
			}
			resps = append(resps, resp)
			wg.Go(func() { _, _ = io.Copy(io.Discard, resp.Body) })
		}
		b.StartTimer()
		const window = 5 * time.Second
		n0, a0 := counter.n.Load(), counter.appends.Load()
		var x0 int64
		if db != nil {
			x0 = writeXacts(b, db)
		}
		time.Sleep(window)
		b.ReportMetric(float64(counter.n.Load()-n0)/window.Seconds(), "tx/s")
		if db != nil {
			b.ReportMetric(float64(writeXacts(b, db)-x0)/window.Seconds(), "db-tx/s")
			_ = db.Close(context.Background())
		}
		// The mean time between two checkpoints of a stream.
		b.ReportMetric(float64(n)*window.Seconds()/float64(counter.appends.Load()-a0), "s/checkpoint")
		b.StopTimer()
		for _, r := range resps {
			r.Body.Close()
		}
		wg.Wait()
		if err := e.h.Close(); err != nil {
			b.Fatal(err)
		}
		srv.Close()
		tr.CloseIdleConnections()
		b.StartTimer()
	}
}
