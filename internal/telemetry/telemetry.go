// Package telemetry holds the OpenTelemetry instrumentation shared by
// embedkit's handlers: a span and the request metric per route, the chat
// turn and tool-call spans, the chat metrics, limit rejections, model calls
// after the GenAI conventions, and the scrubbing of ?sessionId= from URLs
// and log lines.
//
// It uses OpenTelemetry's API only. The host supplies the tracer and meter
// providers through the handlers' options; without them the global ones
// (otel.GetTracerProvider, otel.GetMeterProvider) are used, which do
// nothing until the host sets them.
package telemetry

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of what is not tied to one
// package (model calls and limit rejections outside a route).
const ScopeName = "github.com/embedkit/embedkit"

// Names of the metrics.
const (
	MetricRequestDuration = "http.server.request.duration"
	MetricTurnDuration    = "embedkit.chat.turn.duration"
	MetricTurnsRunning    = "embedkit.chat.turns.running"
	MetricStreamLines     = "embedkit.chat.stream.lines"
	MetricToolCalls       = "embedkit.chat.tool_calls"
	MetricLimitRejections = "embedkit.limit.rejections"
	MetricGenAIDuration   = "gen_ai.client.operation.duration"
	MetricGenAITokens     = "gen_ai.client.token.usage"
)

// Attribute keys of our own (the others come from OpenTelemetry's semantic
// conventions).
const (
	// AttrTurnOutcome is how a turn or a tool call ended: done, error,
	// aborted, deadline or shutdown (turns); done or failed (tool calls).
	AttrTurnOutcome = attribute.Key("embedkit.chat.turn.outcome")
	// AttrToolOutcome is how a tool call ended: done, failed or
	// unfinished (the turn ended first).
	AttrToolOutcome = attribute.Key("embedkit.chat.tool.outcome")
	// AttrLimit names the limit that rejected a request.
	AttrLimit = attribute.Key("embedkit.limit.name")
)

// Keys of the GenAI semantic conventions. OpenTelemetry's Go semconv
// packages no longer carry them (they are still in development), so they are
// spelled out here.
const (
	GenAIOperationName    = attribute.Key("gen_ai.operation.name")
	GenAIProviderName     = attribute.Key("gen_ai.provider.name")
	GenAIRequestModel     = attribute.Key("gen_ai.request.model")
	GenAIResponseModel    = attribute.Key("gen_ai.response.model")
	GenAIUsageInput       = attribute.Key("gen_ai.usage.input_tokens")
	GenAIUsageOutput      = attribute.Key("gen_ai.usage.output_tokens")
	GenAITokenType        = attribute.Key("gen_ai.token.type")
	GenAIAgentID          = attribute.Key("gen_ai.agent.id")
	GenAIConversationID   = attribute.Key("gen_ai.conversation.id")
	GenAIToolName         = attribute.Key("gen_ai.tool.name")
	GenAIToolCallID       = attribute.Key("gen_ai.tool.call.id")
	GenAIOperationChat    = "chat"
	GenAIOperationInvoke  = "invoke_agent"
	GenAIOperationExecute = "execute_tool"
)

// Telemetry is the tracer and the instruments of one handler. Its methods
// are safe for concurrent use.
type Telemetry struct {
	tracer trace.Tracer

	reqDuration  metric.Float64Histogram
	turnDuration metric.Float64Histogram
	turnsRunning metric.Int64UpDownCounter
	lines        metric.Int64Counter
	toolCalls    metric.Int64Counter
	rejections   metric.Int64Counter
	genaiDur     metric.Float64Histogram
	genaiTokens  metric.Int64Histogram
}

// Boundaries of the duration histograms, in seconds: those the HTTP
// semantic conventions advise for requests, and longer ones for turns and
// model calls, which last seconds to minutes.
var (
	requestBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
	turnBuckets    = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92, 163.84, 327.68}
	tokenBuckets   = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
)

// New returns the instrumentation of scope (the importing package's path)
// on tp and mp; a nil provider means the global one.
func New(scope string, tp trace.TracerProvider, mp metric.MeterProvider) *Telemetry {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(scope)
	t := &Telemetry{tracer: tp.Tracer(scope)}
	var err error
	// A failed instrument is a no-op one; the error goes to OpenTelemetry's
	// error handler, as instrumentation libraries do.
	handle := func(e error) {
		if e != nil && err == nil {
			err = e
		}
	}
	var e error
	t.reqDuration, e = m.Float64Histogram(MetricRequestDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of HTTP server requests (for chat streams: until the stream ends)."),
		metric.WithExplicitBucketBoundaries(requestBuckets...))
	handle(e)
	t.turnDuration, e = m.Float64Histogram(MetricTurnDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of chat turns, from the agent's start to its return."),
		metric.WithExplicitBucketBoundaries(turnBuckets...))
	handle(e)
	t.turnsRunning, e = m.Int64UpDownCounter(MetricTurnsRunning, metric.WithUnit("{turn}"),
		metric.WithDescription("Chat turns whose agent is running."))
	handle(e)
	t.lines, e = m.Int64Counter(MetricStreamLines, metric.WithUnit("{line}"),
		metric.WithDescription("NDJSON lines written to chat streams."))
	handle(e)
	t.toolCalls, e = m.Int64Counter(MetricToolCalls, metric.WithUnit("{call}"),
		metric.WithDescription("Tool calls of chat turns, by outcome."))
	handle(e)
	t.rejections, e = m.Int64Counter(MetricLimitRejections, metric.WithUnit("{request}"),
		metric.WithDescription("Requests rejected by a limit, by the limit's name."))
	handle(e)
	t.genaiDur, e = m.Float64Histogram(MetricGenAIDuration, metric.WithUnit("s"),
		metric.WithDescription("GenAI operation duration."),
		metric.WithExplicitBucketBoundaries(turnBuckets...))
	handle(e)
	t.genaiTokens, e = m.Int64Histogram(MetricGenAITokens, metric.WithUnit("{token}"),
		metric.WithDescription("Number of input and output tokens used."),
		metric.WithExplicitBucketBoundaries(tokenBuckets...))
	handle(e)
	if err != nil {
		otel.Handle(err)
	}
	return t
}

type ctxKey struct{}

// NewContext returns ctx carrying t, so that code deeper in the request (or
// in a turn) records on the handler's providers: see [FromContext].
func NewContext(ctx context.Context, t *Telemetry) context.Context {
	return context.WithValue(ctx, ctxKey{}, t)
}

var (
	globalOnce sync.Once
	global     *Telemetry
)

// FromContext returns the instrumentation put in ctx by a route or a turn,
// or else the one of the global providers.
func FromContext(ctx context.Context) *Telemetry {
	if t, ok := ctx.Value(ctxKey{}).(*Telemetry); ok {
		return t
	}
	globalOnce.Do(func() { global = New(ScopeName, nil, nil) })
	return global
}

// LimitRejected counts a request rejected by the limit named limit (a
// constant such as "max_running_turns", never a value from the request) on
// the providers of ctx's handler (see [FromContext]), and marks the
// current span.
func LimitRejected(ctx context.Context, limit string) {
	a := AttrLimit.String(limit)
	FromContext(ctx).rejections.Add(ctx, 1, metric.WithAttributes(a))
	if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
		sp.AddEvent("limit rejected", trace.WithAttributes(a))
	}
}
