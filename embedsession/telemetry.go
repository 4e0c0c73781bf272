package embedsession

import (
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// scope is the instrumentation scope of the package's spans and metrics.
const scope = "github.com/embedkit/embedkit/embedsession"

// WithTracerProvider sets where the handler's spans go: one per request,
// named after its route ("POST /api/v1/embed/generate-session",
// "DELETE /api/v1/embed/users/{externalId}"...), with http.route,
// http.request.method and http.response.status_code; see
// docs/observability.md. Default: the global provider
// (otel.GetTracerProvider), which records nothing unless the host sets one.
// tp must not be nil; WithTracerProvider panics otherwise.
func WithTracerProvider(tp trace.TracerProvider) Option {
	if tp == nil {
		panic("embedsession: WithTracerProvider: provider must not be nil, got nil (leave the option out for the global one)")
	}
	return func(o *options) { o.tp = tp }
}

// WithMeterProvider sets where the handler's metrics go:
// http.server.request.duration by route, method and status, and
// embedkit.limit.rejections; see docs/observability.md. Default: the global
// provider (otel.GetMeterProvider), which records nothing unless the host
// sets one. mp must not be nil; WithMeterProvider panics otherwise.
func WithMeterProvider(mp metric.MeterProvider) Option {
	if mp == nil {
		panic("embedsession: WithMeterProvider: provider must not be nil, got nil (leave the option out for the global one)")
	}
	return func(o *options) { o.mp = mp }
}
