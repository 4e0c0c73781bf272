package demoagent_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/embedkit/embedkit/chatstream"
)

// event is one thing an agent emitted.
type event struct {
	kind   string // "thinking", "content" or "tool"
	text   string // thinking or content text
	tool   string
	input  string // JSON
	result string // JSON; {"error": ...} when failed
	failed bool
	ended  bool
}

// recorder is an Emitter that keeps what the agent emits and checks the
// Emitter contract: a tool call is ended, once, before the next emission.
type recorder struct {
	mu      sync.Mutex
	events  []*event
	errs    []string
	over    bool // after end: every method fails, like a finished turn
	onEvent func(r *recorder, e *event)
}

var errTurnOver = fmt.Errorf("turn is over")

func (r *recorder) add(e *event) error {
	r.mu.Lock()
	if r.over {
		r.mu.Unlock()
		return errTurnOver
	}
	if n := len(r.events); n > 0 && r.events[n-1].kind == "tool" && !r.events[n-1].ended {
		r.errs = append(r.errs, fmt.Sprintf("%s emitted before tool call %s ended", e.kind, r.events[n-1].tool))
	}
	r.events = append(r.events, e)
	cb := r.onEvent
	r.mu.Unlock()
	if cb != nil {
		cb(r, e)
	}
	return nil
}

func (r *recorder) end() {
	r.mu.Lock()
	r.over = true
	r.mu.Unlock()
}

func (r *recorder) Thinking(text string) error {
	return r.add(&event{kind: "thinking", text: text})
}

func (r *recorder) Content(piece string) error {
	return r.add(&event{kind: "content", text: piece})
}

func (r *recorder) ToolCall(name string, input any) (chatstream.ToolCall, error) {
	b, err := json.Marshal(input)
	if err != nil {
		return nil, err
	}
	e := &event{kind: "tool", tool: name, input: string(b)}
	if err := r.add(e); err != nil {
		return nil, err
	}
	return &recordedCall{r: r, e: e}, nil
}

type recordedCall struct {
	r *recorder
	e *event
}

func (c *recordedCall) finish(v any, failed bool) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	if c.r.over {
		return errTurnOver
	}
	if c.e.ended {
		c.r.errs = append(c.r.errs, "tool call "+c.e.tool+" ended twice")
	}
	c.e.result, c.e.failed, c.e.ended = string(b), failed, true
	return nil
}

func (c *recordedCall) Result(v any) error { return c.finish(v, false) }

func (c *recordedCall) Fail(msg string) error {
	return c.finish(map[string]string{"error": msg}, true)
}

// content is the concatenated content.
func (r *recorder) content() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, e := range r.events {
		if e.kind == "content" {
			b.WriteString(e.text)
		}
	}
	return b.String()
}

// tools returns the tool call events.
func (r *recorder) tools() []*event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*event
	for _, e := range r.events {
		if e.kind == "tool" {
			out = append(out, e)
		}
	}
	return out
}

// count returns how many events of kind were emitted.
func (r *recorder) count(kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.kind == kind {
			n++
		}
	}
	return n
}
