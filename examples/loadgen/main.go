// Command loadgen drives an embedkit server over real HTTP and reports
// throughput and latency.
//
// Generate-session load (profile, 3 attributes, 2 groups per request, over a
// pool of distinct users):
//
//	go run ./examples/loadgen -mode session -url http://127.0.0.1:8080 -key sk-acme-admin -c 32 -d 10s
//
// Chat load (concurrent streams, time to first line, lines/s, turn latency):
//
//	go run ./examples/loadgen -mode chat -url http://127.0.0.1:8080 -key sk-acme-admin -c 100 -d 10s
//
// Open streams plus arrivals (1,000 streams held open, their starts spread
// over 5 s, and 200 new streams per second measured on their own):
//
//	go run ./examples/loadgen -mode chat -c 1000 -ramp 5s -rate 200 -d 20s -country Germany
//
// Data query load (-c clients each reading whole answers of the data query
// API in a loop; -sql, default a cross join of 100,000 rows; -csv for CSV;
// with -pid also the server's memory before, at its peak and after):
//
//	go run ./examples/loadgen -mode data -c 2 -d 20s -pid $(pgrep -n server)
//
// Bursts: 10 new streams at the same instant, every second (the openings
// compete for the store's writer and the CPU at once):
//
//	go run ./examples/loadgen -mode chat -c 0 -burst 10 -burst-every 1s
//
// With -pid, the report adds the CPU time (user + system) that process, the
// server on the same machine, used during the measured run, in total and
// per turn or request (Linux: read from /proc/<pid>/stat).
//
// The session mode first sends one creator-mode request that defines the
// attributes and groups it uses in the embed tenant "loadgen-tenant", so it
// works against any account with the useCreatorMode flag.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	var cfg config
	flag.StringVar(&cfg.mode, "mode", "session", "session, chat or data")
	flag.StringVar(&cfg.url, "url", "http://127.0.0.1:8080", "server base URL")
	flag.StringVar(&cfg.key, "key", "sk-acme-admin", "API key")
	flag.StringVar(&cfg.account, "account", "acme", "account name (chat)")
	flag.StringVar(&cfg.agent, "agent", "7", "agent id (chat)")
	flag.Int64Var(&cfg.deployment, "deployment", 1, "deployment id (session)")
	flag.IntVar(&cfg.concurrency, "c", 32, "concurrent clients (session) or open streams (chat)")
	flag.DurationVar(&cfg.duration, "d", 10*time.Second, "duration of the run")
	flag.DurationVar(&cfg.warmup, "warmup", time.Second, "session: run this long before measuring (connections dialed, caches filled); not counted")
	flag.IntVar(&cfg.users, "users", 1000, "pool of distinct external users")
	flag.Float64Var(&cfg.rate, "rate", 0, "chat: new streams per second on top of -c open ones (0: closed loop)")
	flag.StringVar(&cfg.question, "q", "revenue by country", "chat: the question asked")
	flag.IntVar(&cfg.burst, "burst", 0, "chat: new streams started at the same instant every -burst-every, on top of the others (0: none)")
	flag.DurationVar(&cfg.burstEvery, "burst-every", time.Second, "chat: the period of -burst")
	flag.DurationVar(&cfg.ramp, "ramp", 0, "chat: spread the start of the -c closed-loop streams over this duration")
	flag.DurationVar(&cfg.pace, "pace", 0, "chat: each of the -c streams starts a turn at most once per this period, so that servers whose turns last differently get the same load (0: the next turn as soon as one ends)")
	flag.StringVar(&cfg.country, "country", "", `chat: the users' "country" attribute (the demo agent shows no rows to external users without one)`)
	flag.StringVar(&cfg.sql, "sql", defaultDataSQL, "data: the query sent to the data query API")
	flag.BoolVar(&cfg.csv, "csv", false, "data: ask for CSV (Accept: text/csv) instead of NDJSON")
	flag.StringVar(&cfg.internalID, "internal-id", "alice@acme.test", "data: the internal user the queries run for (every row)")
	flag.IntVar(&cfg.pid, "pid", 0, "report the CPU time of this process (the server, on this machine) per turn or request (Linux)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	var err error
	switch cfg.mode {
	case "session":
		err = runSession(ctx, cfg)
	case "chat":
		err = runChat(ctx, cfg)
	case "data":
		err = runData(ctx, cfg)
	default:
		err = fmt.Errorf("unknown -mode %q", cfg.mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

type config struct {
	mode, url, key, account, agent, question string
	country, sql, internalID                 string
	csv                                      bool
	deployment                               int64
	concurrency, users, burst                int
	pid                                      int
	duration, ramp, warmup, burstEvery, pace time.Duration
	rate                                     float64
}

func newHTTPClient(conns int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = conns * 2
	tr.MaxIdleConnsPerHost = conns * 2
	tr.MaxConnsPerHost = 0
	return &http.Client{Transport: tr, Timeout: time.Minute}
}

// clockTicks is the unit of the CPU times in /proc/<pid>/stat (USER_HZ,
// 100 on Linux).
const clockTicks = 100

// processCPU returns the CPU time (user + system) process pid has used so
// far, from /proc/<pid>/stat.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: fields are counted from
	// its closing parenthesis. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// cpuMeter measures the CPU time of the -pid process over a run; its zero
// value (no -pid) measures nothing.
type cpuMeter struct {
	pid   int
	start time.Duration
	err   error
}

func startCPU(pid int) *cpuMeter {
	m := &cpuMeter{pid: pid}
	if pid != 0 {
		m.start, m.err = processCPU(pid)
	}
	return m
}

// report prints the CPU time used since startCPU, in total and per unit.
func (m *cpuMeter) report(n int, unit string) {
	if m.pid == 0 {
		return
	}
	end, err := processCPU(m.pid)
	if err = errors.Join(m.err, err); err != nil {
		fmt.Printf("  server CPU: %v\n", err)
		return
	}
	used := end - m.start
	per := "-"
	if n > 0 {
		per = fmt.Sprintf("%.3f ms", float64(used)/float64(n)/float64(time.Millisecond))
	}
	fmt.Printf("  server CPU (pid %d) %s, %s per %s\n", m.pid, used.Round(10*time.Millisecond), per, unit)
}

// latencies collects samples from many goroutines.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) { l.mu.Lock(); l.d = append(l.d, d); l.mu.Unlock() }

func (l *latencies) percentile(p float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	slices.Sort(l.d)
	i := int(float64(len(l.d)-1) * p)
	return l.d[i]
}

func (l *latencies) count() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.d) }

const loadTenant = "loadgen-tenant"

func post(ctx context.Context, c *http.Client, url, key string, body any) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Api-Key "+key)
	return c.Do(req)
}

func sessionBody(cfg config, user int) map[string]any {
	return map[string]any{
		"deploymentId":    cfg.deployment,
		"externalId":      fmt.Sprintf("load-user-%d", user),
		"email":           fmt.Sprintf("load-user-%d@example.test", user),
		"creatorMode":     true,
		"embedTenantName": loadTenant,
		"userProfile": map[string]any{
			"displayName": fmt.Sprintf("Load User %d", user),
			"picture":     fmt.Sprintf("https://example.test/avatars/%d.png", user),
		},
		"userAttributes": []map[string]any{
			{"name": "lg_country", "value": []string{"Germany", "France", "Japan"}[user%3]},
			{"name": "lg_level", "value": user % 10},
			{"name": "lg_regions", "value": []int{user % 7, user % 11}},
		},
		"groups":          []string{"lg-sales", []string{"lg-eu", "lg-us"}[user%2]},
		"securityContext": map[string]any{"team": user % 5},
	}
}

func runSession(ctx context.Context, cfg config) error {
	client := newHTTPClient(cfg.concurrency)
	// Define the catalog once (idempotent).
	setup := sessionBody(cfg, 0)
	setup["groupDefinitions"] = []map[string]any{{"name": "lg-sales"}, {"name": "lg-eu"}, {"name": "lg-us"}}
	setup["userAttributeDefinitions"] = []map[string]any{
		{"name": "lg_country", "type": "string"},
		{"name": "lg_level", "type": "number"},
		{"name": "lg_regions", "type": "number_array"},
	}
	resp, err := post(ctx, client, cfg.url+"/api/v1/embed/generate-session", cfg.key, setup)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("setup request: %d %s", resp.StatusCode, b)
	}

	ctx, cancel := context.WithTimeout(ctx, cfg.warmup+cfg.duration)
	defer cancel()
	var lat latencies
	var errs, next atomic.Int64
	statuses := sync.Map{}
	// Requests that start before measuring does are sent but not counted.
	start := time.Now().Add(cfg.warmup)
	// The server's CPU is measured from the end of the warm-up.
	cpuc := make(chan *cpuMeter, 1)
	go func() {
		select {
		case <-time.After(cfg.warmup):
		case <-ctx.Done():
		}
		cpuc <- startCPU(cfg.pid)
	}()
	var wg sync.WaitGroup
	for range cfg.concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				u := int(next.Add(1)) % cfg.users
				body, _ := json.Marshal(sessionBody(cfg, u))
				t0 := time.Now()
				measured := !t0.Before(start)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, cfg.url+"/api/v1/embed/generate-session", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Api-Key "+cfg.key)
				resp, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil && measured {
						errs.Add(1)
					}
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if !measured {
					continue
				}
				if resp.StatusCode != http.StatusOK {
					errs.Add(1)
					v, _ := statuses.LoadOrStore(resp.StatusCode, new(atomic.Int64))
					v.(*atomic.Int64).Add(1)
					continue
				}
				lat.add(time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	n := lat.count()
	fmt.Printf("generate-session: %d ok, %d errors in %s with %d clients (after a %s warm-up)\n", n, errs.Load(), elapsed.Round(time.Millisecond), cfg.concurrency, cfg.warmup)
	fmt.Printf("  throughput %.0f req/s\n", float64(n)/elapsed.Seconds())
	fmt.Printf("  latency p50 %s  p90 %s  p99 %s  p99.9 %s  max %s\n", lat.percentile(0.5), lat.percentile(0.9), lat.percentile(0.99), lat.percentile(0.999), lat.percentile(1))
	statuses.Range(func(k, v any) bool {
		fmt.Printf("  status %d: %d\n", k, v.(*atomic.Int64).Load())
		return true
	})
	(<-cpuc).report(n, "request")
	return nil
}

// chatLine is the part of a stream line the load generator reads.
type chatLine struct {
	ID string `json:"id"`
}

// stateToken is in the stream's last line, the __state__ message, and in
// no other line but one whose JSON holds a string of that value elsewhere
// (a string's quotes inside a string are escaped).
var stateToken = []byte(`"__state__"`)

type chatStats struct {
	firstLine, turn latencies
	// arrivals: time to first line of the open-loop (-rate, -burst)
	// streams alone.
	arrivals    latencies
	lines, errs atomic.Int64
	// causes counts the errors by cause, for the report.
	causesMu sync.Mutex
	causes   map[string]int
}

// innermost returns the error at the end of err's chain ("connection reset
// by peer"), which names the cause without the addresses around it.
func innermost(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// fail counts one error of the given cause.
func (st *chatStats) fail(cause string) {
	st.errs.Add(1)
	st.causesMu.Lock()
	defer st.causesMu.Unlock()
	if st.causes == nil {
		st.causes = map[string]int{}
	}
	st.causes[cause]++
}

func runChat(ctx context.Context, cfg config) error {
	client := newHTTPClient(cfg.concurrency + int(cfg.rate) + cfg.burst + 16)
	client.Timeout = 0
	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	var st chatStats
	var next atomic.Int64
	start := time.Now()
	cpu := startCPU(cfg.pid)
	var wg sync.WaitGroup
	// Closed loop: c streams, each asking again when its turn ends (with
	// -pace, not before the period since its last turn started).
	for i := range cfg.concurrency {
		wg.Go(func() {
			if cfg.ramp > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(cfg.ramp * time.Duration(i) / time.Duration(cfg.concurrency)):
				}
			}
			for ctx.Err() == nil {
				due := time.Now().Add(cfg.pace)
				chatOnce(ctx, client, cfg, int(next.Add(1))%cfg.users, &st, nil)
				if wait := time.Until(due); wait > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(wait):
					}
				}
			}
		})
	}
	// Arrivals on a schedule, on top of the open streams: the open loop
	// (-rate new streams a second) and bursts (-burst at once, every
	// -burst-every).
	arrive := func() { chatOnce(ctx, client, cfg, int(next.Add(1))%cfg.users, &st, &st.arrivals) }
	if cfg.rate > 0 {
		every(ctx, &wg, time.Duration(float64(time.Second)/cfg.rate), 1, arrive)
	}
	if cfg.burst > 0 {
		every(ctx, &wg, cfg.burstEvery, cfg.burst, arrive)
	}
	wg.Wait()
	elapsed := time.Since(start)
	fmt.Printf("chat: %d turns, %d errors, %d lines in %s (%d open streams, %.0f new/s, bursts of %d every %s)\n",
		st.turn.count(), st.errs.Load(), st.lines.Load(), elapsed.Round(time.Millisecond), cfg.concurrency, cfg.rate, cfg.burst, cfg.burstEvery)
	fmt.Printf("  lines/s %.0f\n", float64(st.lines.Load())/elapsed.Seconds())
	fmt.Printf("  time to first line p50 %s  p99 %s  max %s\n", st.firstLine.percentile(0.5), st.firstLine.percentile(0.99), st.firstLine.percentile(1))
	fmt.Printf("  turn latency       p50 %s  p99 %s  max %s\n", st.turn.percentile(0.5), st.turn.percentile(0.99), st.turn.percentile(1))
	for cause, n := range st.causes {
		fmt.Printf("  errors: %d × %s\n", n, cause)
	}
	if cfg.rate > 0 || cfg.burst > 0 {
		fmt.Printf("  arrivals (%d): time to first line p50 %s  p99 %s  max %s\n", st.arrivals.count(),
			st.arrivals.percentile(0.5), st.arrivals.percentile(0.99), st.arrivals.percentile(1))
	}
	cpu.report(st.turn.count(), "turn")
	return nil
}

// every starts n calls of start at once every period, until ctx ends.
func every(ctx context.Context, wg *sync.WaitGroup, period time.Duration, n int, start func()) {
	wg.Go(func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				for range n {
					wg.Go(start)
				}
			}
		}
	})
}

func chatOnce(ctx context.Context, c *http.Client, cfg config, user int, st *chatStats, arrival *latencies) {
	settings := map[string]any{"externalId": fmt.Sprintf("chat-load-%d", user)}
	if cfg.country != "" {
		settings["userAttributes"] = []map[string]any{{"name": "country", "value": cfg.country}}
	}
	body := map[string]any{"input": cfg.question, "sessionSettings": settings}
	t0 := time.Now()
	resp, err := post(ctx, c, fmt.Sprintf("%s/api/v1/public/%s/agents/%s/chat/stream-chat-state", cfg.url, cfg.account, cfg.agent), cfg.key, body)
	if err != nil {
		if ctx.Err() == nil {
			st.fail("request: " + innermost(err).Error())
		}
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		st.fail(fmt.Sprintf("status %d", resp.StatusCode))
		_, _ = io.Copy(io.Discard, resp.Body)
		return
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 8<<20) // from 4 KiB, grown for a longer line
	first := true
	for sc.Scan() {
		if first {
			st.firstLine.add(time.Since(t0))
			if arrival != nil {
				arrival.add(time.Since(t0))
			}
			first = false
		}
		st.lines.Add(1)
		// Only a line that may be the last is decoded, the others are
		// checked for their braces: decoding every line cost the load
		// generator a quarter of its CPU, which it takes from the server
		// it shares the machine with.
		line := sc.Bytes()
		var l chatLine
		ok := len(line) >= 2 && line[0] == '{' && line[len(line)-1] == '}'
		if ok && bytes.Contains(line, stateToken) {
			ok = json.Unmarshal(line, &l) == nil
		}
		if !ok {
			if ctx.Err() != nil {
				return // the end of the run cut the line
			}
			st.fail("bad line")
			return
		}
		if l.ID == "__state__" {
			st.turn.add(time.Since(t0))
			// Read to the end of the body (the chunked stream's last
			// chunk), so that the connection goes back to the pool.
			_, _ = io.Copy(io.Discard, resp.Body)
			return
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		st.fail("read: " + innermost(err).Error())
	}
}
