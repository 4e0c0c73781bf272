package telemetry

import (
	"context"
	"encoding"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"reflect"
	"strings"
)

// Redacted replaces the value of a ?sessionId= query parameter.
const Redacted = "REDACTED"

// param is the query parameter scrubbed, lower-cased; it matches
// case-insensitively, plain ("sessionId=") or percent-encoded
// ("sessionId%3D", a URL inside another URL's query).
const param = "sessionid"

// RedactSessionID returns s with the value of every sessionId query
// parameter replaced by [Redacted]: "/embed?sessionId=abc&x=1" becomes
// "/embed?sessionId=REDACTED&x=1". A parameter is a name before '=' (or
// "%3D", a URL inside another URL's query); it is sessionId when, decoded
// as a query decodes it (percent-encoding, any number of times), it is
// sessionId in any letter case, alone or after a delimiter of another
// query ('?', '&', ';', or a JSON-escaped "\u0026"). The value ends at
// '&', ';', '#', a space, a quote, '<', '>', or an encoded '&' ("%26").
// s is returned as is when it has no such parameter.
func RedactSessionID(s string) string {
	v := nextValue(s, 0)
	if v < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	last := 0
	for v >= 0 {
		end := valueEnd(s, v)
		b.WriteString(s[last:v])
		if end > v {
			b.WriteString(Redacted)
		}
		last = end
		v = nextValue(s, end)
	}
	b.WriteString(s[last:])
	return b.String()
}

// nextValue returns where the value of the next sessionId parameter in s
// at or after from starts, or -1. One pass: a name is the run of name
// bytes, '%' and '+' before an '=' or "%3D", which also ends it, so each
// byte is read once and each name decoded once, whatever s holds.
func nextValue(s string, from int) int {
	start := from // of the current name
	for j := from; j < len(s); j++ {
		v := -1
		switch c := s[j]; {
		case c == '=':
			v = j + 1
		case c == '%' && j+2 < len(s) && s[j+1] == '3' && s[j+2]|0x20 == 'd':
			v = j + 3
		case !isNameByte(c) && c != '%' && c != '+':
			start = j + 1
			continue
		default:
			continue
		}
		if j-start >= len(param) && isParam(s[start:j]) {
			return v
		}
		start, j = v, v-1
	}
	return -1
}

// isParam reports whether name, a parameter's name as written, is
// sessionId (see [RedactSessionID]).
func isParam(name string) bool {
	for range 4 { // decoded again and again: a name encoded that often is no accident
		if k := strings.LastIndexAny(name, "?&;"); k >= 0 {
			name = name[k+1:]
		}
		if l := strings.ToLower(name); len(l) > 5 && (strings.HasPrefix(l, "u0026") || strings.HasPrefix(l, "u003f") || strings.HasPrefix(l, "u003b")) {
			name = name[5:] // after a JSON-escaped delimiter
		}
		if strings.EqualFold(name, param) {
			return true
		}
		d, err := url.QueryUnescape(name)
		if err != nil || d == name {
			return false
		}
		name = d
	}
	return false
}

// isNameByte reports whether c can be part of a query parameter's name
// (then "xsessionId=" is another parameter).
func isNameByte(c byte) bool {
	return c == '_' || c == '-' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func valueEnd(s string, from int) int {
	for i := from; i < len(s); i++ {
		switch s[i] {
		case '&', ';', '#', ' ', '\t', '\n', '\r', '"', '\'', '<', '>', '`':
			return i
		case '%':
			if i+2 < len(s) && s[i+1] == '2' && (s[i+2] == '6' || s[i+2] == '3') { // %26 &, %23 #
				return i
			}
		}
	}
	return len(s)
}

// containsParam reports whether s may hold a sessionId parameter.
func containsParam(s string) bool { return nextValue(s, 0) >= 0 }

// RedactingHandler returns a slog.Handler that passes records to h with
// every ?sessionId= value scrubbed (see [RedactSessionID]) from the
// message and from every attribute: strings, and other values whose text
// holds one (they are replaced by their scrubbed text).
func RedactingHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(*redacting); ok {
		return h
	}
	return &redacting{h: h}
}

// Logger returns l logging through [RedactingHandler]; nil stays nil.
func Logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return nil
	}
	if _, ok := l.Handler().(*redacting); ok {
		return l
	}
	return slog.New(RedactingHandler(l.Handler()))
}

type redacting struct{ h slog.Handler }

func (r *redacting) Enabled(ctx context.Context, l slog.Level) bool { return r.h.Enabled(ctx, l) }

func (r *redacting) Handle(ctx context.Context, rec slog.Record) error {
	dirty := containsParam(rec.Message)
	if !dirty {
		rec.Attrs(func(a slog.Attr) bool {
			dirty = attrDirty(a)
			return !dirty
		})
	}
	if !dirty {
		return r.h.Handle(ctx, rec)
	}
	clean := slog.NewRecord(rec.Time, rec.Level, RedactSessionID(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		clean.AddAttrs(redactAttr(a))
		return true
	})
	return r.h.Handle(ctx, clean)
}

func (r *redacting) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = redactAttr(a)
	}
	return &redacting{h: r.h.WithAttrs(clean)}
}

func (r *redacting) WithGroup(name string) slog.Handler { return &redacting{h: r.h.WithGroup(name)} }

func attrDirty(a slog.Attr) bool {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return containsParam(v.String())
	case slog.KindGroup:
		for _, g := range v.Group() {
			if attrDirty(g) {
				return true
			}
		}
		return false
	case slog.KindAny:
		_, dirty := dirtyText(v.Any())
		return dirty
	}
	return false
}

// dirtyText returns the first text that a handler may write for v and
// that holds a sessionId parameter: fmt's (the text handler's for most
// values), a byte slice's bytes (the text handler writes them as a
// string, the JSON handler base64-encodes them, a json.RawMessage goes
// verbatim), MarshalText's, and JSON's (the JSON handler's, with a
// json.RawMessage nested in a struct or a slice written verbatim).
func dirtyText(v any) (string, bool) {
	if s := fmt.Sprint(v); containsParam(s) {
		return s, true
	}
	if b, err := marshal(func() ([]byte, error) { return json.Marshal(v) }); err == nil && containsParam(string(b)) {
		return string(b), true
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.Uint8 {
		if s := string(rv.Bytes()); containsParam(s) {
			return s, true
		}
	}
	if m, ok := v.(encoding.TextMarshaler); ok {
		if b, err := marshal(m.MarshalText); err == nil && containsParam(string(b)) {
			return string(b), true
		}
	}
	return "", false
}

// marshal calls f, taking a panic (a method on a nil pointer) for an
// error, as fmt does with String: logging never panics here.
func marshal(f func() ([]byte, error)) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("telemetry: marshal panicked: %v", r)
		}
	}()
	return f()
}

func redactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, RedactSessionID(v.String()))
	case slog.KindGroup:
		g := v.Group()
		clean := make([]slog.Attr, len(g))
		for i, ga := range g {
			clean[i] = redactAttr(ga)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(clean...)}
	case slog.KindAny:
		if s, dirty := dirtyText(v.Any()); dirty {
			return slog.String(a.Key, RedactSessionID(s))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
