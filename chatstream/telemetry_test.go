package chatstream_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/logbuf"
	"github.com/embedkit/embedkit/internal/telemetry"
	"github.com/embedkit/embedkit/internal/telemetry/telemetrytest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/middleware/httperr"
	"github.com/embedkit/embedkit/store"
)

// telemetryEnv is a chat server recording its spans, metrics and logs.
func telemetryEnv(t *testing.T, agent chatstream.Agent, opts ...chatstream.Option) (*env, *telemetrytest.Recorder, *logbuf.Buffer) {
	t.Helper()
	rec := telemetrytest.New(t)
	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	opts = append([]chatstream.Option{chatstream.WithTracerProvider(rec.TracerProvider),
		chatstream.WithMeterProvider(rec.MeterProvider), chatstream.WithLogger(log)}, opts...)
	e := newEnv(t, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux}, envOpts{agent: agent, opts: opts})
	return e, rec, logs
}

func attrOf(sp sdktrace.ReadOnlySpan, key attribute.Key) string {
	v, _ := telemetrytest.Attr(sp.Attributes(), key)
	return v.Emit()
}

// one returns the single ended span named name.
func one(t *testing.T, rec *telemetrytest.Recorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	// The client may read a stream's last line before the server's
	// handler returns and ends its spans: wait for them (bounded).
	spans := rec.Ended(name)
	for deadline := time.Now().Add(5 * time.Second); len(spans) == 0 && time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
		spans = rec.Ended(name)
	}
	if len(spans) != 1 {
		t.Fatalf("%d spans %q ended, want 1", len(spans), name)
	}
	return spans[0]
}

// TestTelemetryTurn checks the spans of a turn with two tool calls (one
// failed) and the request, turn, running-turn and line metrics, with
// OpenTelemetry's in-memory recorders.
func TestTelemetryTurn(t *testing.T) {
	e, rec, _ := telemetryEnv(t, nil)
	const chatID = "tel-chat-1"
	msgs := collect(t, e.client, chatstream.Request{Input: "revenue?", ChatID: chatID, SessionSettings: ext("tel-user")})

	req := one(t, rec, "POST "+chatstream.StreamPattern)
	if req.SpanKind() != trace.SpanKindServer || attrOf(req, semconv.HTTPRouteKey) != chatstream.StreamPattern ||
		attrOf(req, semconv.HTTPResponseStatusCodeKey) != "200" || attrOf(req, semconv.HTTPRequestMethodKey) != "POST" {
		t.Errorf("request span: kind %v, attributes %v", req.SpanKind(), req.Attributes())
	}
	turn := one(t, rec, "invoke_agent")
	if turn.Parent().SpanID() != req.SpanContext().SpanID() {
		t.Error("the turn's span is not a child of the request's")
	}
	for k, want := range map[attribute.Key]string{
		telemetry.GenAIOperationName: "invoke_agent", telemetry.GenAIAgentID: agentID,
		telemetry.GenAIConversationID: chatID, telemetry.AttrTurnOutcome: "done",
	} {
		if got := attrOf(turn, k); got != want {
			t.Errorf("turn span: %s = %q, want %q", k, got, want)
		}
	}
	if turn.Status().Code != codes.Unset {
		t.Errorf("turn span status %v", turn.Status())
	}
	meta := one(t, rec, "execute_tool svcMeta")
	sql := one(t, rec, "execute_tool svcSqlApi")
	for _, sp := range []sdktrace.ReadOnlySpan{meta, sql} {
		if sp.Parent().SpanID() != turn.SpanContext().SpanID() {
			t.Errorf("%s is not a child of the turn", sp.Name())
		}
		if attrOf(sp, telemetry.GenAIToolCallID) == "" || attrOf(sp, telemetry.GenAIOperationName) != "execute_tool" {
			t.Errorf("%s: attributes %v", sp.Name(), sp.Attributes())
		}
	}
	if attrOf(meta, telemetry.GenAIToolName) != "svcMeta" || meta.Status().Code != codes.Unset {
		t.Errorf("svcMeta: %v %v", meta.Attributes(), meta.Status())
	}
	if sql.Status().Code != codes.Error || sql.Status().Description != "branch not found" || attrOf(sql, telemetry.AttrToolOutcome) != "failed" {
		t.Errorf("svcSqlApi: %v %v", sql.Attributes(), sql.Status())
	}

	route := semconv.HTTPRoute(chatstream.StreamPattern)
	if n := rec.Value(t, telemetry.MetricRequestDuration, route, semconv.HTTPResponseStatusCode(200)); n != 1 {
		t.Errorf("stream requests measured: %v, want 1", n)
	}
	if n := rec.Value(t, telemetry.MetricTurnDuration, telemetry.AttrTurnOutcome.String("done")); n != 1 {
		t.Errorf("turns measured: %v, want 1", n)
	}
	if n := rec.Value(t, telemetry.MetricTurnsRunning); n != 0 {
		t.Errorf("running turns after the turn: %v, want 0", n)
	}
	if n := rec.Value(t, telemetry.MetricStreamLines); n != float64(len(msgs)) {
		t.Errorf("streamed lines: %v, want %d", n, len(msgs))
	}
	if n := rec.Value(t, telemetry.MetricToolCalls, telemetry.AttrToolOutcome.String("failed")); n != 1 {
		t.Errorf("failed tool calls: %v, want 1", n)
	}
	noUnbounded(t, rec, chatID, "tel-user")
}

// noUnbounded fails if a metric carries one of values (chat ids, external
// ids) or an attribute other than the bounded ones.
func noUnbounded(t *testing.T, rec *telemetrytest.Recorder, values ...string) {
	t.Helper()
	for _, m := range rec.Collect(t) {
		for _, p := range rec.Points(t, m.Name) {
			for _, kv := range p.Attrs.ToSlice() {
				for _, v := range values {
					if strings.Contains(kv.Value.Emit(), v) {
						t.Errorf("metric %s: attribute %s = %q", m.Name, kv.Key, kv.Value.Emit())
					}
				}
			}
		}
	}
}

// TestTelemetryAbort checks that a running turn counts as running, and that
// an aborted one ends its span with outcome aborted.
func TestTelemetryAbort(t *testing.T) {
	e, rec, _ := telemetryEnv(t, nil)
	ctx := t.Context()
	_, wait := streamUntil(t, ctx, e.client, chatstream.Request{Input: "slow", ChatID: "tel-abort-1", SessionSettings: ext("tel-abort")}, isContent)
	if n := rec.Value(t, telemetry.MetricTurnsRunning); n != 1 {
		t.Errorf("running turns during the turn: %v, want 1", n)
	}
	if err := e.client.Abort(ctx, acct, agentID, "tel-abort-1", chatstream.SessionSettings{ExternalID: "tel-abort"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := wait(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(rec.Ended("invoke_agent")) == 1 })
	turn := one(t, rec, "invoke_agent")
	if attrOf(turn, telemetry.AttrTurnOutcome) != "aborted" || turn.Status().Code == codes.Error {
		t.Errorf("aborted turn: %v %v", turn.Attributes(), turn.Status())
	}
	abort := one(t, rec, "POST "+chatstream.AbortPattern)
	if attrOf(abort, semconv.HTTPResponseStatusCodeKey) != "204" || attrOf(abort, semconv.HTTPRouteKey) != chatstream.AbortPattern {
		t.Errorf("abort span: %v", abort.Attributes())
	}
	if n := rec.Value(t, telemetry.MetricTurnsRunning); n != 0 {
		t.Errorf("running turns after the abort: %v, want 0", n)
	}
	if n := rec.Value(t, telemetry.MetricTurnDuration, telemetry.AttrTurnOutcome.String("aborted")); n != 1 {
		t.Errorf("aborted turns measured: %v, want 1", n)
	}
}

// waitFor polls cond for up to 5 seconds: a turn's span ends when its agent
// returns, which an abort does not wait for.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met after 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTelemetryDeadlineAndError checks the outcome and status of a turn past
// its deadline and of a failed one, and that a sessionId in the agent's
// error reaches neither the log nor the span.
func TestTelemetryDeadlineAndError(t *testing.T) {
	const secret = "s3cr3t-session-id"
	agent := chatstream.AgentFunc(func(ctx context.Context, tn chatstream.Turn, e chatstream.Emitter) error {
		if tn.Input == "slow" {
			<-ctx.Done()
			return context.Cause(ctx)
		}
		return errors.New("fetch https://host.test/embed/page?sessionId=" + secret + "&x=1: refused")
	})
	e, rec, logs := telemetryEnv(t, agent, chatstream.WithTurnTimeout(100*time.Millisecond))
	collect(t, e.client, chatstream.Request{Input: "slow", SessionSettings: ext("tel-deadline")})
	collect(t, e.client, chatstream.Request{Input: "fail", SessionSettings: ext("tel-deadline")})

	byOutcome := map[string]sdktrace.ReadOnlySpan{}
	turns := rec.Ended("invoke_agent")
	for deadline := time.Now().Add(5 * time.Second); len(turns) < 2 && time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond) // spans end as the handlers return
		turns = rec.Ended("invoke_agent")
	}
	for _, sp := range turns {
		byOutcome[attrOf(sp, telemetry.AttrTurnOutcome)] = sp
	}
	if sp := byOutcome["deadline"]; sp == nil || sp.Status().Code != codes.Error || attrOf(sp, semconv.ErrorTypeKey) != "deadline" {
		t.Errorf("turn past its deadline: %v", sp)
	}
	sp := byOutcome["error"]
	if sp == nil || sp.Status().Code != codes.Error {
		t.Fatalf("failed turn: %v", sp)
	}
	if d := sp.Status().Description; strings.Contains(d, secret) || !strings.Contains(d, "sessionId=REDACTED&x=1") {
		t.Errorf("failed turn's status: %q", d)
	}
	if l := logs.String(); strings.Contains(l, secret) || !strings.Contains(l, "sessionId=REDACTED") {
		t.Errorf("log: %s", l)
	}
	if n := rec.Value(t, telemetry.MetricTurnDuration, telemetry.AttrTurnOutcome.String("deadline")); n != 1 {
		t.Errorf("turns past their deadline measured: %v, want 1", n)
	}
	for _, s := range rec.Spans.Ended() {
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.Emit(), secret) {
				t.Errorf("span %s: attribute %s holds the sessionId", s.Name(), kv.Key)
			}
		}
	}
}

// TestTelemetryShutdown checks the outcome of a turn stopped by Close.
func TestTelemetryShutdown(t *testing.T) {
	e, rec, _ := telemetryEnv(t, nil)
	_, wait := streamUntil(t, t.Context(), e.client, chatstream.Request{Input: "slow", ChatID: "tel-shutdown-1", SessionSettings: ext("tel-shutdown")}, isContent)
	if err := e.h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := wait(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(rec.Ended("invoke_agent")) == 1 })
	turn := one(t, rec, "invoke_agent")
	if attrOf(turn, telemetry.AttrTurnOutcome) != "shutdown" || turn.Status().Code != codes.Error {
		t.Errorf("turn stopped by Close: %v %v", turn.Attributes(), turn.Status())
	}
	if n := rec.Value(t, telemetry.MetricTurnsRunning); n != 0 {
		t.Errorf("running turns after Close: %v, want 0", n)
	}
}

// TestTelemetryLimitRejection: a request refused by a limit counts in
// embedkit.limit.rejections under the limit's name.
func TestTelemetryLimitRejection(t *testing.T) {
	e, rec, _ := telemetryEnv(t, nil, chatstream.WithDefaultLimits(store.Limits{ThreadTurns: 1}))
	const chatID = "tel-full"
	collect(t, e.client, chatstream.Request{Input: "echo:one", ChatID: chatID, SessionSettings: ext("tel-limit")})
	_, err := collectErr(t.Context(), e.client, chatstream.Request{Input: "echo:two", ChatID: chatID, SessionSettings: ext("tel-limit")})
	if he, ok := errors.AsType[*httperr.Error](err); !ok || he.Status != http.StatusConflict {
		t.Fatalf("second turn: %v, want 409", err)
	}
	if n := rec.Value(t, telemetry.MetricLimitRejections, telemetry.AttrLimit.String("threadTurns")); n != 1 {
		t.Errorf("limit rejections counted: %v, want 1", n)
	}
}
