package main

import (
	"context"
	"fmt"
	"net/http"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// metrics serves embedkit's metrics in Prometheus format at GET /metrics
// when -metrics is set: an OpenTelemetry SDK meter provider reads them
// through OpenTelemetry's Prometheus exporter. It is set as the global meter
// provider, which embedkit's handlers use unless given one with
// WithMeterProvider; a host with its own provider passes it to the
// handlers instead.
type metrics struct {
	mp      *sdkmetric.MeterProvider // nil when off
	prev    metric.MeterProvider
	handler http.Handler
}

// startMetrics sets the global meter provider up when on. Call it before
// building the handlers, then [metrics.mount] on the router, and
// [metrics.close] at the end.
func startMetrics(on bool) (*metrics, error) {
	if !on {
		return &metrics{}, nil
	}
	// A registry of its own, not Prometheus's global one: the exporter is
	// the only collector, and the server can run twice in one process (its
	// tests do).
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	m := &metrics{
		mp:      sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)),
		prev:    otel.GetMeterProvider(),
		handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}
	otel.SetMeterProvider(m.mp)
	return m, nil
}

// mount serves GET /metrics on r when metrics are on. The endpoint has no
// authentication, like most Prometheus targets: restrict it at the network
// level (or behind the host's own middleware) in production.
func (m *metrics) mount(r *mux.Router) {
	if m.mp != nil {
		r.Handle("/metrics", m.handler).Methods(http.MethodGet, http.MethodHead)
	}
}

// close restores the previous global meter provider and shuts this one
// down.
func (m *metrics) close() error {
	if m.mp == nil {
		return nil
	}
	otel.SetMeterProvider(m.prev)
	return m.mp.Shutdown(context.Background())
}
