package telemetry

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ndjsonType is the media type of chat streams, whose lines are counted.
const ndjsonType = "application/x-ndjson"

// lineBatch is how many streamed lines are counted before they are added
// to the counter (and the rest when the request ends), so that a long
// stream costs one counter update per batch rather than per line.
const lineBatch = 64

// Route wraps next, the handler of method and pattern, with a span named
// "METHOD pattern" and the request-duration metric; both carry
// http.route = pattern (never the raw path), http.request.method and
// http.response.status_code. The span is of kind server, with the trace
// context of the request's headers extracted by the global propagator,
// unless a span of this process is already in the request's context (the
// host instruments its server): ours is then its child, of kind internal.
// Lines of NDJSON responses are counted. The request context carries t
// (see [FromContext]).
func (t *Telemetry) Route(method, pattern string, next http.Handler) http.Handler {
	name := method + " " + pattern
	route := semconv.HTTPRoute(pattern)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A chat stream's goroutine stays parked under this frame for the
		// stream's life, and the runtime shrinks its stack only to four
		// times what its frames use: the work is in start and end.
		rq := t.start(w, r, name, route)
		defer rq.end()
		next.ServeHTTP(&rq.rw, r.WithContext(rq.ctx))
	})
}

// request is a request of a [Telemetry.Route].
type request struct {
	t     *Telemetry
	ctx   context.Context
	span  trace.Span
	rw    responseWriter
	start time.Time
	m     attribute.KeyValue
	route attribute.KeyValue
}

// start opens the span of a request to a route.
func (t *Telemetry) start(w http.ResponseWriter, r *http.Request, name string, route attribute.KeyValue) *request {
	start := time.Now()
	ctx := r.Context()
	kind := trace.SpanKindServer
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && !sc.IsRemote() {
		kind = trace.SpanKindInternal
	} else if !sc.IsValid() {
		ctx = otel.GetTextMapPropagator().Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	m := requestMethod(r.Method)
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(kind),
		trace.WithAttributes(m, route, semconv.URLScheme(scheme(r))))
	ctx = NewContext(ctx, t)
	rq := &request{t: t, ctx: ctx, span: span, start: start, m: m, route: route}
	rq.rw = responseWriter{ResponseWriter: w, rc: http.NewResponseController(w), rq: rq}
	return rq
}

// end ends the request's span and records its duration; it is deferred,
// so that a panic still ends the span and counts as a 500 unless the
// answer had started.
func (rq *request) end() {
	if p := recover(); p != nil {
		if rq.rw.status == 0 {
			rq.rw.status = http.StatusInternalServerError
		}
		rq.finish()
		panic(p)
	}
	if !rq.rw.detached {
		rq.finish()
	}
}

// finish ends the request's span and records its duration.
func (rq *request) finish() {
	t, rw, ctx, span := rq.t, &rq.rw, rq.ctx, rq.span
	status := rw.status
	if status == 0 {
		status = http.StatusOK
	}
	if rw.pending > 0 {
		t.lines.Add(ctx, rw.pending)
		rw.pending = 0
	}
	m, route, start := rq.m, rq.route, rq.start
	code := semconv.HTTPResponseStatusCode(status)
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, m, route, code)
	if status >= 500 {
		et := semconv.ErrorTypeKey.String(strconv.Itoa(status))
		attrs = append(attrs, et)
		span.SetAttributes(code, et)
		span.SetStatus(codes.Error, "")
	} else {
		span.SetAttributes(code)
	}
	t.reqDuration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(attrs...))
	span.End()
}

// requestMethod is the http.request.method attribute: the method when it is
// a known one, else _OTHER (the attribute must stay bounded).
func requestMethod(method string) attribute.KeyValue {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return semconv.HTTPRequestMethodKey.String(method)
	}
	return semconv.HTTPRequestMethodKey.String("_OTHER")
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// responseWriter records the status and counts the lines of an NDJSON
// response. It unwraps for http.ResponseController.
type responseWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	rq      *request
	status  int
	ndjson  bool
	pending int64 // lines not yet added to the counter
	// detached: the handler took the connection over (Detach); the
	// request ends when it says so, not when the handler returns.
	detached bool
}

func (w *responseWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
		w.ndjson = strings.HasPrefix(w.Header().Get("Content-Type"), ndjsonType)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(p)
	if w.ndjson {
		if w.pending += int64(bytes.Count(p[:n], []byte{'\n'})); w.pending >= lineBatch {
			w.rq.t.lines.Add(w.rq.ctx, w.pending)
			w.pending = 0
		}
	}
	return n, err
}

// FlushError flushes the response (http.ResponseController calls it).
func (w *responseWriter) FlushError() error { return w.rc.Flush() }

// Flush implements http.Flusher.
func (w *responseWriter) Flush() { _ = w.rc.Flush() }

// Unwrap returns the wrapped writer (for http.ResponseController).
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Detacher is the request writer of a [Telemetry.Route]: a handler that
// takes its connection over (http.ResponseController.Hijack) and goes on
// writing the response after it returns calls Detach.
type Detacher interface {
	http.ResponseWriter
	Unwrap() http.ResponseWriter
	Detach() Detached
}

// Detached is the telemetry of a request whose handler took its connection
// over: Lines counts lines written since (the handler batches them), End
// ends the request's span and duration, with the lines not counted yet.
type Detached struct {
	Lines func(n int64)
	End   func(lines int64)
}

// Detach makes the request end when the returned End is called instead of
// when the handler returns. The writer must not be used after it.
func (w *responseWriter) Detach() Detached {
	w.detached = true
	// Hold nothing of net/http's connection while the stream lasts; a
	// middleware that touches the writer after the handler returned gets
	// http.ErrHijacked, as from net/http.
	w.ResponseWriter = hijacked{}
	w.rc = http.NewResponseController(hijacked{})
	rq := w.rq
	d := Detached{End: func(lines int64) {
		if w.ndjson {
			w.pending += lines
		}
		rq.finish()
	}}
	if w.ndjson {
		d.Lines = func(n int64) { rq.t.lines.Add(rq.ctx, n) }
	}
	return d
}

// hijacked stands for the writer of a detached request.
type hijacked struct{}

func (hijacked) Header() http.Header       { return http.Header{} }
func (hijacked) Write([]byte) (int, error) { return 0, http.ErrHijacked }
func (hijacked) WriteHeader(int)           {}
