package llmagent_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/chatstreamtest"
	"github.com/embedkit/embedkit/chatstream/llmagent"
)

// BenchmarkAbort measures how long after an abort the model endpoint sees
// its request cancelled (metrics ms-to-cancel, the mean over b.N aborts,
// and max-ms-to-cancel, the slowest; the target is under 100 ms). Each iteration starts a turn whose model
// stream sends one piece and then stays open, aborts it once the piece has
// arrived, and waits until the fake endpoint's request context ends.
//
//   - agent: the turn's context is cancelled (what the chat handler does on
//     abort).
//   - handler: POST .../abort over HTTP to a real chat handler.
func BenchmarkAbort(b *testing.B) {
	b.Run("agent", func(b *testing.B) {
		f := newFake(b, reply{chunks: []string{role(), text("first")}, hang: true})
		a, _ := newAgent(b, f, nil)
		var total, slowest time.Duration
		for b.Loop() {
			ctx, cancel := context.WithCancelCause(context.Background())
			rec := &contentSignal{got: make(chan struct{}, 1)}
			done := make(chan error, 1)
			go func() { done <- a.Answer(ctx, chatstream.Turn{Input: "hi"}, rec) }()
			<-rec.got
			start := time.Now()
			cancel(errors.New("abort"))
			d := (<-f.cancelled).Sub(start)
			total, slowest = total+d, max(slowest, d)
			<-done
		}
		b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms-to-cancel")
		b.ReportMetric(float64(slowest.Microseconds())/1000, "max-ms-to-cancel")
	})
	b.Run("handler", func(b *testing.B) {
		f := newFake(b, reply{chunks: []string{role(), text("first")}, hang: true})
		a, _ := newAgent(b, f, nil)
		c := chatServer(b, a)
		user := chatstream.SessionSettings{ExternalID: "jane"}
		var total, slowest time.Duration
		for b.Loop() {
			var chatID string
			var start time.Time
			for m, err := range c.Stream(context.Background(), "acme", "7", chatstream.Request{Input: "hi", SessionSettings: &user}) {
				if err != nil {
					b.Fatal(err)
				}
				if m.ID == chatstream.CutoffID {
					chatID = m.State.ChatID
				}
				if m.IsDelta && m.Content == "first" {
					start = time.Now()
					if err := c.Abort(context.Background(), "acme", "7", chatID, user); err != nil {
						b.Fatal(err)
					}
				}
			}
			d := (<-f.cancelled).Sub(start)
			total, slowest = total+d, max(slowest, d)
		}
		b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms-to-cancel")
		b.ReportMetric(float64(slowest.Microseconds())/1000, "max-ms-to-cancel")
	})
}

var _ llmagent.Tool = (*fakeTool)(nil)

// BenchmarkTurn measures one turn with one tool round (two streamed model
// calls over loopback HTTP, one tool call) on the agent's side, fake
// endpoint included: what a turn costs besides the model itself.
func BenchmarkTurn(b *testing.B) {
	replies := []reply{
		{chunks: []string{role(), text("Let me check. "), toolStart(0, "c1", "t", `{"q":`), toolArgs(0, `"x"}`), finish("tool_calls"), usage(100, 20)}},
		say("Revenue ", "is ", "42."),
	}
	f := newFake(b, replies...)
	a, _ := newAgent(b, f, []llmagent.Tool{&fakeTool{name: "t", result: map[string]any{"data": [][]any{{42}}}}})
	b.ReportAllocs()
	for b.Loop() {
		f.reset(replies...)
		rec := &chatstreamtest.Recorder{}
		if err := a.Answer(context.Background(), chatstream.Turn{Input: "How is revenue?"}, rec); err != nil {
			b.Fatal(err)
		}
	}
}
