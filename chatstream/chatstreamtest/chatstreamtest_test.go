package chatstreamtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/chatstreamtest"
)

func TestScriptedAgentWithRecorder(t *testing.T) {
	a := &chatstreamtest.ScriptedAgent{Events: []chatstreamtest.Event{
		chatstreamtest.Thinking("hmm"),
		chatstreamtest.Content("a"),
		chatstreamtest.Tool("svcMeta", map[string]string{"searchQuery": "x"}, []int{1}),
		chatstreamtest.ToolError("svcSqlApi", nil, "bad branch"),
		chatstreamtest.Pause(time.Millisecond),
		chatstreamtest.Content("b"),
	}}
	var r chatstreamtest.Recorder
	if err := a.Answer(t.Context(), chatstream.Turn{}, &r); err != nil {
		t.Fatal(err)
	}
	if r.Text() != "ab" {
		t.Errorf("Text = %q", r.Text())
	}
	ev := r.Events()
	if len(ev) != 5 {
		t.Fatalf("events = %+v", ev)
	}
	if ev[2].Input != `{"searchQuery":"x"}` || ev[2].Result != "[1]" {
		t.Errorf("tool = %+v", ev[2])
	}
	if ev[3].Result != `{"error":"bad branch"}` {
		t.Errorf("failed tool = %+v", ev[3])
	}
}

func TestScriptedAgentError(t *testing.T) {
	a := &chatstreamtest.ScriptedAgent{Events: []chatstreamtest.Event{chatstreamtest.Fail("boom")}}
	if err := a.Answer(t.Context(), chatstream.Turn{}, &chatstreamtest.Recorder{}); err == nil || err.Error() != "boom" {
		t.Errorf("err = %v", err)
	}
}

func TestScriptedAgentHonoursContext(t *testing.T) {
	a := &chatstreamtest.ScriptedAgent{Events: []chatstreamtest.Event{chatstreamtest.Pause(time.Hour)}}
	cause := errors.New("aborted")
	ctx, cancel := context.WithCancelCause(t.Context())
	time.AfterFunc(10*time.Millisecond, func() { cancel(cause) })
	start := time.Now()
	if err := a.Answer(ctx, chatstream.Turn{}, &chatstreamtest.Recorder{}); !errors.Is(err, cause) {
		t.Errorf("err = %v, want the context's cause", err)
	}
	if time.Since(start) > time.Second {
		t.Error("did not return promptly")
	}
}

func TestRecorderRules(t *testing.T) {
	var r chatstreamtest.Recorder
	tc, err := r.ToolCall("t", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Content("x"); !errors.Is(err, chatstream.ErrToolCallOpen) {
		t.Errorf("Content during a tool call: %v", err)
	}
	if err := tc.Result(2); err != nil {
		t.Fatal(err)
	}
	if err := tc.Fail("x"); !errors.Is(err, chatstream.ErrToolCallDone) {
		t.Errorf("second result: %v", err)
	}
}
