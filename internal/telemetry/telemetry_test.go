package telemetry_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/embedkit/embedkit/internal/telemetry"
	"github.com/embedkit/embedkit/internal/telemetry/telemetrytest"
)

func TestRoute(t *testing.T) {
	rec := telemetrytest.New(t)
	tel := telemetry.New("test", rec.TracerProvider, rec.MeterProvider)
	h := tel.Route(http.MethodPost, "/things/{id}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("do") {
		case "fail":
			http.Error(w, "boom", http.StatusBadGateway)
		case "limit":
			telemetry.LimitRejected(r.Context(), "max_things")
			http.Error(w, "too many", http.StatusTooManyRequests)
		case "panic":
			panic(http.ErrAbortHandler)
		default:
			w.Header().Set("Content-Type", "application/x-ndjson")
			for range 100 {
				_, _ = w.Write([]byte("{}\n"))
			}
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("flush through the wrapper: %v", err)
			}
		}
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func(q string, hdr http.Header) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/things/42?"+q, nil)
		for k, v := range hdr {
			req.Header[k] = v
		}
		resp, err := srv.Client().Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	post("", nil)
	post("do=fail&sessionId=secret", nil)
	post("do=limit", nil)
	post("do=panic", nil)

	// A handler may end after its client has read the answer (the panic's
	// connection is closed while the handler unwinds): wait for the spans.
	spans := rec.Ended("POST /things/{id}")
	for deadline := time.Now().Add(5 * time.Second); len(spans) < 4 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		spans = rec.Ended("POST /things/{id}")
	}
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4", len(spans))
	}
	byStatus := map[int64]sdktrace.ReadOnlySpan{}
	for _, sp := range spans {
		for _, kv := range sp.Attributes() {
			if v := kv.Value.Emit(); strings.Contains(v, "/things/42") || strings.Contains(v, "secret") {
				t.Errorf("span attribute %s = %q: raw path or query", kv.Key, v)
			}
		}
		v, _ := telemetrytest.Attr(sp.Attributes(), semconv.HTTPResponseStatusCodeKey)
		byStatus[v.AsInt64()] = sp
	}
	if sp := byStatus[502]; sp == nil || sp.Status().Code != codes.Error {
		t.Errorf("502: %v", sp)
	}
	if sp := byStatus[500]; sp == nil || sp.Status().Code != codes.Error {
		t.Errorf("panic: %v", sp)
	}
	if sp := byStatus[429]; sp == nil || len(sp.Events()) != 1 || sp.Events()[0].Name != "limit rejected" || sp.Status().Code == codes.Error {
		t.Errorf("429: %v", sp)
	}
	route := semconv.HTTPRoute("/things/{id}")
	for status, want := range map[int]float64{200: 1, 502: 1, 429: 1, 500: 1} {
		if n := rec.Value(t, telemetry.MetricRequestDuration, route, semconv.HTTPResponseStatusCode(status)); n != want {
			t.Errorf("requests with status %d: %v, want %v", status, n, want)
		}
	}
	if n := rec.Value(t, telemetry.MetricStreamLines); n != 100 {
		t.Errorf("lines: %v, want 100", n)
	}
	if n := rec.Value(t, telemetry.MetricLimitRejections, telemetry.AttrLimit.String("max_things")); n != 1 {
		t.Errorf("limit rejections: %v, want 1", n)
	}
}

// TestRouteParent checks that a route's span continues a remote trace from
// the request's headers, and is an internal child of a span the host
// already started.
func TestRouteParent(t *testing.T) {
	rec := telemetrytest.New(t)
	tel := telemetry.New("test", rec.TracerProvider, rec.MeterProvider)
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })
	h := tel.Route(http.MethodGet, "/x", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	req := httptest.NewRequest(http.MethodGet, "/x", nil)
	req.Header.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	h.ServeHTTP(httptest.NewRecorder(), req)
	sp := rec.Ended("GET /x")[0]
	if sp.SpanKind() != trace.SpanKindServer || sp.Parent().TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || !sp.Parent().IsRemote() {
		t.Errorf("remote parent: kind %v, parent %v", sp.SpanKind(), sp.Parent())
	}

	ctx, host := rec.TracerProvider.Tracer("host").Start(context.Background(), "host server span")
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/x", nil).WithContext(ctx))
	host.End()
	sp = rec.Ended("GET /x")[1]
	if sp.SpanKind() != trace.SpanKindInternal || sp.Parent().SpanID() != host.SpanContext().SpanID() {
		t.Errorf("local parent: kind %v, parent %v", sp.SpanKind(), sp.Parent())
	}
}

func TestModelCall(t *testing.T) {
	rec := telemetrytest.New(t)
	tel := telemetry.New("test", rec.TracerProvider, rec.MeterProvider)
	ctx, turn := tel.StartTurn(context.Background(), "agent-1", "chat-1")
	mctx, mc := telemetry.StartModelCall(ctx, "openai", "gpt-test")
	if !trace.SpanFromContext(mctx).SpanContext().IsValid() {
		t.Fatal("no span in the model call's context")
	}
	mc.End(telemetry.Usage{ResponseModel: "gpt-test-0001", InputTokens: 120, OutputTokens: 30}, nil)
	_, mc = telemetry.StartModelCall(ctx, "openai", "gpt-test")
	mc.End(telemetry.Usage{}, errors.New("429 from https://api.test/?sessionId=leak"))
	tool := turn.StartTool("svcSql", "call-1")
	turn.End(telemetry.OutcomeDone, nil)
	tool.End("") // after the turn: nothing more

	calls := rec.Ended("chat gpt-test")
	if len(calls) != 2 {
		t.Fatalf("%d model call spans, want 2", len(calls))
	}
	ok := calls[0]
	if ok.SpanKind() != trace.SpanKindClient || ok.Parent().SpanID() != rec.Ended("invoke_agent")[0].SpanContext().SpanID() {
		t.Errorf("model call: kind %v parent %v", ok.SpanKind(), ok.Parent())
	}
	for k, want := range map[string]string{
		"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-test",
		"gen_ai.response.model": "gpt-test-0001", "gen_ai.usage.input_tokens": "120", "gen_ai.usage.output_tokens": "30",
	} {
		v, _ := telemetrytest.Attr(ok.Attributes(), attributeKey(k))
		if v.Emit() != want {
			t.Errorf("model call: %s = %q, want %q", k, v.Emit(), want)
		}
	}
	failed := calls[1]
	if failed.Status().Code != codes.Error || strings.Contains(failed.Status().Description, "leak") {
		t.Errorf("failed model call: %v", failed.Status())
	}
	if n := rec.Value(t, telemetry.MetricGenAITokens, telemetry.GenAITokenType.String("input")); n != 1 {
		t.Errorf("input token records: %v, want 1", n)
	}
	if n := rec.Value(t, telemetry.MetricGenAIDuration, telemetry.GenAIRequestModel.String("gpt-test")); n != 2 {
		t.Errorf("model calls measured: %v, want 2", n)
	}
	tools := rec.Ended("execute_tool svcSql")
	if len(tools) != 1 {
		t.Fatalf("%d tool spans, want 1", len(tools))
	}
	if v, _ := telemetrytest.Attr(tools[0].Attributes(), telemetry.AttrToolOutcome); v.AsString() != "unfinished" {
		t.Errorf("tool call open at the turn's end: outcome %q", v.AsString())
	}
	if n := rec.Value(t, telemetry.MetricTurnsRunning); n != 0 {
		t.Errorf("running turns: %v", n)
	}
}

// TestGlobalProviders checks the default: without providers given, the
// global ones are used, also when the host sets them after the handler is
// built.
func TestGlobalProviders(t *testing.T) {
	// OpenTelemetry points its default global providers at the first ones
	// set, once per process: a repeat (-count=2) cannot check this again.
	if globalProvidersRan.Swap(true) {
		t.Skip("otel delegates its default global providers once per process")
	}
	tel := telemetry.New("test", nil, nil)
	rec := telemetrytest.New(t)
	prevT, prevM := otel.GetTracerProvider(), otel.GetMeterProvider()
	otel.SetTracerProvider(rec.TracerProvider)
	otel.SetMeterProvider(rec.MeterProvider)
	t.Cleanup(func() { otel.SetTracerProvider(prevT); otel.SetMeterProvider(prevM) })
	tel.Route(http.MethodGet, "/g", http.NotFoundHandler()).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/g", nil))
	if len(rec.Ended("GET /g")) != 1 {
		t.Error("no span on the global tracer provider")
	}
	if n := rec.Value(t, telemetry.MetricRequestDuration, semconv.HTTPResponseStatusCode(404)); n != 1 {
		t.Errorf("requests on the global meter provider: %v, want 1", n)
	}
}

var globalProvidersRan atomic.Bool

func attributeKey(k string) attribute.Key { return attribute.Key(k) }
