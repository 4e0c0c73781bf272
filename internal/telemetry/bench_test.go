package telemetry_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/embedkit/embedkit/internal/telemetry"
)

// BenchmarkTurnWork measures what the instrumentation adds to one chat
// turn, without the turn itself: the request's span and metric around a
// handler that writes 12 NDJSON lines, a turn span with one tool call, on
// the global no-op providers and on the SDK (every span sampled and
// batched to a discarding exporter, metrics aggregated).
func BenchmarkTurnWork(b *testing.B) {
	for _, mode := range []string{"noop", "sdk"} {
		b.Run(mode, func(b *testing.B) {
			tel := telemetry.New("bench", nil, nil)
			if mode == "sdk" {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				b.Cleanup(func() {
					_ = tp.Shutdown(context.Background())
					_ = mp.Shutdown(context.Background())
				})
				tel = telemetry.New("bench", tp, mp)
			}
			line := []byte(`{"id":"x","role":"assistant","content":"word ","isDelta":true,"sort":3}` + "\n")
			h := tel.Route(http.MethodPost, "/chat/{id}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/x-ndjson")
				ctx, turn := tel.StartTurn(r.Context(), "7", "chat-1")
				_ = ctx
				for range 10 {
					_, _ = w.Write(line)
				}
				tool := turn.StartTool("svcSqlApi", "call-1")
				tool.End("")
				turn.End(telemetry.OutcomeDone, nil)
				_, _ = w.Write(line)
				_, _ = w.Write(line)
			}))
			req := httptest.NewRequest(http.MethodPost, "/chat/1", nil)
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				w.Body.Reset()
				h.ServeHTTP(w, req)
			}
		})
	}
}
