// Package wire holds the HTTP plumbing shared by every embedkit handler and
// middleware: JSON decoding with a size cap, JSON writes, and one error type
// with one mapping to HTTP statuses, so every error response looks alike:
// {"error": "<message>"}.
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"iter"
	"log/slog"
	"maps"
	"math/big"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/embedkit/embedkit/internal/telemetry"
	"github.com/embedkit/embedkit/middleware/httperr"
)

// MaxBodyBytes caps request bodies: 1 MiB. A larger body is a 413.
const MaxBodyBytes = 1 << 20

// Error is the public error type, [httperr.Error]: an HTTP status, the
// client-facing message and an optional cause that is logged, never sent.
type Error = httperr.Error

// Errorf returns an *Error with status and a formatted message.
func Errorf(status int, format string, args ...any) *Error {
	return httperr.Errorf(status, format, args...)
}

// BadRequest returns a 400 *Error.
func BadRequest(format string, args ...any) *Error {
	return httperr.Errorf(http.StatusBadRequest, format, args...)
}

// Status returns the HTTP status and client message err maps to
// ([httperr.Status]).
func Status(err error) (int, string) { return httperr.Status(err) }

// WriteError writes err as {"error": msg} with its status
// ([httperr.Write]). Causes of 5xx errors are logged on log (if non-nil),
// never sent.
func WriteError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	if e, ok := errors.AsType[*Error](err); ok && e.Limit != "" && r != nil {
		telemetry.LimitRejected(r.Context(), e.Limit)
	}
	httperr.Write(w, r, log, err)
}

// Limited marks e as the refusal of the limit named limit (see
// httperr.Error.Limit) and returns it.
func Limited(limit string, e *Error) *Error {
	e.Limit = limit
	return e
}

// WriteJSON writes v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // "<key>" stays readable; the body is JSON, never HTML
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":"internal error"}` + "\n")
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// DecodeJSON reads r's body with [ReadBody] and decodes it into v, which
// must be a pointer to a struct, with the rules of [Unmarshal].
func DecodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := ReadBody(w, r)
	if err != nil {
		return err
	}
	return Unmarshal(body, v)
}

// ReadBody reads r's body, at most [MaxBodyBytes]; a larger one is a
// *http.MaxBytesError (413). The Content-Type header is not checked: the
// body must be JSON whatever it says (clients such as curl -d send
// form-urlencoded by default), and the API is authenticated by headers, not
// cookies, so a cross-site form cannot call it.
func ReadBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, err
		}
		return nil, &Error{Status: http.StatusBadRequest, Message: "could not read request body", Err: err}
	}
	return body, nil
}

// Unmarshal decodes a JSON object in body into v with the error rules of
// [DecodeJSON]: a 400 *Error for a body that is not one JSON object, for a
// known field of the wrong type, for a known field its object holds
// already (or a key that an object kept as it is, or decoded into a map,
// holds already), and for text that is not valid UTF-8 (raw invalid
// bytes, or a \u escape of an unpaired surrogate, in any string or key) or
// holds NUL; such text is refused, never replaced. Keys name fields
// exactly, as in JSON: unknown fields, among them a field's name in
// another letter case ("externalID"), are ignored with their values,
// where encoding/json alone would read "externalID" into externalId.
func Unmarshal(body []byte, v any) error {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return BadRequest("request body must be a JSON object")
	}
	if trimmed[0] != '{' {
		return BadRequest("request body must be a JSON object")
	}
	if off := badTextOffset(trimmed); off >= 0 {
		// Never replaced silently: "a\xff" and "a\xfe" would both become
		// "a\uFFFD", one user where the caller meant two.
		return invalidTextError(trimmed, off)
	}
	if hasNULEscape(trimmed) {
		// PostgreSQL text cannot hold NUL; refuse it alike on every backend.
		if field, ok := NULField(trimmed); ok {
			return BadRequest("field %s must not contain the NUL character (\\u0000)", field)
		}
		return BadRequest("strings must not contain the NUL character (\\u0000)")
	}
	// JSON has one number type and some encoders write whole numbers as
	// 1.0 or 1e3: an integer field that gets one is decoded again with that
	// number (and no other) written as an integer. A fraction still fails.
	doc := trimmed
	if json.Valid(doc) {
		rep := scanKeys(doc, reflect.TypeOf(v))
		if rep.dup != "" {
			return BadRequest("field %s appears more than once", shortPath(rep.dup))
		}
		if rep.miscased != nil {
			doc = dropMembers(doc, rep.miscased)
		}
	} // else the decoder says what is wrong
	var dec *json.Decoder
	for rewrites := 0; ; rewrites++ {
		dec = json.NewDecoder(bytes.NewReader(doc))
		err := dec.Decode(v)
		if err == nil {
			break
		}
		te, ok := errors.AsType[*json.UnmarshalTypeError](err)
		if !ok || !isInteger(te.Type.Kind()) || rewrites == maxIntegerRewrites {
			return decodeError(doc, err)
		}
		fixed, ok := wholeNumberAt(doc, te)
		if !ok {
			return decodeError(doc, err)
		}
		doc = fixed
		reflect.ValueOf(v).Elem().SetZero()
	}
	if dec.More() {
		return BadRequest("request body must hold a single JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return BadRequest("request body must hold a single JSON object")
	}
	return nil
}

// KeyProblems reports, as paths such as accounts[0].apiKeys, the first
// key of doc, a valid JSON document that decodes into v, that names a
// field of v's structs only in another letter case ("apikeys" for apiKeys:
// an unknown field, which encoding/json would read into that field), and
// the first known field (or key of an object kept as it is or decoded
// into a map) that an object holds twice; "" for none.
func KeyProblems(doc []byte, v any) (miscased, dup string) {
	rep := scanKeys(doc, reflect.TypeOf(v))
	if rep.miscased != nil {
		miscased = shortPath(rep.miscasedPath)
	}
	if rep.dup != "" {
		dup = shortPath(rep.dup)
	}
	return miscased, dup
}

// TypeErrorField names the field of te, an error decoding doc, by its
// path in doc with the indexes of the arrays it is in
// ("accounts[0].apiKeys[1].admin"), where encoding/json gives the names
// alone: the value at te's offset, when it lies at te.Field and is of the
// JSON type te saw. An error from a type's own UnmarshalJSON counts its
// offset from the start of that type's part of doc, which may lead
// elsewhere: then the field is the first value at te.Field, in doc's
// order, of that type. te.Field when neither is found.
func TypeErrorField(doc []byte, te *json.UnmarshalTypeError) string {
	if te.Field == "" {
		return "" // the document itself
	}
	seen, _, _ := strings.Cut(te.Value, " ") // "number 1.5"
	if seen == "bool" {
		seen = "boolean"
	}
	// te.Offset is just past the value's first byte or its end.
	end := int(te.Offset) - 1
	p, isKey, ok := pathAt(doc, end)
	// Without the indexes, the path is te.Field, or below it (a map's
	// keys, which te.Field leaves out).
	names := arrayIndex.ReplaceAllString(p, "")
	atField := ok && !isKey && p != "" && (strings.EqualFold(names, te.Field) || hasPrefixFold(names, te.Field+"."))
	if atField && kindEndingAt(doc, end) == seen {
		return shortPath(p)
	}
	if p, ok := firstOfType(doc, strings.Split(te.Field, "."), seen); ok {
		return shortPath(p)
	}
	if atField {
		return shortPath(p)
	}
	return te.Field
}

// kindEndingAt returns the JSON type of the value of doc whose first byte
// (an array, an object) or last byte (the others) is at i.
func kindEndingAt(doc []byte, i int) string {
	if i < 0 || i >= len(doc) {
		return ""
	}
	switch c := doc[i]; {
	case c == '"':
		return "string"
	case c >= '0' && c <= '9':
		return "number"
	case c == 'e': // true, false
		return "boolean"
	case c == '[':
		return "array"
	case c == '{':
		return "object"
	}
	return ""
}

// firstOfType returns the path, with array indexes, of the first value of
// doc at the field names (through any arrays) whose
// JSON type is kind.
func firstOfType(doc []byte, names []string, kind string) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return "", false
	}
	var walk func(v any, names []string, path string) (string, bool)
	walk = func(v any, names []string, path string) (string, bool) {
		if len(names) == 0 {
			// An item of a slice field (te.Field names the slice) first.
			if items, ok := v.([]any); ok {
				for i, x := range items {
					if valueKind(x) == kind {
						return path + "[" + strconv.Itoa(i) + "]", true
					}
				}
			}
			return path, valueKind(v) == kind
		}
		switch v := v.(type) {
		case []any:
			for i, x := range v {
				if p, ok := walk(x, names, path+"["+strconv.Itoa(i)+"]"); ok {
					return p, true
				}
			}
		case map[string]any:
			for k, x := range v { // a known field is there once, named exactly
				if k == names[0] {
					return walk(x, names[1:], strings.TrimPrefix(path+"."+k, "."))
				}
			}
		}
		return "", false
	}
	return walk(v, names, "")
}

// valueKind is the JSON type of v, decoded into an any, as jsonKind
// names Go kinds.
func valueKind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "null"
}

// arrayIndex matches an index of a field path ("[12]").
var arrayIndex = regexp.MustCompile(`\[[0-9]+\]`)

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

func isInteger(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// decodeError returns the 400 for err, an error decoding doc. A field of
// the wrong type is named by its path in doc, with the indexes of the
// arrays it is in ("userAttributes[1].value"), where encoding/json gives
// the names alone.
func decodeError(doc []byte, err error) error {
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		if te.Field == "" {
			return BadRequest("request body must be a JSON object")
		}
		field := TypeErrorField(doc, te)
		if strings.HasPrefix(te.Value, "number") && isInteger(te.Type.Kind()) {
			// A number, but a fraction or out of range.
			return BadRequest("field %s must be a whole number within range", field)
		}
		return BadRequest("field %s has the wrong type: %s expected", field, jsonKind(te.Type.Kind().String()))
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	if _, ok := errors.AsType[*json.SyntaxError](err); ok {
		return BadRequest("malformed JSON: %s", err.Error())
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return BadRequest("malformed JSON: unexpected end of input")
	}
	return BadRequest("malformed JSON")
}

func jsonKind(k string) string {
	switch k {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice", "array":
		return "array"
	case "map", "struct", "ptr":
		return "object"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "float32", "float64":
		return "number"
	}
	return k
}

// maxIntegerRewrites bounds the integer fields of one body that may be
// written 1.0 or 1e3 (each costs a decode).
const maxIntegerRewrites = 8

// wholeNumberAt returns doc with the number that te reports (it ends at
// te.Offset) written as an integer, when its value is exactly a whole
// number that fits an int64; ok is false otherwise.
func wholeNumberAt(doc []byte, te *json.UnmarshalTypeError) ([]byte, bool) {
	lit, ok := strings.CutPrefix(te.Value, "number ")
	end := int(te.Offset)
	start := end - len(lit)
	if !ok || start < 0 || end > len(doc) || string(doc[start:end]) != lit || len(lit) > 64 {
		return nil, false
	}
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		// Bound the exponent before big.Rat expands it.
		if exp, err := strconv.Atoi(lit[i+1:]); err != nil || exp < -40 || exp > 40 {
			return nil, false
		}
	}
	var r big.Rat
	if _, ok := r.SetString(lit); !ok || !r.IsInt() || !r.Num().IsInt64() {
		return nil, false
	}
	out := make([]byte, 0, len(doc))
	out = append(out, doc[:start]...)
	out = strconv.AppendInt(out, r.Num().Int64(), 10)
	return append(out, doc[end:]...), true
}

// HasKey reports whether the top-level JSON object body has key (as
// written or spelled with escapes; keys name fields exactly) with a non-null value,
// so that "chatId": "" is told from an omitted chatId. Every occurrence
// counts, in document order, as when encoding/json decodes the body: a null
// leaves a field as it is, so one non-null occurrence sets it. key is ASCII.
func HasKey(body []byte, key string) bool {
	if !bytes.Contains(body, []byte(key)) && !bytes.Contains(body, []byte(`\u`)) {
		return false
	}
	for k, v := range members(body) {
		if k == key && string(v) != "null" {
			return true
		}
	}
	return false
}

// Member returns the value of key (as written or spelled with escapes) in
// the top-level JSON object body, its last occurrence; nil when it has
// none, or body is not an object.
func Member(body []byte, key string) json.RawMessage {
	var found json.RawMessage
	for k, v := range members(body) {
		if k == key {
			found = v
		}
	}
	return found
}

// members yields the keys (unescaped) and values of the top-level JSON
// object body, in document order, until the end or a syntax error.
func members(body []byte) iter.Seq2[string, json.RawMessage] {
	return func(yield func(string, json.RawMessage) bool) {
		dec := json.NewDecoder(bytes.NewReader(body))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return
		}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return
			}
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				return
			}
			if k, _ := tok.(string); !yield(k, v) {
				return
			}
		}
	}
}

// NULField returns the path of the first string or key of doc, a JSON
// document, that holds NUL, which PostgreSQL's text cannot store ("" for
// the document itself).
func NULField(doc []byte) (string, bool) {
	if !hasNULEscape(doc) {
		return "", false
	}
	hasNUL := func(s string) bool { return strings.IndexByte(s, 0) >= 0 }
	return firstField(doc, func(v any) bool { s, ok := v.(string); return ok && hasNUL(s) }, hasNUL)
}

// NullField returns the path of the first null value of doc, a JSON
// document, in key order.
func NullField(doc []byte) (string, bool) {
	if !bytes.Contains(doc, []byte("null")) {
		return "", false
	}
	return firstField(doc, func(v any) bool { return v == nil }, nil)
}

// firstField returns the path ("userProfile.displayName", "groups[2]") of
// the first value of doc, a JSON document, in key order, for which bad is
// true, or of the first key for which badKey (when set) is; NUL in a key
// is written \u0000.
func firstField(doc []byte, bad func(v any) bool, badKey func(k string) bool) (string, bool) {
	var v any
	if json.Unmarshal(doc, &v) != nil {
		return "", false
	}
	var segs []pathSeg
	field, ok := fieldAt(v, &segs, bad, badKey)
	return shortPath(field), ok
}

// fieldAt is firstField below the path segs, which it leaves as it found
// them.
func fieldAt(v any, segs *[]pathSeg, bad func(v any) bool, badKey func(k string) bool) (string, bool) {
	if bad(v) {
		return joinPath(*segs), true
	}
	switch x := v.(type) {
	case []any:
		for i, e := range x {
			*segs = append(*segs, pathSeg{index: i, isIdx: true})
			p, ok := fieldAt(e, segs, bad, badKey)
			*segs = (*segs)[:len(*segs)-1]
			if ok {
				return p, true
			}
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			*segs = append(*segs, pathSeg{key: k})
			if badKey != nil && badKey(k) {
				return strings.ReplaceAll(joinPath(*segs), "\x00", `\u0000`), true
			}
			p, ok := fieldAt(x[k], segs, bad, badKey)
			*segs = (*segs)[:len(*segs)-1]
			if ok {
				return p, true
			}
		}
	}
	return "", false
}

// hasNULEscape reports whether a JSON text holds the escape \u0000 (a
// backslash itself escaped, as in "\\u0000", does not count).
func hasNULEscape(b []byte) bool {
	for i := 0; ; {
		j := bytes.Index(b[i:], []byte(`u0000`))
		if j < 0 {
			return false
		}
		j += i
		n := 0 // backslashes right before
		for k := j - 1; k >= 0 && b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 1 {
			return true
		}
		i = j + 5
	}
}

// ValidText reports whether s can be stored as text by every backend: valid
// UTF-8 without NUL. Handlers check path parameters with it and answer a
// value that fails as not found.
func ValidText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}
