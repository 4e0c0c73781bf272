package chatstream_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/logbuf"
	"github.com/embedkit/embedkit/store"
)

// bigAgent answers with 6 content pieces of 1 MiB: its stream (the pieces,
// the final message and __state__ with the history, 18 MiB) is several
// times what a connection's buffers hold when the client reads nothing.
const (
	bigPieces = 6
	bigPiece  = 1 << 20
)

var bigAgent = chatstream.AgentFunc(func(ctx context.Context, _ chatstream.Turn, e chatstream.Emitter) error {
	for i := range bigPieces {
		if err := e.Content(strings.Repeat(string(rune('a'+i)), bigPiece)); err != nil {
			return err
		}
	}
	return nil
})

// waitStoredAnswer polls the store until the thread chatID holds an
// assistant message of want bytes, and reports whether it did within 30 s.
func waitStoredAnswer(t *testing.T, e *env, chatID string, want int) bool {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		msgs, err := e.Store.Messages(t.Context(), e.Accounts[acct].ID, chatID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("messages: %v", err)
		}
		for _, m := range msgs {
			var sm chatstream.Message
			if err := json.Unmarshal(m.Body, &sm); err != nil {
				t.Fatal(err)
			}
			if sm.Role == chatstream.RoleAssistant && !sm.IsInProcess && len(sm.Content) == want {
				return true
			}
		}
	}
	return false
}

// TestNonReadingClientIsDisconnected starts a turn from a client that sends
// its request and then reads nothing: once the connection's buffers are
// full, the stream's write deadline closes it, while the turn runs on to
// completion and is stored.
func TestNonReadingClientIsDisconnected(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		t.Parallel()
		e := newEnv(t, tg, envOpts{agent: bigAgent, opts: []chatstream.Option{chatstream.WithStreamWriteTimeout(50 * time.Millisecond)}})
		conn, err := net.Dial("tcp", strings.TrimPrefix(e.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		body := jsonOf(t, chatstream.Request{Input: "big", ChatID: "never-reads", SessionSettings: ext("slowpoke")})
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: test\r\nConnection: close\r\nAuthorization: Api-Key %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			streamPath(acct, agentID), apitest.AdminKey, len(body), body)

		// The turn completes and is stored in full.
		if !waitStoredAnswer(t, e, "never-reads", bigPieces*bigPiece) {
			t.Fatal("the answer was not stored")
		}

		// The stream was cut: what the client can still read ends before
		// __state__ (a stream served to the end would carry it).
		_ = conn.SetReadDeadline(time.Now().Add(time.Minute)) // a guard against a hang, not an assertion
		got, err := io.ReadAll(conn)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the server never closed the stream of a client that did not read")
		}
		if !bytes.Contains(got, []byte(chatstream.CutoffID)) {
			t.Fatalf("the stream did not start: %.200q", got)
		}
		if bytes.Contains(got, []byte(`"id":"`+chatstream.StateID+`"`)) {
			t.Fatalf("the stream was served to the end (%d bytes): the write deadline did not close it", len(got))
		}
	})
}

// plainWriter hides every optional method of the ResponseWriter it wraps,
// as some logging middleware does: no Flush, no Unwrap.
type plainWriter struct{ w http.ResponseWriter }

func (p plainWriter) Header() http.Header         { return p.w.Header() }
func (p plainWriter) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p plainWriter) WriteHeader(code int)        { p.w.WriteHeader(code) }

// flushOnlyWriter has Flush but no Unwrap.
type flushOnlyWriter struct{ plainWriter }

func (f flushOnlyWriter) Flush() { f.w.(http.Flusher).Flush() }

// TestWriterWithoutFlush mounts the chat routes behind ResponseWriter
// wrappers that cannot flush or take a deadline: every line still arrives,
// and the handler logs exactly one warning naming the missing methods.
func TestWriterWithoutFlush(t *testing.T) {
	wrappers := []struct {
		name    string
		wrap    func(http.ResponseWriter) http.ResponseWriter
		missing string
	}{
		{"no Flush, no Unwrap", func(w http.ResponseWriter) http.ResponseWriter { return plainWriter{w} }, "lacks Flush and Unwrap methods"},
		{"Flush without Unwrap", func(w http.ResponseWriter) http.ResponseWriter { return flushOnlyWriter{plainWriter{w}} }, "lacks an Unwrap method"},
		// The standard library's own: the warning says what to do.
		{"http.TimeoutHandler", nil, "http.TimeoutHandler holds the whole response until the handler returns: mount the chat routes outside it"},
	}
	tg := apitest.Target{Backend: "sqlite", Router: apitest.ServeMux}
	ref := newEnv(t, tg, envOpts{})
	want := collect(t, ref.client, chatstream.Request{Input: "hi", SessionSettings: ext("jane")})
	for _, wr := range wrappers {
		t.Run(wr.name, func(t *testing.T) {
			var logs logbuf.Buffer
			var h *chatstream.Handler
			s := apitest.New(t, tg, apitest.WithRoutes(func(s *apitest.Server) []apitest.Route {
				h = chatstream.NewHandler(s.Store, testScripts(), chatstream.WithClock(s.Now),
					chatstream.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
				var rs []apitest.Route
				for _, r := range h.Routes() {
					inner := r.Handler
					r.Handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { inner.ServeHTTP(wr.wrap(w), req) })
					if wr.wrap == nil {
						r.Handler = http.TimeoutHandler(inner, time.Minute, "timeout")
					}
					rs = append(rs, apitest.Route(r))
				}
				return rs
			}))
			t.Cleanup(func() { _ = h.Close() })
			c := chatstream.NewClient(s.URL, chatstream.WithAPIKey(apitest.AdminKey), chatstream.WithHTTPClient(s.Client()))
			for i := range 3 {
				got, err := collectErr(t.Context(), c, chatstream.Request{Input: "hi", SessionSettings: ext("jane")})
				if err != nil {
					t.Fatalf("stream %d: %v", i, err)
				}
				if i == 0 && len(got) != len(want) {
					t.Fatalf("stream %d: %d lines, want %d", i, len(got), len(want))
				}
				if last(got).ID != chatstream.StateID || last(got).State.Error != "" {
					t.Fatalf("stream %d ends with %+v", i, last(got))
				}
				gotFinal, _ := conv(got).FinalAnswer()
				wantFinal, _ := conv(want).FinalAnswer()
				if gotFinal.Content == "" || gotFinal.Content != wantFinal.Content {
					t.Fatalf("stream %d: answer %q, want %q", i, gotFinal.Content, wantFinal.Content)
				}
			}
			// A state request goes through the same writer.
			if got, err := collectErr(t.Context(), c, chatstream.Request{ChatID: "x-none", SessionSettings: ext("jane")}); err == nil || apiStatus(err) != http.StatusNotFound {
				t.Fatalf("unknown chat: %v %v", got, err)
			}
			if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
				t.Fatalf("%d warnings, want 1:\n%s", n, logs.String())
			}
			if !strings.Contains(logs.String(), wr.missing) {
				t.Errorf("the warning does not say %q:\n%s", wr.missing, logs.String())
			}
		})
	}
}

// TestClientReportsCutStream: a stream that ends before __state__ is an
// error for the Go client, after the lines that did arrive.
func TestClientReportsCutStream(t *testing.T) {
	const (
		cutoff = `{"id":"__cutoff__","role":"system","content":"","isDelta":false,"isInProcess":false,"sort":0,"state":{"chatId":"c"}}`
		line   = `{"id":"m1","role":"assistant","content":"par","isDelta":true,"isInProcess":true,"sort":2}`
		state  = `{"id":"__state__","role":"system","content":"","isDelta":false,"isInProcess":false,"sort":3,"state":{"chatId":"c","messages":[]}}`
	)
	for _, c := range []struct {
		name  string
		body  string
		lines int
		err   error
	}{
		{"cut after a line", cutoff + "\n" + line + "\n", 2, chatstream.ErrIncompleteStream},
		{"cut mid-line", cutoff + "\n" + line[:20], 1, nil}, // a broken line: its own error
		{"empty", "", 0, chatstream.ErrIncompleteStream},
		{"complete", cutoff + "\n" + line + "\n" + state + "\n", 3, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", chatstream.ContentType)
				_, _ = io.WriteString(w, c.body)
			}))
			defer srv.Close()
			cl := chatstream.NewClient(srv.URL)
			msgs, err := collectErr(t.Context(), cl, chatstream.Request{Input: "x"})
			if len(msgs) != c.lines {
				t.Errorf("%d messages, want %d", len(msgs), c.lines)
			}
			switch {
			case c.name == "complete" && err != nil:
				t.Errorf("complete stream: %v", err)
			case c.name == "cut mid-line" && (err == nil || errors.Is(err, chatstream.ErrIncompleteStream)):
				t.Errorf("broken line: %v, want a bad line error", err)
			case c.err != nil && !errors.Is(err, c.err):
				t.Errorf("err = %v, want %v", err, c.err)
			}
		})
	}
}

// TestWriteDeadlineSparesIdleStreams: a stream whose agent pauses longer
// than the write timeout between lines is not cut, over HTTP/1.1 and over
// HTTP/2 (where a write deadline that passes resets the stream even while
// nothing is written): the deadline covers writes only.
func TestWriteDeadlineSparesIdleStreams(t *testing.T) {
	e := newEnv(t, apitest.Target{Backend: "sqlite", Router: apitest.ServeMux}, envOpts{
		opts: []chatstream.Option{chatstream.WithStreamWriteTimeout(200 * time.Millisecond)}})
	h2 := httptest.NewUnstartedServer(e.Config.Handler)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	t.Cleanup(h2.Close)
	for _, c := range []struct {
		name   string
		client *chatstream.Client
		proto  int
	}{
		{"HTTP/1.1", e.client, 1},
		{"HTTP/2", chatstream.NewClient(h2.URL, chatstream.WithAPIKey(apitest.AdminKey), chatstream.WithHTTPClient(h2.Client())), 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			// "wait" pauses 300 ms between its two pieces, longer than the
			// 200 ms write timeout.
			msgs, err := collectErr(t.Context(), c.client, chatstream.Request{Input: "wait", SessionSettings: ext(fmt.Sprintf("idle-%d", c.proto))})
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			final, _ := conv(msgs).FinalAnswer()
			if final.Content != "start done" || last(msgs).State == nil || last(msgs).State.Error != "" {
				t.Fatalf("answer %q, last line %+v", final.Content, last(msgs))
			}
		})
	}
	// The HTTP/2 client really spoke HTTP/2.
	resp, err := h2.Client().Get(h2.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("protocol %s, want HTTP/2", resp.Proto)
	}
}

// TestClientRefusesInvalidText: the Go client does not send a request
// holding a string that is not valid UTF-8 (encoding/json would replace
// its invalid bytes with U+FFFD, making "col\xff" and "col\xfe" one user).
func TestClientRefusesInvalidText(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { calls.Add(1) }))
	defer srv.Close()
	c := chatstream.NewClient(srv.URL)
	for _, c2 := range []struct {
		field string
		req   chatstream.Request
	}{
		{"input", chatstream.Request{Input: "a\xffb", SessionSettings: ext("a")}},
		{"chatId", chatstream.Request{Input: "x", ChatID: "c\xfe", SessionSettings: ext("a")}},
		{"activeBranchName", chatstream.Request{Input: "x", ActiveBranchName: "\xc3", SessionSettings: ext("a")}},
		{"sessionSettings.externalId", chatstream.Request{Input: "x", SessionSettings: ext("col\xff")}},
		{"sessionSettings.email", chatstream.Request{Input: "x", SessionSettings: &chatstream.SessionSettings{ExternalID: "a", Email: new("a\xff@x.test")}}},
		{"sessionSettings.groups[1]", chatstream.Request{Input: "x", SessionSettings: &chatstream.SessionSettings{ExternalID: "a", Groups: []string{"ok", "g\xff"}}}},
		{"sessionSettings.userAttributes[0].name", chatstream.Request{Input: "x", SessionSettings: &chatstream.SessionSettings{ExternalID: "a",
			UserAttributes: []chatstream.UserAttribute{{Name: "n\xff", Value: "v"}}}}},
		{"sessionSettings.userAttributes[0].value", chatstream.Request{Input: "x", SessionSettings: &chatstream.SessionSettings{ExternalID: "a",
			UserAttributes: []chatstream.UserAttribute{{Name: "n", Value: []string{"ok", "v\xff"}}}}}},
	} {
		_, err := collectErr(t.Context(), c, c2.req)
		if err == nil || !strings.Contains(err.Error(), c2.field+" must be valid UTF-8") {
			t.Errorf("%s: %v, want a refusal naming the field", c2.field, err)
		}
	}
	if err := c.Abort(t.Context(), acct, agentID, "c", chatstream.SessionSettings{ExternalID: "col\xfe"}); err == nil {
		t.Error("abort with invalid text was sent")
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("%d requests reached the server", n)
	}
}

// TestNonReadingClientIsDisconnectedHTTP2: over HTTP/2 a client that does
// not read its response body stops granting flow-control window; the
// stream's write deadline resets the stream while the turn is stored.
func TestNonReadingClientIsDisconnectedHTTP2(t *testing.T) {
	e := newEnv(t, apitest.Target{Backend: "sqlite", Router: apitest.ServeMux}, envOpts{agent: bigAgent,
		opts: []chatstream.Option{chatstream.WithStreamWriteTimeout(50 * time.Millisecond)}})
	h2 := httptest.NewUnstartedServer(e.Config.Handler)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	t.Cleanup(h2.Close)
	body := jsonOf(t, chatstream.Request{Input: "big", ChatID: "never-reads-h2", SessionSettings: ext("slowpoke")})
	req, err := http.NewRequest(http.MethodPost, h2.URL+streamPath(acct, agentID), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Api-Key "+apitest.AdminKey)
	resp, err := h2.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("protocol %s, want HTTP/2", resp.Proto)
	}
	// Read nothing until the turn is stored in full.
	if !waitStoredAnswer(t, e, "never-reads-h2", bigPieces*bigPiece) {
		t.Fatal("the answer was not stored")
	}
	got, err := io.ReadAll(resp.Body)
	if err == nil && bytes.Contains(got, []byte(`"id":"`+chatstream.StateID+`"`)) {
		t.Fatalf("the stream was served to the end (%d bytes): the write deadline did not reset it", len(got))
	}
	if !bytes.Contains(got, []byte(chatstream.CutoffID)) {
		t.Fatalf("the stream did not start: %v", err)
	}
}
