package chatstream_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/chatstreamtest"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/logbuf"
	"github.com/embedkit/embedkit/internal/telemetry"
	"github.com/embedkit/embedkit/internal/testdb"
)

// detachedStreams counts the goroutines that follow a turn on a connection
// taken over from net/http.
func detachedStreams() int { return goroutinesIn("chatstream.(*Handler).followTurn.func1") }

// goroutinesIn counts the goroutines with fn in their stacks.
func goroutinesIn(fn string) int { return bytes.Count(stacks(), []byte(fn)) }

// stacks returns the stacks of every goroutine.
func stacks() []byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

// waitDetached waits until detachedStreams is want (bounded) and returns it.
func waitDetached(want int) int { return waitDetachedWithin(want, 10*time.Second) }

// waitDetachedWithin waits at most d until detachedStreams is want and
// returns it.
func waitDetachedWithin(want int, d time.Duration) int {
	got := detachedStreams()
	for deadline := time.Now().Add(d); got != want && time.Now().Before(deadline); got = detachedStreams() {
		time.Sleep(5 * time.Millisecond)
	}
	return got
}

// postStream sends a stream request to the server at baseURL over client
// and returns the response and a reader of its lines.
func postStream(t *testing.T, baseURL string, client *http.Client, body string) (*http.Response, *bufio.Reader) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, baseURL+streamPath(acct, agentID), strings.NewReader(body))
	req.Header.Set("Authorization", "Api-Key "+apitest.AdminKey)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %s", resp.Status)
	}
	return resp, bufio.NewReader(resp.Body)
}

// readLines reads n lines of a stream.
func readLines(t *testing.T, br *bufio.Reader, n int) []map[string]any {
	t.Helper()
	var out []map[string]any
	for range n {
		l, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatalf("after %d lines: %v", len(out), err)
		}
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// TestStreamOfRunningTurnDetaches: over HTTP/1.1 a stream that follows a
// running turn (its own, or one rejoined) says Connection: close and is
// served to its end on the connection taken over from net/http: a complete
// chunked body, every line, the request's goroutine gone while it runs. A
// thread's stored state keeps the connection; HTTP/2 streams are served as
// before.
func TestStreamOfRunningTurnDetaches(t *testing.T) {
	release := make(chan struct{})
	agent := chatstream.AgentFunc(func(ctx context.Context, _ chatstream.Turn, e chatstream.Emitter) error {
		if err := e.Content("a"); err != nil {
			return err
		}
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return e.Content("b")
	})
	e := newEnv(t, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux}, envOpts{agent: agent})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	base := detachedStreams()

	resp, br := postStream(t, e.URL, hc, `{"input":"go","sessionSettings":{"externalId":"det"},"chatId":"det-1"}`)
	if !resp.Close { // the client removes the Connection: close it read
		t.Error("stream of a turn: connection kept, want Connection: close")
	}
	readLines(t, br, 4) // __cutoff__, echo, start, "a"
	// Rejoined while it runs: detached too.
	rresp, rbr := postStream(t, e.URL, hc, `{"sessionSettings":{"externalId":"det"},"chatId":"det-1","resumeAfterSort":0}`)
	if !rresp.Close {
		t.Error("rejoin of a running turn: connection kept, want Connection: close")
	}
	if got := waitDetached(base + 2); got != base+2 {
		t.Fatalf("%d detached streams, want 2", got-base)
	}
	close(release)
	for name, r := range map[string]io.Reader{"stream": br, "rejoin": rbr} {
		rest, err := io.ReadAll(r) // fails on a chunked body cut short
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		lines := strings.Split(strings.TrimSuffix(string(rest), "\n"), "\n")
		var m chatstream.Message
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m); err != nil || m.ID != "__state__" || m.State == nil || m.State.IsStreaming {
			t.Fatalf("%s: last line %q", name, lines[len(lines)-1])
		}
		if !strings.Contains(string(rest), `"content":"b"`) {
			t.Errorf("%s: the turn's second piece missing: %s", name, rest)
		}
	}
	if got := waitDetached(base); got != base {
		t.Errorf("%d detached streams after the turn, want 0", got-base)
	}

	// The stored thread's state: a short answer on a kept connection.
	sresp, sbr := postStream(t, e.URL, hc, `{"sessionSettings":{"externalId":"det"},"chatId":"det-1"}`)
	if sresp.Close {
		t.Error("state of a stored thread: Connection: close, want the connection kept")
	}
	if _, err := io.ReadAll(sbr); err != nil {
		t.Fatal(err)
	}

	// HTTP/2: served on net/http's stream as before.
	h2 := httptest.NewUnstartedServer(e.Config.Handler)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	defer h2.Close()
	hresp, hbr := postStream(t, h2.URL, h2.Client(), `{"input":"go","sessionSettings":{"externalId":"det"},"chatId":"det-2"}`)
	if hresp.ProtoMajor != 2 {
		t.Fatalf("protocol %s, want HTTP/2", hresp.Proto)
	}
	all, err := io.ReadAll(hbr)
	if err != nil || !strings.Contains(string(all), `"content":"b"`) {
		t.Fatalf("HTTP/2 stream: %v %s", err, all)
	}
}

// TestDetachedStreamClientGone: a client that goes away from a detached
// stream is noticed at once, while its turn writes nothing (as net/http
// notices it for a request); the turn runs on.
func TestDetachedStreamClientGone(t *testing.T) {
	agent := &chatstreamtest.ScriptedAgent{Events: []chatstreamtest.Event{
		chatstreamtest.Content("a"), chatstreamtest.Pause(100 * time.Millisecond),
		chatstreamtest.Content("b"), chatstreamtest.Pause(time.Minute),
	}}
	e := newEnv(t, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux}, envOpts{agent: agent})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	base := detachedStreams()
	resp, br := postStream(t, e.URL, &http.Client{Transport: tr}, `{"input":"go","sessionSettings":{"externalId":"gone"},"chatId":"gone-1"}`)
	readLines(t, br, 5) // __cutoff__, echo, start, "a", "b"
	if got := waitDetached(base + 1); got != base+1 {
		t.Fatalf("%d detached streams, want 1", got-base)
	}
	resp.Body.Close()
	if got := waitDetachedWithin(base, 2*time.Second); got != base {
		t.Fatalf("%d detached streams after the client left, want 0", got-base)
	}
	// The turn runs on: a rejoin finds it streaming.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, wait := streamUntil(t, ctx, e.client, chatstream.Request{ChatID: "gone-1", SessionSettings: ext("gone")},
		func(m chatstream.Message) bool { return isContent(m) && m.Content == "b" })
	cancel()
	wait()
	if msgs[0].State == nil || !msgs[0].State.IsStreaming {
		t.Errorf("rejoin after the client left: %+v", msgs)
	}
}

// TestShutdownWaitsForDetachedStreams: Close returns once the detached
// streams have written their last line (the aborted state) and closed
// their connections, not merely once the turns ended.
func TestShutdownWaitsForDetachedStreams(t *testing.T) {
	agent := &chatstreamtest.ScriptedAgent{Events: []chatstreamtest.Event{
		chatstreamtest.Content("a"), chatstreamtest.Pause(time.Minute),
	}}
	e := newEnv(t, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux}, envOpts{agent: agent})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	base := detachedStreams()
	var readers []*bufio.Reader
	for i := range 3 {
		_, br := postStream(t, e.URL, hc, fmt.Sprintf(`{"input":"go","sessionSettings":{"externalId":"shut"},"chatId":"shut-%d"}`, i))
		readLines(t, br, 4)
		readers = append(readers, br)
	}
	if got := waitDetached(base + 3); got != base+3 {
		t.Fatalf("%d detached streams, want 3", got-base)
	}
	if err := e.h.Close(); err != nil {
		t.Fatal(err)
	}
	if got := waitDetachedWithin(base, 100*time.Millisecond); got != base {
		t.Errorf("%d detached streams still running after Close", got-base)
	}
	for i, br := range readers {
		rest, err := io.ReadAll(br)
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		lines := strings.Split(strings.TrimSuffix(string(rest), "\n"), "\n")
		var m chatstream.Message
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m); err != nil || m.State == nil || !m.State.Aborted {
			t.Errorf("stream %d: last line %q, want an aborted state", i, lines[len(lines)-1])
		}
	}
}

// TestShutdownWaitsForBlockedDetachedStream: a detached stream whose
// client reads nothing holds its goroutine in a write; Close cuts the
// write short and waits for it, and succeeds.
func TestShutdownWaitsForBlockedDetachedStream(t *testing.T) {
	agent := chatstream.AgentFunc(func(ctx context.Context, _ chatstream.Turn, e chatstream.Emitter) error {
		if err := e.Content("a"); err != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond) // the client reads its first lines, then stops
		for i := range bigPieces {
			if err := e.Content(strings.Repeat(string(rune('a'+i)), bigPiece)); err != nil {
				return err
			}
		}
		<-ctx.Done()
		return ctx.Err()
	})
	// The default write timeout (30 s): Close bounds the stream's writes
	// by half its grace instead.
	e := newEnv(t, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux}, envOpts{agent: agent})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	base := detachedStreams()
	_, br := postStream(t, e.URL, &http.Client{Transport: tr}, `{"input":"go","sessionSettings":{"externalId":"stuck"},"chatId":"stuck-1"}`)
	readLines(t, br, 4)
	if got := waitDetached(base + 1); got != base+1 {
		t.Fatalf("%d detached streams, want 1", got-base)
	}
	time.Sleep(300 * time.Millisecond) // the stream's writes fill the connection
	if err := e.h.Close(); err != nil {
		t.Fatal(err)
	}
	// The stream's goroutine is done once Close returns; it may still be
	// returning from its last call.
	if got := waitDetachedWithin(base, 100*time.Millisecond); got != base {
		t.Errorf("%d detached streams still running after Close", got-base)
	}
}

// TestTelemetryOfDetachedStream: the request's span and duration last as
// long as the detached stream and end before its body does, as a request
// that net/http serves ends before net/http writes its last chunk; its
// lines are counted.
func TestTelemetryOfDetachedStream(t *testing.T) {
	const pause = 300 * time.Millisecond
	agent := &chatstreamtest.ScriptedAgent{Events: []chatstreamtest.Event{
		chatstreamtest.Content("a"), chatstreamtest.Pause(pause), chatstreamtest.Content("b"),
	}}
	e, rec, _ := telemetryEnv(t, agent)
	base := detachedStreams()
	_, br := postStream(t, e.URL, http.DefaultClient, `{"input":"go","sessionSettings":{"externalId":"tel-det"},"chatId":"tel-det"}`)
	first := readLines(t, br, 4) // __cutoff__, echo, start, "a"
	if got := waitDetached(base + 1); got != base+1 {
		t.Fatalf("%d detached streams, want 1", got-base)
	}
	if n := len(rec.Ended("POST " + chatstream.StreamPattern)); n != 0 {
		t.Fatalf("the request's span ended while its stream runs (%d)", n)
	}
	rest, err := io.ReadAll(br) // to the body's last chunk
	if err != nil {
		t.Fatal(err)
	}
	ended := rec.Ended("POST " + chatstream.StreamPattern)
	if len(ended) != 1 {
		t.Fatalf("%d request spans ended once the body was read, want 1", len(ended))
	}
	if d := ended[0].EndTime().Sub(ended[0].StartTime()); d < pause {
		t.Errorf("request span lasted %v, want at least the turn's %v", d, pause)
	}
	lines := len(first) + strings.Count(string(rest), "\n")
	if n := rec.Value(t, telemetry.MetricStreamLines); n != float64(lines) {
		t.Errorf("streamed lines: %v, want %d", n, lines)
	}
}

// countingWriter is a host's ResponseWriter wrapper with Unwrap, such as a
// logging or compressing middleware's.
type countingWriter struct {
	http.ResponseWriter
	n int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n += len(p)
	return w.ResponseWriter.Write(p)
}

func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestStreamBehindHostWrapperNotDetached: a host's wrapper around the
// ResponseWriter may transform the body, so the stream is written through
// it to its end and not detached.
func TestStreamBehindHostWrapperNotDetached(t *testing.T) {
	agent := &chatstreamtest.ScriptedAgent{Events: []chatstreamtest.Event{
		chatstreamtest.Content("a"), chatstreamtest.Pause(100 * time.Millisecond), chatstreamtest.Content("b"),
	}}
	e := newEnv(t, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux}, envOpts{agent: agent})
	written := make(chan int, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &countingWriter{ResponseWriter: w}
		e.Config.Handler.ServeHTTP(cw, r)
		written <- cw.n
	}))
	defer srv.Close()
	resp, br := postStream(t, srv.URL, srv.Client(), `{"input":"go","sessionSettings":{"externalId":"wrapped"},"chatId":"wrapped-1"}`)
	if resp.Close {
		t.Error("Connection: close behind a host's wrapper: the stream was prepared for detach")
	}
	all, err := io.ReadAll(br)
	if err != nil || !strings.Contains(string(all), `"content":"b"`) {
		t.Fatalf("%v %s", err, all)
	}
	if n := <-written; n != len(all) {
		t.Errorf("the wrapper saw %d bytes of the %d-byte body", n, len(all))
	}
}

// rawStream sends a stream request with the admin key over a connection
// of its own and returns the connection and the response, whose body is
// read as it comes.
func rawStream(t *testing.T, baseURL, body string) (net.Conn, *http.Response) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(baseURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: test\r\nAuthorization: Api-Key %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		streamPath(acct, agentID), apitest.AdminKey, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %s", resp.Status)
	}
	return c, resp
}

// TestDetachedStreamClientSendsMore: a client that sends more after its
// request, despite Connection: close, is not read on (the connection's
// buffers fill and hold it back, as with net/http's reader), and its
// stream goes on to its end.
func TestDetachedStreamClientSendsMore(t *testing.T) {
	agent := &chatstreamtest.ScriptedAgent{Events: []chatstreamtest.Event{
		chatstreamtest.Content("a"), chatstreamtest.Pause(time.Second), chatstreamtest.Content("b"),
	}}
	e := newEnv(t, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux}, envOpts{agent: agent})
	base := detachedStreams()
	c, resp := rawStream(t, e.URL, `{"input":"go","sessionSettings":{"externalId":"more"},"chatId":"more-1"}`)
	if got := waitDetached(base + 1); got != base+1 {
		t.Fatalf("%d detached streams, want 1", got-base)
	}
	var pushed atomic.Int64
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Write(buf)
			pushed.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	// Once the connection's buffers are full, nothing more goes in: the
	// stream's reader took one byte and stopped.
	time.Sleep(300 * time.Millisecond)
	full := pushed.Load()
	time.Sleep(300 * time.Millisecond)
	if more := pushed.Load() - full; more > 64<<10 {
		t.Errorf("the server took %d more bytes after the connection's buffers filled: it reads what it drops", more)
	}
	if n := goroutinesIn("chatstream.(*lineWriter).watch"); n != 0 {
		t.Errorf("%d stream readers still reading after the client sent more", n)
	}
	all, err := io.ReadAll(resp.Body)
	if err != nil || !strings.Contains(string(all), `"content":"b"`) {
		t.Fatalf("stream: %v %s", err, all)
	}
}

// TestDetachedCancelOnDisconnectStuckClient: with WithCancelOnDisconnect, a
// detached stream whose client reads nothing until its write deadline
// stops the turn, as a request's stream does (net/http cancels a request
// whose write fails).
func TestDetachedCancelOnDisconnectStuckClient(t *testing.T) {
	stopped := make(chan error, 1)
	agent := chatstream.AgentFunc(func(ctx context.Context, _ chatstream.Turn, e chatstream.Emitter) error {
		for i := range bigPieces {
			if err := e.Content(strings.Repeat(string(rune('a'+i)), bigPiece)); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			stopped <- context.Cause(ctx)
		case <-time.After(10 * time.Second):
			stopped <- nil
		}
		return nil
	})
	e := newEnv(t, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux}, envOpts{agent: agent,
		opts: []chatstream.Option{chatstream.WithCancelOnDisconnect(true), chatstream.WithStreamWriteTimeout(300 * time.Millisecond)}})
	base := detachedStreams()
	rawStream(t, e.URL, `{"input":"go","sessionSettings":{"externalId":"stk"},"chatId":"stk-1"}`) // reads nothing more
	if got := waitDetached(base + 1); got != base+1 {
		t.Fatalf("%d detached streams, want 1", got-base)
	}
	if cause := <-stopped; cause == nil {
		t.Error("the turn ran on after its client stopped reading")
	}
}

// TestDetachedStreamKeepsHostDeadline: a deadline a host's middleware puts
// on the request's context still ends the stream once it is detached.
func TestDetachedStreamKeepsHostDeadline(t *testing.T) {
	agent := &chatstreamtest.ScriptedAgent{Events: []chatstreamtest.Event{
		chatstreamtest.Content("a"), chatstreamtest.Pause(time.Second), chatstreamtest.Content("b"),
	}}
	e := newEnv(t, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux}, envOpts{agent: agent})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 300*time.Millisecond)
		defer cancel()
		e.Config.Handler.ServeHTTP(w, r.WithContext(ctx))
	}))
	defer srv.Close()
	base := detachedStreams()
	_, resp := rawStream(t, srv.URL, `{"input":"go","sessionSettings":{"externalId":"dl"},"chatId":"dl-1"}`)
	if got := waitDetached(base + 1); got != base+1 {
		t.Fatalf("%d detached streams, want 1", got-base)
	}
	start := time.Now()
	all, _ := io.ReadAll(resp.Body)
	if strings.Contains(string(all), `"content":"b"`) || time.Since(start) > 900*time.Millisecond {
		t.Errorf("the stream outlived the host's deadline (%v): %s", time.Since(start), all)
	}
}

// TestDetachedStreamEndedByHostDeadlineEndsItsBody: a detached stream that
// a host's deadline ends, while its turn writes fast, still ends its
// chunked body properly (the client sees an incomplete stream, not a cut
// connection), as net/http ends a request's.
func TestDetachedStreamEndedByHostDeadlineEndsItsBody(t *testing.T) {
	agent := chatstream.AgentFunc(func(ctx context.Context, _ chatstream.Turn, e chatstream.Emitter) error {
		for end := time.Now().Add(400 * time.Millisecond); ctx.Err() == nil && time.Now().Before(end); {
			if err := e.Content("x"); err != nil {
				return err
			}
			time.Sleep(200 * time.Microsecond)
		}
		return nil
	})
	e := newEnv(t, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux}, envOpts{agent: agent})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 200*time.Millisecond)
		defer cancel()
		e.Config.Handler.ServeHTTP(w, r.WithContext(ctx))
	}))
	defer srv.Close()
	for i := range 12 {
		_, resp := rawStream(t, srv.URL, fmt.Sprintf(`{"input":"go","sessionSettings":{"externalId":"dlb"},"chatId":"dlb-%d"}`, i))
		if !resp.Close {
			t.Fatal("not detached")
		}
		if _, err := io.ReadAll(resp.Body); err != nil {
			t.Errorf("stream %d: %v: the body ended without its last chunk", i, err)
		}
		// The turn runs on after its stream: the next one waits for it,
		// or a slow machine would have more of the user's turns running
		// than its limit (429).
		for deadline := time.Now().Add(10 * time.Second); e.h.RunningTurns() != 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// blockingCluster is a Cluster whose Claim waits for its context.
type blockingCluster struct{ claiming, returned chan struct{} }

func (c *blockingCluster) Claim(ctx context.Context, _ chatstream.ThreadKey, _ int64, _ chatstream.TurnLimits) (chatstream.ClaimedTurn, error) {
	c.claiming <- struct{}{}
	<-ctx.Done()
	defer func() { c.returned <- struct{}{} }()
	return nil, fmt.Errorf("claim turn: %w", ctx.Err())
}

func (c *blockingCluster) Join(context.Context, chatstream.ThreadKey) (chatstream.RemoteTurn, bool, error) {
	return nil, false, nil
}

func (c *blockingCluster) Abort(context.Context, chatstream.ThreadKey) (bool, error) {
	return false, nil
}

// TestClientGoneDuringClaimNotLogged: a request whose client goes away
// while its turn's claim waits on the cluster is not logged as a failed
// request (503): nobody reads its answer, and the cluster did not fail.
func TestClientGoneDuringClaimNotLogged(t *testing.T) {
	logs := &logbuf.Buffer{}
	cl := &blockingCluster{claiming: make(chan struct{}, 1), returned: make(chan struct{}, 1)}
	e := newEnv(t, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux}, envOpts{opts: []chatstream.Option{
		chatstream.WithCluster(cl), chatstream.WithLogger(slog.New(slog.NewJSONHandler(logs, nil)))}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := collectErr(ctx, e.client, chatstream.Request{Input: "go", ChatID: "gone-claim", SessionSettings: ext("gone-claim")})
		done <- err
	}()
	<-cl.claiming
	cancel()
	<-done
	<-cl.returned
	time.Sleep(100 * time.Millisecond) // the handler answers after Claim returns
	if strings.Contains(logs.String(), "request failed") {
		t.Errorf("a request whose client left was logged as failed: %s", logs.String())
	}
}
