package chatstream

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/embedkit/embedkit/internal/telemetry"
)

// scope is the instrumentation scope of the package's spans and metrics.
const scope = "github.com/embedkit/embedkit/chatstream"

// WithTracerProvider sets where the handler's spans go: one per request
// ("POST /api/v1/public/{accountName}/agents/{agentId}/chat/stream-chat-state"
// and the abort route), one per turn ("invoke_agent") and one per tool call
// ("execute_tool {name}"); see docs/observability.md. Default: the global
// provider (otel.GetTracerProvider), which records nothing unless the host
// sets one. tp must not be nil; WithTracerProvider panics otherwise.
func WithTracerProvider(tp trace.TracerProvider) Option {
	if tp == nil {
		panic("chatstream: WithTracerProvider: provider must not be nil, got nil (leave the option out for the global one)")
	}
	return handlerOption(func(c *config) { c.tp = tp })
}

// WithMeterProvider sets where the handler's metrics go:
// http.server.request.duration, embedkit.chat.turn.duration,
// embedkit.chat.turns.running, embedkit.chat.stream.lines,
// embedkit.chat.tool_calls and embedkit.limit.rejections; see
// docs/observability.md. Default: the global provider
// (otel.GetMeterProvider), which records nothing unless the host sets one.
// mp must not be nil; WithMeterProvider panics otherwise.
func WithMeterProvider(mp metric.MeterProvider) Option {
	if mp == nil {
		panic("chatstream: WithMeterProvider: provider must not be nil, got nil (leave the option out for the global one)")
	}
	return handlerOption(func(c *config) { c.mp = mp })
}

// instrumented wraps an agent with the span and metrics of its turns and
// tool calls.
type instrumented struct {
	agent Agent
	tel   *telemetry.Telemetry
}

func (a instrumented) Answer(ctx context.Context, info Turn, e Emitter) error {
	return a.answer(ctx, &info, nil, e)
}

// userReader reads the user of a turn (its attributes and groups) for the
// agent.
type userReader func(context.Context) (User, error)

// answer runs the agent on info, after setting info.User with user unless
// it is nil: the turn's span and metrics cover the reading, so a turn
// whose user cannot be read ends as an agent error, traced and measured
// like any turn. info is a pointer so that the frames between the turn's
// goroutine and the agent, parked for the turn's life, do not each hold a
// copy of it.
func (a instrumented) answer(ctx context.Context, info *Turn, user userReader, e Emitter) (err error) {
	ctx, tt := a.tel.StartTurn(ctx, info.AgentID, info.ChatID)
	defer endTurn(ctx, tt, &err)
	if user != nil {
		if err := readUser(ctx, info, user); err != nil {
			return err
		}
	}
	return a.agent.Answer(ctx, *info, &tracingEmitter{Emitter: e, turn: tt})
}

// readUser sets info.User with user. It is not inlined: answer's frame
// stays parked for the turn's life and would hold the User it returns.
//
//go:noinline
func readUser(ctx context.Context, info *Turn, user userReader) (err error) {
	info.User, err = user(ctx)
	return err
}

// endTurn ends the turn's span and metrics (deferred by answer, whose err
// it reads).
func endTurn(ctx context.Context, tt *telemetry.Turn, err *error) {
	if p := recover(); p != nil {
		tt.End(telemetry.OutcomeError, errors.New("chatstream: agent panicked"))
		panic(p) // runAgent turns it into the turn's error
	}
	tt.End(turnOutcome(ctx, *err))
}

// turnOutcome tells how a turn ended from its context and the agent's
// error, as the turn itself does.
func turnOutcome(ctx context.Context, err error) (string, error) {
	if ctx.Err() != nil {
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, errAborted), errors.Is(cause, errDisconnected):
			return telemetry.OutcomeAborted, nil
		case errors.Is(cause, errShutdown):
			return telemetry.OutcomeShutdown, cause
		case errors.Is(cause, errThreadDeleted):
			return telemetry.OutcomeDeleted, nil
		default:
			return telemetry.OutcomeDeadline, cause
		}
	}
	if err != nil {
		return telemetry.OutcomeError, err
	}
	return telemetry.OutcomeDone, nil
}

// tracingEmitter gives each tool call of a turn its span.
type tracingEmitter struct {
	Emitter
	turn *telemetry.Turn
}

func (e *tracingEmitter) ToolCall(name string, input any) (ToolCall, error) {
	c, err := e.Emitter.ToolCall(name, input)
	if err != nil {
		return c, err
	}
	id := ""
	if tc, ok := c.(*toolCall); ok {
		id = tc.id
	}
	return &tracedToolCall{ToolCall: c, span: e.turn.StartTool(name, id)}, nil
}

// tracedToolCall ends the span of a tool call with its result.
type tracedToolCall struct {
	ToolCall
	span *telemetry.Tool
}

func (c *tracedToolCall) Result(v any) error {
	err := c.ToolCall.Result(v)
	c.span.End("")
	return err
}

func (c *tracedToolCall) Fail(msg string) error {
	err := c.ToolCall.Fail(msg)
	if msg == "" {
		msg = "failed"
	}
	c.span.End(msg)
	return err
}
