package wire_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/embedkit/embedkit/internal/wire"
	"github.com/embedkit/embedkit/store"
)

func TestStatus(t *testing.T) {
	cases := []struct {
		err    error
		status int
		msg    string
	}{
		{wire.BadRequest("field x is bad"), 400, "field x is bad"},
		{fmt.Errorf("wrapped: %w", wire.Errorf(409, "cannot change type")), 409, "cannot change type"},
		{&http.MaxBytesError{Limit: 1}, 413, "request body too large"},
		{fmt.Errorf("gormstore: %w: dial refused", store.ErrUnavailable), 503, "service unavailable, try again"},
		{context.DeadlineExceeded, 503, "service unavailable, try again"},
		{errors.New("secret password=hunter2 leaked"), 500, "internal error"},
	}
	for _, c := range cases {
		status, msg := wire.Status(c.err)
		if status != c.status || msg != c.msg {
			t.Errorf("Status(%v) = %d %q, want %d %q", c.err, status, msg, c.status, c.msg)
		}
	}
}

func TestWriteErrorNeverSendsCauses(t *testing.T) {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	wire.WriteError(rec, req, nil, &wire.Error{Status: 503, Message: "unavailable", Err: errors.New("dsn postgres://u:pw@h")})
	if rec.Code != 503 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("code %d, type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	if strings.Contains(rec.Body.String(), "pw@") {
		t.Errorf("body leaks the cause: %s", rec.Body)
	}
	var body map[string]string
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body["error"] != "unavailable" {
		t.Errorf("body = %s (%v)", rec.Body, err)
	}
}

type target struct {
	Name  *string  `json:"name"`
	Count int      `json:"count"`
	Tags  []string `json:"tags"`
	Inner *struct {
		On bool `json:"on"`
	} `json:"inner"`
	M    map[string]int       `json:"m"`
	Raw  json.RawMessage      `json:"raw"`
	List []*struct{ On bool } `json:"list"`
	Self *selfDecoding        `json:"self"`
	Embedded
}

// selfDecoding decodes itself: encoding/json's offset of a type error
// inside it counts from the start of its own part of the document.
type selfDecoding struct {
	On bool `json:"on"`
}

func (s *selfDecoding) UnmarshalJSON(b []byte) error {
	var v struct {
		On bool `json:"on"`
	}
	err := json.Unmarshal(b, &v)
	s.On = v.On
	return err
}

type Embedded struct {
	Embedded int `json:"embedded"`
}

func TestUnmarshalErrors(t *testing.T) {
	cases := map[string]string{
		``:                                    "request body must be a JSON object",
		`[]`:                                  "request body must be a JSON object",
		`{"name": 1}`:                         "field name has the wrong type: string expected",
		`{"count": "x"}`:                      "field count has the wrong type: number expected",
		`{"count": 1.5}`:                      "field count must be a whole number within range",
		`{"count": 1e19}`:                     "field count must be a whole number within range",
		`{"count": 0.99999999999999999999}`:   "field count must be a whole number within range",
		`{"count": 1e-999999999}`:             "field count must be a whole number within range",
		`{"count": 1e999999999}`:              "field count must be a whole number within range",
		`{"count": 1e30}`:                     "field count must be a whole number within range",
		`{"tags": "x"}`:                       "field tags has the wrong type: array expected",
		`{"inner": {"on": "yes"}}`:            "field inner.on has the wrong type: boolean expected",
		`{"list": [{"On": true}, {"On": 1}]}`: "field list[1].On has the wrong type: boolean expected",
		`{"list": [{}, {}, 7]}`:               "field list[2] has the wrong type: object expected",
		`{"tags": ["a", ["b"]]}`:              "field tags[1] has the wrong type: string expected",
		`{"m": {"k": "v"}}`:                   "field m.k has the wrong type: number expected",
		`{"self": {"on": 1}}`:                 "field self.on has the wrong type: boolean expected",
		`{"name": "abcdefghij", "self": [{"on": 1}]}`: "field self has the wrong type: object expected",
		`{"name": "abcdefghij", "self": {"on": 1}}`:   "field self.on has the wrong type: boolean expected",
		`{"count": 1.5, "tags": []}`:                  "field count must be a whole number within range",
		`{"name": "a"} {}`:                            "request body must hold a single JSON object",
		`{"name": `:                                   "malformed JSON: unexpected end of input",
	}
	for body, want := range cases {
		var v target
		err := wire.Unmarshal([]byte(body), &v)
		status, msg := wire.Status(err)
		if status != 400 || msg != want {
			t.Errorf("Unmarshal(%q) = %d %q, want 400 %q", body, status, msg, want)
		}
	}
	for body, want := range map[string]int{`{"count": 1.0}`: 1, `{"count": 3e2, "name": "1.5e1"}`: 300, `{"count": -2.50e1}`: -25, `{"count": 1e16}`: 1e16} {
		var v target
		if err := wire.Unmarshal([]byte(body), &v); err != nil || v.Count != want {
			t.Errorf("Unmarshal(%s) = %v, count %d, want %d", body, err, v.Count, want)
		}
		if v.Name != nil && *v.Name != "1.5e1" {
			t.Errorf("a string was rewritten: %q", *v.Name)
		}
	}
	var raw struct {
		Count int             `json:"count"`
		Raw   json.RawMessage `json:"raw"`
	}
	if err := wire.Unmarshal([]byte(`{"raw": [3.0, 1e1], "count": 2.0}`), &raw); err != nil || raw.Count != 2 || string(raw.Raw) != `[3.0, 1e1]` {
		t.Errorf("only the integer field's number is rewritten: %v %d %s", err, raw.Count, raw.Raw)
	}
	var v target
	if err := wire.Unmarshal([]byte(`{"name":"a","unknown":[1,2]}`), &v); err != nil || *v.Name != "a" {
		t.Errorf("unknown fields must be ignored: %v", err)
	}
}

func FuzzUnmarshal(f *testing.F) {
	for _, s := range []string{`{}`, `{"name":"x","count":3,"tags":["a"]}`, `{"inner":{"on":true}}`, `[`, `{"count":1e400}`,
		"{\"name\":\"col\xff\"}", `{"tags":["\ud800"]}`, `{"name":"\ud83d\ude00"}`, `{"name":"\ufffd"}`,
		`{"name":"a","NAME":"b"}`, `{"inner":{"on":true,"o\u006e":false}}`, `{"x":{"k":1,"K":2}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v target
		err := wire.Unmarshal(b, &v)
		exact, top := duplicates(b)
		if err == nil {
			// Known fields name target's fields exactly: one given twice is
			// refused, one in another letter case is ignored.
			seen := map[string]bool{}
			for _, k := range top {
				if targetFields[k] && seen[k] {
					t.Fatalf("Unmarshal(%q) accepted an object that repeats the field %s", b, k)
				}
				seen[k] = true
			}
			if v.Name != nil && !seen["name"] || v.Count != 0 && !seen["count"] || v.Tags != nil && !seen["tags"] {
				t.Fatalf("Unmarshal(%q) = %+v: read a key that is not a field's exact name", b, v)
			}
			// Nothing was replaced: a decoded string holds U+FFFD only
			// when the body spelled it (raw or as \ufffd).
			strs := v.Tags
			if v.Name != nil {
				strs = append(strs, *v.Name)
			}
			for _, s := range strs {
				if !utf8.ValidString(s) {
					t.Fatalf("Unmarshal(%q) decoded invalid UTF-8 %q", b, s)
				}
				if strings.ContainsRune(s, utf8.RuneError) && !bytes.Contains(b, []byte("\uFFFD")) &&
					!bytes.Contains(bytes.ToLower(b), []byte(`\ufffd`)) {
					t.Fatalf("Unmarshal(%q) replaced text: %q", b, s)
				}
			}
			return
		}
		if status, _ := wire.Status(err); status != 400 {
			t.Fatalf("Unmarshal(%q) = %v: status %d, want 400", b, err, status)
		}
		// Refused for a duplicate key only when an object holds two equal
		// keys.
		if _, msg := wire.Status(err); strings.Contains(msg, "appears more than once") && !exact {
			t.Fatalf("Unmarshal(%q) = %q, but no object repeats a key", b, msg)
		}
	})
}

// targetFields are the JSON names of target's fields.
var targetFields = map[string]bool{"name": true, "count": true, "tags": true, "inner": true, "m": true, "raw": true, "list": true, "self": true, "embedded": true}

// duplicates reports, with encoding/json's tokens, whether an object of
// the JSON text b holds two equal keys, and the keys of the top-level
// object (target's fields), unescaped.
func duplicates(b []byte) (exact bool, topKeys []string) {
	dec := json.NewDecoder(bytes.NewReader(b))
	type frame struct {
		obj     bool
		keys    []string
		wantKey bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch x := tok.(type) {
		case json.Delim:
			switch x {
			case '{', '[':
				if top != nil && top.obj {
					top.wantKey = true
				}
				stack = append(stack, &frame{obj: x == '{', wantKey: x == '{'})
			default:
				stack = stack[:len(stack)-1]
			}
			continue
		case string:
			if top != nil && top.obj && top.wantKey {
				exact = exact || slices.Contains(top.keys, x)
				top.keys = append(top.keys, x)
				if len(stack) == 1 {
					topKeys = append(topKeys, x)
				}
				top.wantKey = false
				continue
			}
		}
		if top != nil && top.obj {
			top.wantKey = true
		}
	}
}

// TestDuplicateKeysAreRefused: a key its object holds already, in any
// letter case or spelled with escapes, is a 400 naming it; keys of
// different objects, and equal texts that are values, are not.
func TestDuplicateKeysAreRefused(t *testing.T) {
	for body, want := range map[string]string{
		`{"name":"a","name":"b"}`:                       "field name appears more than once",
		`{"name":"a","\u006eame":"b"}`:                  "field name appears more than once",
		`{"inner":{"on":true,"on":false}}`:              "field inner.on appears more than once",
		`{"list":[{"On":true},{"On":true,"On":false}]}`: "field list[1].On appears more than once",
		`{"m":{"a":1,"a":2}}`:                           "field m.a appears more than once",
		`{"raw":{"a":1,"a":2}}`:                         "field raw.a appears more than once",
		`{"raw":[{"x":{"k":1,"k":2}}]}`:                 "field raw[0].x.k appears more than once",
		`{"embedded":1,"embedded":2}`:                   "field embedded appears more than once",
		// Keys name fields exactly: a field's name in another letter case
		// is an unknown field, ignored with its value, as are unknown
		// fields given twice and whatever is inside them.
		`{"name":"a","NAME":"b"}`:                   "",
		`{"inner":{"on":true,"On":false}}`:          "",
		`{"list":[{"On":true,"ON":false}]}`:         "",
		`{"embedded":1,"EMBEDDED":2}`:               "",
		`{"":1,"":2}`:                               "",
		`{"x":[{"a":1},{"a":1,"b":{"k":1,"k":2}}]}`: "",
		`{"foo":1,"Foo":2,"foo":3}`:                 "",
		// In a map or a raw value, keys that differ in case are two keys.
		`{"m":{"Region":1,"region":2},"raw":{"Region":"eu","region":"EU"}}`: "",
		`{"name":"a","tags":["name","name"],"inner":{"name":1}}`:            "",
		`{"a":{"k":1},"b":{"k":1},"c":[{"k":1},{"k":1}]}`:                   "",
		`{"name":"x\"name\":","count":1}`:                                   "",
	} {
		var v target
		err := wire.Unmarshal([]byte(body), &v)
		got := ""
		if err != nil {
			var status int
			status, got = wire.Status(err)
			if status != 400 {
				t.Errorf("Unmarshal(%s): status %d", body, status)
			}
		}
		if got != want {
			t.Errorf("Unmarshal(%s) = %q, want %q", body, got, want)
		}
	}
	// Many keys: the walk stays linear, and finds the duplicate at the end.
	var b strings.Builder
	b.WriteString(`{"name":"x","m":{"k":0`)
	for i := range 100000 {
		fmt.Fprintf(&b, `,"k%d":1`, i)
	}
	b.WriteString(`,"k99999":2}}`)
	var v target
	if _, msg := wire.Status(wire.Unmarshal([]byte(b.String()), &v)); msg != "field m.k99999 appears more than once" {
		t.Errorf("100,000 keys: %q", msg)
	}
}

// TestMiscasedKeysAreIgnored: a key that names a field only in another
// letter case is an unknown field: its value is neither read nor checked,
// wherever it stands in its object.
func TestMiscasedKeysAreIgnored(t *testing.T) {
	for body, want := range map[string]string{
		`{"NAME":"b"}`:                             "<nil> 0",
		`{"name":"a","NAME":5}`:                    "a 0",
		`{"NAME":5,"name":"a"}`:                    "a 0",
		`{"Name":[1,{"x":"}"}], "count":2 }`:       "<nil> 2",
		`{"count":2, "Count":"x", "COUNT":{} }`:    "<nil> 2",
		`{"inner":{"ON":"x","on":true},"Count":1}`: "<nil> 0 true",
		`{"list":[{"on":"x"},{"On":true,"oN":1}]}`: "<nil> 0 [false true]",
		`{"\u004eame":"b","name":"a"}`:             "a 0",
	} {
		var v target
		if err := wire.Unmarshal([]byte(body), &v); err != nil {
			t.Errorf("Unmarshal(%s): %v", body, err)
			continue
		}
		got := "<nil>"
		if v.Name != nil {
			got = *v.Name
		}
		got += fmt.Sprintf(" %d", v.Count)
		if v.Inner != nil {
			got += fmt.Sprintf(" %v", v.Inner.On)
		}
		if v.List != nil {
			var ons []bool
			for _, l := range v.List {
				ons = append(ons, l.On)
			}
			got += fmt.Sprintf(" %v", ons)
		}
		if got != want {
			t.Errorf("Unmarshal(%s) = %s, want %s", body, got, want)
		}
	}
}

func TestNULIsRefused(t *testing.T) {
	for body, ok := range map[string]bool{
		`{"name":"a\u0000b"}`:    false,
		`{"name":"a\\\u0000b"}`:  false, // an escaped backslash, then the escape
		`{"name":"a\\u0000b"}`:   true,  // the text \u0000
		`{"name":"u0000"}`:       true,
		`{"name":"\\\\u0000"}`:   true,
		`{"tags":["x\u0000"]}`:   false,
		`{"name":"\u00001"}`:     false,
		`{"name":"plain\u0001"}`: true,
	} {
		var v target
		err := wire.Unmarshal([]byte(body), &v)
		if (err == nil) != ok {
			t.Errorf("Unmarshal(%s) = %v, want ok %v", body, err, ok)
		}
	}
	for body, want := range map[string]string{
		`{"name":"a\u0000b"}`:                "field name must not contain the NUL character (\\u0000)",
		`{"tags":["x","y\u0000"]}`:           "field tags[1] must not contain the NUL character (\\u0000)",
		`{"inner":{"on":true,"k\u0000":1}}`:  "field inner.k\\u0000 must not contain the NUL character (\\u0000)",
		`{"name":"a\u0000b","tags":["\u0000`: "strings must not contain the NUL character (\\u0000)", // malformed: no field to name
	} {
		var v target
		if _, msg := wire.Status(wire.Unmarshal([]byte(body), &v)); msg != want {
			t.Errorf("Unmarshal(%s): %q, want %q", body, msg, want)
		}
	}
	if wire.ValidText("a\x00b") || wire.ValidText("\xff") || !wire.ValidText("jane-ß") {
		t.Error("ValidText")
	}
}

func TestHasKey(t *testing.T) {
	for body, want := range map[string]bool{
		`{"chatId":""}`:   true,
		`{"ChatID":""}`:   false, // keys name fields exactly
		`{"chatId":null}`: false,
		`{"other":1}`:     false,
		`{"x":"chatId"}`:  false,
		`{`:               false,
		// Every occurrence counts, as in encoding/json, where a null
		// leaves the field as the earlier one set it.
		`{"chatId":"","chatId":null}`:    true,
		`{"chatId":null,"CHATID":""}`:    false,
		`{"\u0063hatId":""}`:             true,
		`{"chatId\u0000":""}`:            false,
		`{"x":{"chatId":""},"chatI":""}`: false,
	} {
		if got := wire.HasKey([]byte(body), "chatId"); got != want {
			t.Errorf("HasKey(%s) = %v, want %v", body, got, want)
		}
	}
}

// TestRefusalCostIsLinear: naming the field of invalid text or of a NUL
// costs memory linear in the depth of the field: a small body nested deep
// must not cost the server hundreds of MiB to refuse (the token exchange
// decodes bodies before any credential is checked).
func TestRefusalCostIsLinear(t *testing.T) {
	bodies := map[string]func(depth int) []byte{
		"invalid UTF-8": func(n int) []byte {
			return []byte(`{"a":` + strings.Repeat("[", n) + "\"\xff\"" + strings.Repeat("]", n) + "}")
		},
		"NUL": func(n int) []byte {
			return []byte(`{"a":` + strings.Repeat("[", n) + `"\u0000"` + strings.Repeat("]", n) + "}")
		},
	}
	for name, body := range bodies {
		alloc := func(depth int) uint64 {
			var m0, m1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m0)
			err := wire.Unmarshal(body(depth), &struct{}{})
			runtime.ReadMemStats(&m1)
			if status, msg := wire.Status(err); status != http.StatusBadRequest || !strings.HasPrefix(msg, "field a[0][0][0]") || !strings.Contains(msg, "…") {
				t.Errorf("%s: %d %q, want a 400 naming the field's path, cut", name, status, msg)
			}
			return m1.TotalAlloc - m0.TotalAlloc
		}
		if a, b := alloc(4000), alloc(8000); b > 3*a {
			t.Errorf("%s: refusing a body nested 8,000 deep allocated %d KiB, 4,000 deep %d KiB: more than linear", name, b>>10, a>>10)
		}
	}
}

// TestIntegerRewritesBounded: past the rewrites of whole numbers written
// as 1.0 that one body may need, the body is refused; it is never decoded
// as if it were empty.
func TestIntegerRewritesBounded(t *testing.T) {
	var v struct {
		N int64  `json:"n"`
		S string `json:"s"`
	}
	body := "{" + strings.Repeat(`"n":1.0,`, 9) + `"n":1.5,"s":"kept"}`
	if status, _ := wire.Status(wire.Unmarshal([]byte(body), &v)); status != http.StatusBadRequest {
		t.Errorf("Unmarshal = %d with v = %+v, want 400", status, v)
	}
}

// TestTypeErrorFieldPaths: the field of a type error, with its indexes, as
// encoding/json found it: in nested arrays, and at the first of two
// duplicate keys.
func TestTypeErrorFieldPaths(t *testing.T) {
	for _, c := range []struct {
		doc  string
		into any
		want string
	}{
		{`{"s":[[1]]}`, &struct{ S string }{}, "s"},
		{`{"na":[[1],[[2]]]}`, &struct {
			NA [][]int `json:"na"`
		}{}, "na[1][0]"},
		{`{"l":[[[1]]]}`, &struct {
			L []int `json:"l"`
		}{}, "l[0]"},
		{`{"items":[{"x":"bad","x":1},{"x":"y"}]}`, &struct {
			Items []struct {
				X int `json:"x"`
			} `json:"items"`
		}{}, "items[0].x"},
	} {
		var te *json.UnmarshalTypeError
		if err := json.Unmarshal([]byte(c.doc), c.into); !errors.As(err, &te) {
			t.Fatalf("%s: %v, want a type error", c.doc, err)
		}
		if got := wire.TypeErrorField([]byte(c.doc), te); got != c.want {
			t.Errorf("%s: %q, want %q", c.doc, got, c.want)
		}
	}
}
