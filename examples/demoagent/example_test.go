package demoagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/analytics"
	"github.com/embedkit/embedkit/examples/demoagent"
)

// printer is a minimal [chatstream.Emitter] that prints tool calls and
// collects the content.
type printer struct{ content strings.Builder }

func (p *printer) Thinking(string) error { return nil }

func (p *printer) Content(piece string) error {
	p.content.WriteString(piece)
	return nil
}

func (p *printer) ToolCall(name string, input any) (chatstream.ToolCall, error) {
	fmt.Println("tool call:", name)
	return printedCall{}, nil
}

type printedCall struct{}

func (printedCall) Result(v any) error {
	if r, ok := v.(*analytics.SQLResult); ok {
		b, _ := json.Marshal(r.Data)
		fmt.Printf("rows: %s (totalRows %d)\n", b, r.TotalRows)
	}
	return nil
}

func (printedCall) Fail(msg string) error {
	fmt.Println("tool error:", msg)
	return nil
}

func Example() {
	agent, err := demoagent.New(demoagent.WithDelay(0))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer agent.Close()

	var p printer
	turn := chatstream.Turn{
		Input: "Top 3 categories by quantity",
		User:  chatstream.User{ExternalID: "jane", Attributes: map[string]any{"country": "Germany"}},
	}
	if err := agent.Answer(context.Background(), turn, &p); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.content.String())
	// Output:
	// tool call: svcMeta
	// tool call: svcSqlApi
	// rows: [["Beauty",381],["Clothing",364],["Books",349]] (totalRows 3)
	// Let me look that up in the sample shop data.
	//
	// Top 3 categories by quantity: Beauty leads with 381, followed by Clothing (364) and Books (349).
	//
	// Results are limited to your country: Germany.
}
