// Package telemetrytest records the spans and metrics of embedkit's
// handlers with OpenTelemetry's SDK and in-memory readers, for tests.
package telemetrytest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Recorder is a tracer provider recording every span and a meter provider
// read on demand.
type Recorder struct {
	Spans          *tracetest.SpanRecorder
	TracerProvider *sdktrace.TracerProvider
	Reader         *sdkmetric.ManualReader
	MeterProvider  *sdkmetric.MeterProvider
}

// New returns a Recorder whose providers shut down with the test.
func New(t testing.TB) *Recorder {
	r := &Recorder{Spans: tracetest.NewSpanRecorder(), Reader: sdkmetric.NewManualReader()}
	r.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.Spans))
	r.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.Reader))
	t.Cleanup(func() {
		_ = r.TracerProvider.Shutdown(context.Background())
		_ = r.MeterProvider.Shutdown(context.Background())
	})
	return r
}

// Ended returns the ended spans named name.
func (r *Recorder) Ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.Spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// Attr returns the value of key among attrs.
func Attr(attrs []attribute.KeyValue, key attribute.Key) (attribute.Value, bool) {
	for _, a := range attrs {
		if a.Key == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// Collect reads the metrics.
func (r *Recorder) Collect(t testing.TB) []metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect metrics: %v", err)
	}
	var out []metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		out = append(out, sm.Metrics...)
	}
	return out
}

// Point is one data point of a metric, flattened: Value is a sum's value or
// a histogram's count.
type Point struct {
	Attrs attribute.Set
	Value float64
	Sum   float64 // a histogram's sum
}

// Points returns the data points of the metric named name.
func (r *Recorder) Points(t testing.TB, name string) []Point {
	t.Helper()
	var out []Point
	for _, m := range r.Collect(t) {
		if m.Name != name {
			continue
		}
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				out = append(out, Point{Attrs: p.Attributes, Value: float64(p.Value)})
			}
		case metricdata.Sum[float64]:
			for _, p := range d.DataPoints {
				out = append(out, Point{Attrs: p.Attributes, Value: p.Value})
			}
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				out = append(out, Point{Attrs: p.Attributes, Value: float64(p.Count), Sum: p.Sum})
			}
		case metricdata.Histogram[int64]:
			for _, p := range d.DataPoints {
				out = append(out, Point{Attrs: p.Attributes, Value: float64(p.Count), Sum: float64(p.Sum)})
			}
		default:
			t.Fatalf("metric %s: unexpected data %T", name, m.Data)
		}
	}
	return out
}

// Value returns the total of the points of the metric named name whose
// attributes include every one of want (a histogram's count).
func (r *Recorder) Value(t testing.TB, name string, want ...attribute.KeyValue) float64 {
	t.Helper()
	var v float64
	for _, p := range r.Points(t, name) {
		if Has(p.Attrs, want...) {
			v += p.Value
		}
	}
	return v
}

// Has reports whether set includes every one of want.
func Has(set attribute.Set, want ...attribute.KeyValue) bool {
	for _, w := range want {
		if v, ok := set.Value(w.Key); !ok || v != w.Value {
			return false
		}
	}
	return true
}
