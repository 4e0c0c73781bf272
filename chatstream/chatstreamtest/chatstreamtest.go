// Package chatstreamtest helps test hosts of [chatstream]: a [ScriptedAgent]
// that replays a fixed list of events, and a [Recorder], an Emitter that
// records what an agent emits.
package chatstreamtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/embedkit/embedkit/chatstream"
)

// Kind is the kind of an [Event].
type Kind int

// The kinds of events a [ScriptedAgent] replays.
const (
	KindThinking Kind = iota + 1 // Text is emitted with Emitter.Thinking
	KindContent                  // Text is emitted with Emitter.Content
	KindTool                     // a tool call: Name, Input, then Result or Error
	KindError                    // the agent returns an error with Text
	KindPause                    // the agent waits Pause (or until ctx ends)
)

// Event is one step of a [ScriptedAgent].
type Event struct {
	Kind   Kind
	Text   string
	Name   string        // tool name
	Input  any           // tool input
	Result any           // tool result (when Error is "")
	Error  string        // tool error: the call fails with it
	Pause  time.Duration // KindPause
}

// Thinking returns a thinking event.
func Thinking(text string) Event { return Event{Kind: KindThinking, Text: text} }

// Content returns a content event.
func Content(text string) Event { return Event{Kind: KindContent, Text: text} }

// Tool returns a tool call event completed with result.
func Tool(name string, input, result any) Event {
	return Event{Kind: KindTool, Name: name, Input: input, Result: result}
}

// ToolError returns a tool call event that fails with msg.
func ToolError(name string, input any, msg string) Event {
	return Event{Kind: KindTool, Name: name, Input: input, Error: msg}
}

// Fail returns an event that makes the agent return an error with msg.
func Fail(msg string) Event { return Event{Kind: KindError, Text: msg} }

// Pause returns an event that makes the agent wait d (or until its context
// ends).
func Pause(d time.Duration) Event { return Event{Kind: KindPause, Pause: d} }

// ScriptedAgent is a [chatstream.Agent] that replays Events for every turn.
// Between events it waits Delay (when positive). It honours its context:
// once ctx ends it returns ctx's cause. It is safe for concurrent use.
type ScriptedAgent struct {
	Events []Event
	Delay  time.Duration
}

// Answer replays the script.
func (a *ScriptedAgent) Answer(ctx context.Context, _ chatstream.Turn, e chatstream.Emitter) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	wait := func(d time.Duration) error {
		if d <= 0 {
			return context.Cause(ctx)
		}
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-timer.C:
			return nil
		}
	}
	for i, ev := range a.Events {
		if i > 0 && a.Delay > 0 {
			if err := wait(a.Delay); err != nil {
				return err
			}
		} else if err := context.Cause(ctx); err != nil {
			return err
		}
		var err error
		switch ev.Kind {
		case KindThinking:
			err = e.Thinking(ev.Text)
		case KindContent:
			err = e.Content(ev.Text)
		case KindTool:
			var tc chatstream.ToolCall
			if tc, err = e.ToolCall(ev.Name, ev.Input); err == nil {
				if ev.Error != "" {
					err = tc.Fail(ev.Error)
				} else {
					err = tc.Result(ev.Result)
				}
			}
		case KindError:
			return errors.New(ev.Text)
		case KindPause:
			err = wait(ev.Pause)
		default:
			return fmt.Errorf("chatstreamtest: unknown event kind %d", ev.Kind)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Recorded is one call an agent made on a [Recorder].
type Recorded struct {
	Kind   Kind   // KindThinking, KindContent or KindTool
	Text   string // thinking or content
	Name   string // tool name
	Input  string // tool input as JSON
	Result string // tool result as JSON ({"error": msg} for Fail); "" while open
}

// Recorder is a [chatstream.Emitter] that records what an agent emits, to
// unit-test an agent without HTTP. It checks the same rules as the real
// emitter: no content or tool call while a tool call is open, one result
// per call. It is safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	events []Recorded
	open   int // index of the open tool call, or -1 when none (after the first use)
	inited bool
}

func (r *Recorder) init() {
	if !r.inited {
		r.inited = true
		r.open = -1
	}
}

// Events returns a copy of what was recorded.
func (r *Recorder) Events() []Recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Recorded(nil), r.events...)
}

// Text returns the concatenated content pieces.
func (r *Recorder) Text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := ""
	for _, e := range r.events {
		if e.Kind == KindContent {
			s += e.Text
		}
	}
	return s
}

// Thinking records reasoning.
func (r *Recorder) Thinking(text string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.init()
	if r.open >= 0 {
		return chatstream.ErrToolCallOpen
	}
	r.events = append(r.events, Recorded{Kind: KindThinking, Text: text})
	return nil
}

// Content records a content piece.
func (r *Recorder) Content(piece string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.init()
	if r.open >= 0 {
		return chatstream.ErrToolCallOpen
	}
	r.events = append(r.events, Recorded{Kind: KindContent, Text: piece})
	return nil
}

// ToolCall records the start of a tool call.
func (r *Recorder) ToolCall(name string, input any) (chatstream.ToolCall, error) {
	b, err := json.Marshal(input)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.init()
	if r.open >= 0 {
		return nil, chatstream.ErrToolCallOpen
	}
	r.open = len(r.events)
	r.events = append(r.events, Recorded{Kind: KindTool, Name: name, Input: string(b)})
	return &recordedCall{r: r, i: r.open}, nil
}

type recordedCall struct {
	r *Recorder
	i int
}

// Result records the call's result.
func (c *recordedCall) Result(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.end(string(b))
}

// Fail records {"error": msg} as the call's result.
func (c *recordedCall) Fail(msg string) error {
	b, _ := json.Marshal(map[string]string{"error": msg})
	return c.end(string(b))
}

func (c *recordedCall) end(result string) error {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	if c.r.open != c.i {
		return chatstream.ErrToolCallDone
	}
	c.r.open = -1
	c.r.events[c.i].Result = result
	return nil
}
