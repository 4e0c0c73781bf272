package embedsession_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/store/memstore"
)

// ExampleWithTracerProvider gives the handler the host's OpenTelemetry
// providers. Here they record in memory; a host adds its exporters
// (sdktrace.WithBatcher(exporter), sdkmetric.WithReader(reader)). Every
// route gets a span named after its pattern and the
// http.server.request.duration metric.
func ExampleWithTracerProvider() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer tp.Shutdown(context.Background())
	defer mp.Shutdown(context.Background())

	h := embedsession.NewHandler(memstore.New(),
		embedsession.WithTracerProvider(tp), embedsession.WithMeterProvider(mp))
	sm := http.NewServeMux()
	for _, rt := range h.Routes() {
		sm.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}

	// A request without an API key: 401.
	w := httptest.NewRecorder()
	sm.ServeHTTP(w, httptest.NewRequest(http.MethodDelete, "/api/v1/embed/users/jane", nil))

	for _, s := range spans.Ended() {
		fmt.Println("span:", s.Name())
		for _, a := range s.Attributes() {
			fmt.Printf("  %s = %s\n", a.Key, a.Value.Emit())
		}
	}
	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			fmt.Println("metric:", m.Name, m.Unit)
		}
	}
	// Output:
	// span: DELETE /api/v1/embed/users/{externalId}
	//   http.request.method = DELETE
	//   http.route = /api/v1/embed/users/{externalId}
	//   url.scheme = http
	//   http.response.status_code = 401
	// metric: http.server.request.duration s
}
