package chatstreamtest_test

import (
	"context"
	"fmt"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/chatstreamtest"
)

// An agent of the host's, unit-tested without HTTP or a store: the
// Recorder stands in for the turn's emitter and checks the same rules.
func ExampleRecorder() {
	agent := chatstream.AgentFunc(func(ctx context.Context, t chatstream.Turn, e chatstream.Emitter) error {
		call, err := e.ToolCall("svcMeta", map[string]string{"searchQuery": t.Input})
		if err != nil {
			return err
		}
		if err := call.Result([]string{"orders"}); err != nil {
			return err
		}
		return e.Content("Found the orders cube.")
	})

	var r chatstreamtest.Recorder
	err := agent.Answer(context.Background(), chatstream.Turn{Input: "orders"}, &r)
	for _, ev := range r.Events() {
		if ev.Kind == chatstreamtest.KindTool {
			fmt.Println("tool", ev.Name, ev.Input, "->", ev.Result)
		} else {
			fmt.Printf("text %q\n", ev.Text)
		}
	}
	fmt.Println(err)
	// Output:
	// tool svcMeta {"searchQuery":"orders"} -> ["orders"]
	// text "Found the orders cube."
	// <nil>
}

// A ScriptedAgent replays the same events on every turn: a stand-in for
// the real agent in a host's HTTP tests (hand it to chatstream.NewHandler).
func ExampleScriptedAgent() {
	agent := &chatstreamtest.ScriptedAgent{Events: []chatstreamtest.Event{
		chatstreamtest.Thinking("Looking at revenue."),
		chatstreamtest.Tool("svcSqlApi", map[string]string{"sql": "SELECT 1"}, [][]int{{1}}),
		chatstreamtest.Content("Revenue "),
		chatstreamtest.Content("grew."),
	}}
	var r chatstreamtest.Recorder
	err := agent.Answer(context.Background(), chatstream.Turn{}, &r)
	fmt.Println(len(r.Events()), r.Text(), err)
	// Output: 4 Revenue grew. <nil>
}
