package telemetry

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Outcomes of a turn ([AttrTurnOutcome]).
const (
	OutcomeDone     = "done"
	OutcomeError    = "error"
	OutcomeAborted  = "aborted"
	OutcomeDeadline = "deadline"
	OutcomeShutdown = "shutdown"
	OutcomeDeleted  = "deleted" // the turn's user, and its thread, deleted while it ran
)

// Turn is the span and metrics of one chat turn.
type Turn struct {
	t     *Telemetry
	ctx   context.Context
	span  trace.Span
	start time.Time

	mu   sync.Mutex
	tool *Tool // the tool call in progress, if any
	done bool
}

// StartTurn starts the span of a chat turn, named "invoke_agent" after the
// GenAI conventions (gen_ai.operation.name, gen_ai.agent.id,
// gen_ai.conversation.id = the chat's id), and counts the turn as running.
// The returned context carries the span and t; end the turn with
// [Turn.End].
func (t *Telemetry) StartTurn(ctx context.Context, agentID, chatID string) (context.Context, *Turn) {
	ctx, span := t.tracer.Start(NewContext(ctx, t), GenAIOperationInvoke, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(GenAIOperationName.String(GenAIOperationInvoke), GenAIAgentID.String(agentID),
			GenAIConversationID.String(chatID)))
	t.turnsRunning.Add(ctx, 1)
	return ctx, &Turn{t: t, ctx: ctx, span: span, start: time.Now()}
}

// End ends the turn with outcome (one of the Outcome constants); err, for
// OutcomeError, is the agent's error (its message goes to the span's
// status). A tool call still in progress ends as unfinished. Later calls do
// nothing.
func (tn *Turn) End(outcome string, err error) {
	tn.mu.Lock()
	if tn.done {
		tn.mu.Unlock()
		return
	}
	tn.done = true
	tool := tn.tool
	tn.tool = nil
	tn.mu.Unlock()
	if tool != nil {
		tool.end("unfinished", "")
	}
	o := AttrTurnOutcome.String(outcome)
	tn.span.SetAttributes(o)
	switch outcome {
	case OutcomeDone, OutcomeAborted, OutcomeDeleted:
	default:
		tn.span.SetAttributes(semconv.ErrorTypeKey.String(outcome))
		msg := outcome
		if err != nil {
			msg = RedactSessionID(err.Error())
		}
		tn.span.SetStatus(codes.Error, msg)
	}
	tn.t.turnDuration.Record(tn.ctx, time.Since(tn.start).Seconds(), metric.WithAttributes(o))
	tn.t.turnsRunning.Add(tn.ctx, -1)
	tn.span.End()
}

// Tool is the span of one tool call.
type Tool struct {
	turn *Turn
	span trace.Span
	once sync.Once
}

// StartTool starts the span of a tool call of the turn, named
// "execute_tool {name}" after the GenAI conventions (gen_ai.tool.name,
// gen_ai.tool.call.id). A call still in progress ends as unfinished.
func (tn *Turn) StartTool(name, callID string) *Tool {
	_, span := tn.t.tracer.Start(tn.ctx, GenAIOperationExecute+" "+name, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(GenAIOperationName.String(GenAIOperationExecute), GenAIToolName.String(name),
			GenAIToolCallID.String(callID)))
	tool := &Tool{turn: tn, span: span}
	tn.mu.Lock()
	prev := tn.tool
	tn.tool = tool
	if tn.done { // the turn ended already
		tn.tool = nil
		prev = tool
	}
	tn.mu.Unlock()
	if prev != nil {
		prev.end("unfinished", "")
	}
	return tool
}

// End ends the tool call: failMsg is empty when it succeeded, else the
// message it failed with.
func (tool *Tool) End(failMsg string) {
	tn := tool.turn
	tn.mu.Lock()
	if tn.tool == tool {
		tn.tool = nil
	}
	tn.mu.Unlock()
	if failMsg == "" {
		tool.end("done", "")
	} else {
		tool.end("failed", failMsg)
	}
}

func (tool *Tool) end(outcome, msg string) {
	tool.once.Do(func() {
		o := AttrToolOutcome.String(outcome)
		tool.span.SetAttributes(o)
		if outcome != "done" {
			tool.span.SetAttributes(semconv.ErrorTypeKey.String(outcome))
			tool.span.SetStatus(codes.Error, RedactSessionID(msg))
		}
		tool.turn.t.toolCalls.Add(tool.turn.ctx, 1, metric.WithAttributes(o))
		tool.span.End()
	})
}

// ModelCall is the span and metrics of one call to a language model; see
// [StartModelCall].
type ModelCall struct {
	t     *Telemetry
	ctx   context.Context
	span  trace.Span
	start time.Time
	attrs []attribute.KeyValue // bounded: operation, provider, request model
}

// StartModelCall starts the span of a call to a model after the GenAI
// conventions: named "chat {model}", of kind client, with
// gen_ai.operation.name = chat, gen_ai.provider.name = provider (such as
// "openai") and gen_ai.request.model = model. It records on the providers
// of ctx's handler: inside a turn, those of the chat handler (see
// [FromContext]). The returned context carries the span. End it with
// [ModelCall.End].
func StartModelCall(ctx context.Context, provider, model string) (context.Context, *ModelCall) {
	t := FromContext(ctx)
	attrs := []attribute.KeyValue{
		GenAIOperationName.String(GenAIOperationChat),
		GenAIProviderName.String(provider),
		GenAIRequestModel.String(model),
	}
	name := GenAIOperationChat
	if model != "" {
		name += " " + model
	}
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx, &ModelCall{t: t, ctx: ctx, span: span, start: time.Now(), attrs: attrs}
}

// Usage is what a model call reports at its end. Token counts of zero
// (unknown) are not recorded.
type Usage struct {
	ResponseModel string
	InputTokens   int64
	OutputTokens  int64
}

// End ends the model call with its usage and err (nil when it succeeded):
// it sets gen_ai.response.model, gen_ai.usage.input_tokens and
// gen_ai.usage.output_tokens on the span, error.type when err is not nil,
// and records gen_ai.client.operation.duration and gen_ai.client.token.usage.
func (mc *ModelCall) End(u Usage, err error) {
	attrs := mc.attrs
	if u.ResponseModel != "" {
		rm := GenAIResponseModel.String(u.ResponseModel)
		attrs = append(attrs[:len(attrs):len(attrs)], rm)
		mc.span.SetAttributes(rm)
	}
	if err != nil {
		et := semconv.ErrorType(err)
		attrs = append(attrs[:len(attrs):len(attrs)], et)
		mc.span.SetAttributes(et)
		mc.span.SetStatus(codes.Error, RedactSessionID(err.Error()))
	}
	mc.t.genaiDur.Record(mc.ctx, time.Since(mc.start).Seconds(), metric.WithAttributes(attrs...))
	if u.InputTokens > 0 {
		mc.span.SetAttributes(GenAIUsageInput.Int64(u.InputTokens))
		mc.t.genaiTokens.Record(mc.ctx, u.InputTokens, metric.WithAttributes(append(attrs[:len(attrs):len(attrs)], GenAITokenType.String("input"))...))
	}
	if u.OutputTokens > 0 {
		mc.span.SetAttributes(GenAIUsageOutput.Int64(u.OutputTokens))
		mc.t.genaiTokens.Record(mc.ctx, u.OutputTokens, metric.WithAttributes(append(attrs[:len(attrs):len(attrs)], GenAITokenType.String("output"))...))
	}
	mc.span.End()
}
