package llmagent_test

import (
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/telemetry"
	"github.com/embedkit/embedkit/internal/telemetry/telemetrytest"
)

// TestModelCallSpan: inside a chat turn, each model request is a GenAI
// "chat {model}" span, a child of the turn's span, carrying the request
// model and the usage the endpoint reported.
func TestModelCallSpan(t *testing.T) {
	f := newFake(t, reply{chunks: []string{role(), text("Hi."), finish("stop"), usage(50, 10)}})
	a, _ := newAgent(t, f, nil)
	rec := telemetrytest.New(t)
	c := chatServer(t, a, chatstream.WithTracerProvider(rec.TracerProvider), chatstream.WithMeterProvider(rec.MeterProvider))
	stream(t, c, chatstream.Request{Input: "hello"})

	var turn, calls = rec.Ended("invoke_agent"), rec.Ended("chat fake-model")
	for deadline := time.Now().Add(5 * time.Second); (len(turn) == 0 || len(calls) == 0) && time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond) // the spans end as the handler returns
		turn, calls = rec.Ended("invoke_agent"), rec.Ended("chat fake-model")
	}
	if len(turn) != 1 || len(calls) != 1 {
		t.Fatalf("%d turn spans, %d model-call spans; want 1 and 1", len(turn), len(calls))
	}
	mc := calls[0]
	if mc.Parent().SpanID() != turn[0].SpanContext().SpanID() {
		t.Error("the model call is not a child of the turn")
	}
	got := map[string]string{}
	for _, kv := range mc.Attributes() {
		got[string(kv.Key)] = kv.Value.Emit()
	}
	for k, want := range map[string]string{
		string(telemetry.GenAIOperationName): "chat",
		string(telemetry.GenAIRequestModel):  "fake-model",
		string(telemetry.GenAIResponseModel): "fake-model",
		string(telemetry.GenAIUsageInput):    "50",
		string(telemetry.GenAIUsageOutput):   "10",
	} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q (all: %v)", k, got[k], want, got)
		}
	}
}
