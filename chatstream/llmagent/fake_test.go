package llmagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
)

// fakeLLM is an OpenAI-compatible Chat Completions server on loopback that
// speaks the real streaming protocol: text/event-stream, one
// "data: {chat.completion.chunk}" event per chunk, "data: [DONE]" at the
// end. It answers the requests in order with its replies (the last one
// repeats) and records what it got.
type fakeLLM struct {
	srv *httptest.Server

	mu       sync.Mutex
	replies  []reply
	requests []request
	// cancelled receives the time a request's context ended while its
	// reply was still being written (the client went away).
	cancelled chan time.Time
}

// request is one request the fake got.
type request struct {
	Header http.Header
	Path   string
	Body   map[string]any
}

// reply is how the fake answers one request.
type reply struct {
	status int               // non-zero: an error reply with body
	body   string            // error body
	header map[string]string // extra response headers

	chunks []string      // chunk JSON objects; one starting with ':' is sent as an SSE comment
	delay  time.Duration // before each chunk
	cut    bool          // drop the connection after the chunks
	hang   bool          // after the chunks, wait until the client goes away
	noDone bool          // end without data: [DONE]
}

func newFake(t testing.TB, replies ...reply) *fakeLLM {
	f := &fakeLLM{replies: replies, cancelled: make(chan time.Time, 64)}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeLLM) url() string { return f.srv.URL + "/v1" }

// reset sets the replies of the next requests and forgets the earlier
// requests.
func (f *fakeLLM) reset(r ...reply) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replies = r
	f.requests = nil
}

func (f *fakeLLM) reqs() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.requests...)
}

func (f *fakeLLM) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(b, &body)
	f.mu.Lock()
	n := len(f.requests)
	f.requests = append(f.requests, request{Header: r.Header.Clone(), Path: r.URL.Path, Body: body})
	rp := f.replies[min(n, len(f.replies)-1)]
	f.mu.Unlock()

	for k, v := range rp.header {
		w.Header().Set(k, v)
	}
	if rp.status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rp.status)
		_, _ = io.WriteString(w, rp.body)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flush := func() { _ = http.NewResponseController(w).Flush() }
	flush()
	gone := func() bool {
		select {
		case <-r.Context().Done():
			f.cancelled <- time.Now()
			return true
		default:
			return false
		}
	}
	for _, c := range rp.chunks {
		if rp.delay > 0 {
			select {
			case <-r.Context().Done():
				f.cancelled <- time.Now()
				return
			case <-time.After(rp.delay):
			}
		}
		if gone() {
			return
		}
		if strings.HasPrefix(c, ":") {
			fmt.Fprintf(w, "%s\n\n", c) // an SSE comment
		} else {
			fmt.Fprintf(w, "data: %s\n\n", c)
		}
		flush()
	}
	if rp.hang {
		<-r.Context().Done()
		f.cancelled <- time.Now()
		return
	}
	if rp.cut {
		panic(http.ErrAbortHandler) // the connection is dropped mid-stream
	}
	if !rp.noDone {
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
		flush()
	}
}

// Chunk builders. Each returns one chat.completion.chunk object.

func chunk(delta map[string]any, finish any) string {
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000, "model": "fake-model",
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}},
	})
	return string(b)
}

func role() string { return chunk(map[string]any{"role": "assistant", "content": ""}, nil) }

func text(s string) string { return chunk(map[string]any{"content": s}, nil) }

func reasoning(field, s string) string { return chunk(map[string]any{field: s}, nil) }

func finish(reason string) string { return chunk(map[string]any{}, reason) }

// toolStart opens tool call index with its id and name and the first piece
// of its arguments; toolArgs continues them.
func toolStart(index int, id, name, args string) string {
	return chunk(map[string]any{"tool_calls": []any{map[string]any{
		"index": index, "id": id, "type": "function", "function": map[string]any{"name": name, "arguments": args},
	}}}, nil)
}

func toolArgs(index int, args string) string {
	return chunk(map[string]any{"tool_calls": []any{map[string]any{
		"index": index, "function": map[string]any{"arguments": args},
	}}}, nil)
}

// usage is the last chunk of a stream with stream_options.include_usage.
func usage(prompt, completion int) string {
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000, "model": "fake-model",
		"choices": []any{},
		"usage":   map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
	})
	return string(b)
}

// say is a complete reply streaming the pieces of an answer.
func say(pieces ...string) reply {
	c := []string{role()}
	for _, p := range pieces {
		c = append(c, text(p))
	}
	return reply{chunks: append(c, finish("stop"), usage(10, 5))}
}

// fakeTool is a Tool with a fixed result or error that records its calls.
type fakeTool struct {
	name   string
	result any
	err    error

	mu    sync.Mutex
	calls []string
	turns []chatstream.Turn
}

func (t *fakeTool) Name() string        { return t.name }
func (t *fakeTool) Description() string { return "The fake tool " + t.name + "." }
func (t *fakeTool) Parameters() map[string]any {
	return map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}}
}

func (t *fakeTool) Call(ctx context.Context, tu chatstream.Turn, args json.RawMessage) (any, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls = append(t.calls, string(args))
	t.turns = append(t.turns, tu)
	return t.result, t.err
}

func (t *fakeTool) called() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.calls...)
}
