package embedsession_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/telemetry"
	"github.com/embedkit/embedkit/internal/telemetry/telemetrytest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/middleware"
)

// TestTelemetry checks the spans and the request metric of generate-session,
// the token exchange and admin calls with OpenTelemetry's in-memory
// recorders, and that no sessionId, token or external id reaches an
// attribute or a log line.
func TestTelemetry(t *testing.T) {
	rec := telemetrytest.New(t)
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := apitest.New(t, apitest.Target{Backend: testdb.SQLite, Router: apitest.Gorilla},
		apitest.WithEmbedOptions(embedsession.WithTracerProvider(rec.TracerProvider),
			embedsession.WithMeterProvider(rec.MeterProvider), embedsession.WithLogger(log)),
		apitest.WithSessionOptions(middleware.WithLogger(log)))

	const user = "telemetry-user-4711"
	defineGroups(t, s, "tenant-telemetry", 2)
	sid := s.GenerateSession(t, body(user, nil))
	tok := s.Token(t, sid)
	if status, _ := s.Do(t, http.MethodGet, tenantPath("tenant-telemetry", "groups"), apitest.AdminKey, nil); status != http.StatusOK {
		t.Fatalf("list groups = %d", status)
	}
	if status, _ := s.Do(t, http.MethodDelete, "/api/v1/embed/users/"+user+"/sessions", apitest.AdminKey, nil); status/100 != 2 {
		t.Fatalf("revoke = %d", status)
	}
	if status, _ := s.Do(t, http.MethodPost, embedsession.PathGenerateSession, "", body(user, nil)); status != http.StatusUnauthorized {
		t.Fatalf("generate-session without key = %d, want 401", status)
	}
	// A used sessionId on an embed page: 401, logged by nobody.
	if resp := s.Send(t, s.Request(t, http.MethodGet, apitest.WhoamiPath+"?sessionId="+sid, "", nil)); resp.Status != http.StatusUnauthorized {
		t.Fatalf("whoami with a used sessionId = %d, want 401", resp.Status)
	}

	wantSpans := []struct {
		route  string
		method string
		status int64
		n      int
	}{
		{embedsession.PathGenerateSession, http.MethodPost, 200, 2}, // defineGroups and the session above
		{embedsession.PathGenerateSession, http.MethodPost, 401, 1},
		{embedsession.PathSessionToken, http.MethodPost, 200, 1},
		{embedsession.PathTenantGroups, http.MethodGet, 200, 1},
		{embedsession.PathUserSessions, http.MethodDelete, 204, 1},
	}
	for _, w := range wantSpans {
		n := 0
		for _, sp := range rec.Ended(w.method + " " + w.route) {
			if sp.SpanKind() != trace.SpanKindServer {
				t.Errorf("span %s: kind %v, want server", sp.Name(), sp.SpanKind())
			}
			attrs := sp.Attributes()
			if v, _ := telemetrytest.Attr(attrs, semconv.HTTPRouteKey); v.AsString() != w.route {
				t.Errorf("span %s: http.route %q", sp.Name(), v.AsString())
			}
			if v, _ := telemetrytest.Attr(attrs, semconv.HTTPRequestMethodKey); v.AsString() != w.method {
				t.Errorf("span %s: http.request.method %q", sp.Name(), v.AsString())
			}
			if v, _ := telemetrytest.Attr(attrs, semconv.HTTPResponseStatusCodeKey); v.AsInt64() == w.status {
				n++
			}
		}
		if n != w.n {
			t.Errorf("%s %s with status %d: %d spans, want %d", w.method, w.route, w.status, n, w.n)
		}
		got := rec.Value(t, telemetry.MetricRequestDuration, semconv.HTTPRoute(w.route),
			semconv.HTTPRequestMethodKey.String(w.method), semconv.HTTPResponseStatusCode(int(w.status)))
		if got != float64(w.n) {
			t.Errorf("%s %s %d: %v requests measured, want %d", w.method, w.route, w.status, got, w.n)
		}
	}

	secrets := []string{sid, tok, user, apitest.AdminKey, "tenant-telemetry"}
	check := func(where string, kvs []attribute.KeyValue) {
		for _, kv := range kvs {
			for _, sec := range secrets {
				if strings.Contains(kv.Value.Emit(), sec) {
					t.Errorf("%s: attribute %s holds %q", where, kv.Key, sec)
				}
			}
		}
	}
	for _, sp := range rec.Spans.Ended() {
		check("span "+sp.Name(), sp.Attributes())
		for _, ev := range sp.Events() {
			check("event of "+sp.Name(), ev.Attributes)
		}
	}
	for _, p := range rec.Points(t, telemetry.MetricRequestDuration) {
		check("request metric", p.Attrs.ToSlice())
	}
	for _, sec := range secrets[:2] {
		if strings.Contains(logs.String(), sec) {
			t.Errorf("the log holds a secret: %s", logs.String())
		}
	}
}
