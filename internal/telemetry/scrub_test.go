package telemetry_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/embedkit/embedkit/internal/telemetry"
)

func TestRedactSessionID(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"/embed/page", "/embed/page"},
		{"/embed?sessionId=abc", "/embed?sessionId=REDACTED"},
		{"/embed?sessionId=abc&x=1", "/embed?sessionId=REDACTED&x=1"},
		{"/embed?x=1&sessionId=abc#frag", "/embed?x=1&sessionId=REDACTED#frag"},
		{"/embed?x=1;sessionId=abc", "/embed?x=1;sessionId=REDACTED"},
		{"/embed?SESSIONID=abc", "/embed?SESSIONID=REDACTED"},
		{"/embed?sessionid=abc&sessionId=def", "/embed?sessionid=REDACTED&sessionId=REDACTED"},
		{"/embed?sessionId=", "/embed?sessionId="},
		{"/embed?xsessionId=abc", "/embed?xsessionId=abc"},
		{"/embed?session_id=abc", "/embed?session_id=abc"},
		{"/embed?sessionIdx=abc", "/embed?sessionIdx=abc"},
		{"sessionId=abc", "sessionId=REDACTED"},
		{"GET /embed?sessionId=abc HTTP/1.1", "GET /embed?sessionId=REDACTED HTTP/1.1"},
		{`url="/e?sessionId=abc"`, `url="/e?sessionId=REDACTED"`},
		{"/login?next=%2Fembed%3FsessionId%3Dabc%26x%3D1", "/login?next=%2Fembed%3FsessionId%3DREDACTED%26x%3D1"},
		{"/login?next=%2Fembed%3fsessionid%3dabc", "/login?next=%2Fembed%3fsessionid%3dREDACTED"},
		{"/embed?sessionId=a%2Bb&y", "/embed?sessionId=REDACTED&y"},
		{"sessionId", "sessionId"},
		{"sessionId%3", "sessionId%3"},
		// Names as a query decodes them.
		{"/embed?session%49d=abc", "/embed?session%49d=REDACTED"},
		{"/embed?%73essionId=abc&x=1", "/embed?%73essionId=REDACTED&x=1"},
		{"/login?next=%2Fembed%3Fsession%2549d%3Dabc", "/login?next=%2Fembed%3Fsession%2549d%3DREDACTED"},
		{`{"url":"/e?x=1\u0026sessionId=abc"}`, `{"url":"/e?x=1\u0026sessionId=REDACTED"}`},
		{"/embed?session%49dx=abc", "/embed?session%49dx=abc"},
		{"/embed?session%zz=abc", "/embed?session%zz=abc"},
	} {
		if got := telemetry.RedactSessionID(c.in); got != c.want {
			t.Errorf("RedactSessionID(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzRedactSessionID checks that the value of a sessionId parameter never
// survives, whatever surrounds it, and that strings without one are kept.
func FuzzRedactSessionID(f *testing.F) {
	f.Add("/embed", "abc123", "x=1")
	f.Add("", "s", "")
	f.Add("/a?b=c", "Zz9-_.~", "#f")
	f.Fuzz(func(t *testing.T, path, secret, rest string) {
		if len(secret) < 4 || strings.ContainsAny(secret, "&;#%\"'<> \t\r\n`") {
			t.Skip()
		}
		u := path + "?sessionId=" + secret
		if rest != "" {
			u += "&" + rest
		}
		got := telemetry.RedactSessionID(u)
		if idx := strings.Index(got, "sessionId="); idx < 0 || strings.HasPrefix(got[idx+len("sessionId="):], secret) {
			t.Fatalf("RedactSessionID(%q) = %q", u, got)
		}
		// An encoded URL inside a query.
		enc := "/login?next=" + url.QueryEscape(u)
		if g := telemetry.RedactSessionID(enc); strings.Contains(g, "sessionId%3D"+url.QueryEscape(secret)) {
			t.Fatalf("RedactSessionID(%q) = %q", enc, g)
		}
		// Idempotent.
		if again := telemetry.RedactSessionID(got); again != got {
			t.Fatalf("not idempotent: %q then %q", got, again)
		}
		// Without the parameter nothing changes.
		plain := path + rest
		if !strings.Contains(strings.ToLower(plain), "sessionid") && telemetry.RedactSessionID(plain) != plain {
			t.Fatalf("changed %q", plain)
		}
	})
}

// FuzzRedactThenParse: whatever a query holds, once redacted no sessionId
// parameter, as url.ParseQuery (and so the Session middleware) reads it,
// keeps a value but REDACTED, up to where the value ends in a log line.
func FuzzRedactThenParse(f *testing.F) {
	f.Add("sessionId=abc&x=1")
	f.Add("session%49d=abc")
	f.Add("%73ession%49d=a%26b")
	f.Add("x=1&SESSIONID=abc%23d")
	f.Fuzz(func(t *testing.T, query string) {
		query, _, _ = strings.Cut(query, "#") // a URL's query ends there
		got := telemetry.RedactSessionID("/e?" + query)
		q, _ := url.ParseQuery(strings.TrimPrefix(got, "/e?"))
		for k, vs := range q {
			if !strings.EqualFold(k, "sessionId") {
				continue
			}
			ends := func(s string) bool { return s == "" || strings.ContainsRune("&;# \t\n\r\"'<>`", rune(s[0])) }
			for _, v := range vs {
				if rest, ok := strings.CutPrefix(v, telemetry.Redacted); !ends(v) && (!ok || !ends(rest)) {
					t.Fatalf("RedactSessionID(%q) = %q: %s=%q survives", "/e?"+query, got, k, v)
				}
			}
		}
	})
}

type stringer string

func (s stringer) String() string { return string(s) }

type textMarshaler string

func (s textMarshaler) MarshalText() ([]byte, error) { return []byte(s), nil }

type jsonMarshaler string

type ptrMarshaler struct{ s string }

func (p *ptrMarshaler) MarshalText() ([]byte, error) { return []byte(p.s), nil }

func (s jsonMarshaler) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]string{"u": string(s)})
}

// TestRedactingHandlerBytes: values a handler writes otherwise than fmt
// prints them are scrubbed too, with the text handler and the JSON one:
// a byte slice (written as a string, or base64), a json.RawMessage
// (verbatim), a TextMarshaler, a json.Marshaler.
func TestRedactingHandlerBytes(t *testing.T) {
	for _, h := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
	} {
		var buf bytes.Buffer
		log := telemetry.Logger(slog.New(h(&buf)))
		var nilMarshaler *ptrMarshaler
		log.Info("values",
			"nil", nilMarshaler, // its methods panic: logged without panicking here
			"bytes", []byte("/embed/profile?sessionId=bytes1&tab=2"),
			"raw", json.RawMessage(`{"referer":"https://h/embed?sessionId=raw1"}`),
			"text", textMarshaler("/x?sessionId=text1"),
			"json", jsonMarshaler("/x?sessionId=json1"),
			"nested", struct{ Body json.RawMessage }{json.RawMessage(`{"u":"/x?sessionId=nested1"}`)},
			"list", []json.RawMessage{json.RawMessage(`"/x?sessionId=list1"`)},
			"time", (*time.Time)(nil),
			"clean", []byte("/embed/profile"))
		out := buf.String()
		b64 := base64.StdEncoding.EncodeToString([]byte("/embed/profile?sessionId=bytes1&tab=2"))
		for _, secret := range []string{"bytes1", "raw1", "text1", "json1", "nested1", "list1", b64} {
			if strings.Contains(out, secret) {
				t.Errorf("log holds %s: %s", secret, out)
			}
		}
	}
}

func TestRedactingHandler(t *testing.T) {
	var buf bytes.Buffer
	log := telemetry.Logger(slog.New(slog.NewTextHandler(&buf, nil)))
	if telemetry.Logger(log) != log {
		t.Error("Logger wraps a redacting logger again")
	}
	if telemetry.Logger(nil) != nil {
		t.Error("Logger(nil) is not nil")
	}
	log = log.With("base", "/p?sessionId=with1")
	log.Info("GET /embed?sessionId=msg1 failed",
		"url", "/embed?sessionId=str1&a=b",
		"err", errors.New("get /embed?sessionId=err1: refused"),
		slog.Group("req", "u", "/x?sessionId=grp1", "n", 3),
		"addr", stringer("/y?sessionId=any1"),
		"count", 7)
	log.WithGroup("g").Info("clean", "path", "/embed/page")
	out := buf.String()
	for _, secret := range []string{"with1", "msg1", "str1", "err1", "grp1", "any1"} {
		if strings.Contains(out, secret) {
			t.Errorf("log holds %s: %s", secret, out)
		}
	}
	for _, want := range []string{"count=7", "req.n=3", "a=b", "g.path=/embed/page", "sessionId=REDACTED"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s: %s", want, out)
		}
	}
}

// TestRedactSessionIDLinear: a string made of many "=" or "%3D" (any client
// can send one in a URL) is scrubbed in one pass: the memory allocated is
// a small multiple of its length, not its square.
func TestRedactSessionIDLinear(t *testing.T) {
	for _, s := range []string{
		"/embed?x=" + strings.Repeat("%3D", 64000),
		"/embed?" + strings.Repeat("sessionIdx%25=", 20000),
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		telemetry.RedactSessionID(s)
		runtime.ReadMemStats(&after)
		if got := after.TotalAlloc - before.TotalAlloc; got > 20*uint64(len(s)) {
			t.Errorf("scrubbing %d bytes allocated %d bytes", len(s), got)
		}
	}
}
