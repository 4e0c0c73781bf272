package httperr_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/embedkit/embedkit/middleware/httperr"
	"github.com/embedkit/embedkit/store"
)

func TestStatus(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
		msg    string
	}{
		{httperr.Errorf(http.StatusForbidden, "plan %s has no chat", "free"), 403, "plan free has no chat"},
		{fmt.Errorf("wrapped: %w", httperr.Errorf(404, "agent not found")), 404, "agent not found"},
		{&http.MaxBytesError{Limit: 1}, 413, "request body too large"},
		{fmt.Errorf("x: %w", store.ErrUnavailable), 503, "service unavailable, try again"},
		{context.DeadlineExceeded, 503, "service unavailable, try again"},
		{errors.New("secret detail"), 500, "internal error"},
	} {
		status, msg := httperr.Status(c.err)
		if status != c.status || msg != c.msg {
			t.Errorf("Status(%v) = %d %q, want %d %q", c.err, status, msg, c.status, c.msg)
		}
	}
}

func TestWrite(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	rec := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/x?sessionId=abc", nil)
	httperr.Write(rec, r, log, &httperr.Error{Status: 503, Message: "unavailable <now>", Err: errors.New("dial tcp: refused")})
	if rec.Code != 503 || rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("answer = %d %v", rec.Code, rec.Header())
	}
	if got := rec.Body.String(); got != `{"error":"unavailable <now>"}`+"\n" {
		t.Errorf("body = %q", got)
	}
	if !strings.Contains(logs.String(), "dial tcp: refused") || strings.Contains(logs.String(), "abc") {
		t.Errorf("log = %q, want the cause and no query string", logs.String())
	}

	logs.Reset()
	rec = httptest.NewRecorder()
	httperr.Write(rec, r, log, errors.New("db password=hunter2"))
	if rec.Code != 500 || strings.Contains(rec.Body.String(), "hunter2") {
		t.Errorf("500 answer = %d %q, want no detail", rec.Code, rec.Body.String())
	}
	if rec.Header().Get("WWW-Authenticate") != "" {
		t.Errorf("a 500 carries WWW-Authenticate")
	}

	// A 401 names the schemes (RFC 9110), unless the host set its own.
	rec = httptest.NewRecorder()
	httperr.Write(rec, r, log, httperr.Errorf(401, "invalid API key"))
	if got := rec.Header().Get("WWW-Authenticate"); got != "Api-Key, Bearer" {
		t.Errorf("401 WWW-Authenticate = %q", got)
	}
	rec = httptest.NewRecorder()
	rec.Header().Set("WWW-Authenticate", `Basic realm="host"`)
	httperr.Write(rec, r, log, httperr.Errorf(401, "no"))
	if got := rec.Header().Get("WWW-Authenticate"); got != `Basic realm="host"` {
		t.Errorf("the host's WWW-Authenticate became %q", got)
	}
}

func TestParse(t *testing.T) {
	e := httperr.Parse(409, []byte(`{"error":"cannot change type"}`))
	if e.Status != 409 || e.Message != "cannot change type" || e.Error() != "409 Conflict: cannot change type" {
		t.Errorf("Parse = %+v (%q)", e, e.Error())
	}
	if e := httperr.Parse(502, []byte("<html>bad gateway</html>")); e.Message != "Bad Gateway" {
		t.Errorf("Parse of a non-JSON body = %+v, want the status text", e)
	}
}

// A host's own middleware in front of embedkit's routes answers in
// embedkit's error format.
func ExampleWrite() {
	onlyInternal := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Office") == "" {
				httperr.Write(w, r, nil, httperr.Errorf(http.StatusForbidden, "only from the office network"))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	h := onlyInternal(http.NotFoundHandler())
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/embed/generate-session", nil))
	fmt.Print(rec.Code, " ", rec.Header().Get("Content-Type"), " ", rec.Body.String())
	// Output: 403 application/json {"error":"only from the office network"}
}
