package chatstream

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/embedkit/embedkit/internal/wire"
)

// FuzzDataRequest feeds hostile bodies to the data query API's decoding:
// it never panics, every refusal is a 400 naming what is wrong, and an
// accepted request holds a query and valid text only.
func FuzzDataRequest(f *testing.F) {
	for _, s := range []string{
		`{"sqlQuery":"SELECT 1","sessionSettings":{"externalId":"a"}}`,
		`{"sqlQuery":"SELECT 1","activeBranchName":"dev-1","sessionSettings":{"externalId":"a","userAttributes":[{"name":"country","value":["DE",1]}]}}`,
		`{"sqlQuery":"SELECT 1","sessionSettings":{"internalId":"alice@acme.test","roles":["admin"]}}`,
		`{"sqlQuery":"\ud800","sessionSettings":{"externalId":"a"}}`,
		`{"sqlQuery":" ","sessionSettings":null}`,
		`{"sqlQuery":["x"]}`, `[]`, `null`, `{"sqlQuery":"x"} {}`, "{\"sqlQuery\":\"a\xff\"}",
		`{"sqlQuery":"x","sessionSettings":{"externalId":"a","ephemeralTtlSeconds":-1}}`,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, needSettings bool) {
		req, err := decodeDataRequest(body, needSettings)
		if err != nil {
			e, ok := err.(*wire.Error)
			if !ok || e.Status != http.StatusBadRequest || e.Message == "" || !utf8.ValidString(e.Message) {
				t.Fatalf("refusal %T %v is not a 400 with a message", err, err)
			}
			return
		}
		if strings.TrimSpace(req.SQLQuery) == "" || !utf8.ValidString(req.SQLQuery) || !utf8.ValidString(req.ActiveBranchName) ||
			strings.ContainsRune(req.SQLQuery, 0) {
			t.Fatalf("accepted %q", body)
		}
		if needSettings && req.SessionSettings == nil {
			t.Fatalf("accepted without sessionSettings: %q", body)
		}
		if err := req.checkText(); err != nil {
			t.Fatalf("accepted text the client refuses: %v", err)
		}
	})
}

// FuzzDataValues checks the hand-written encoders of the data stream
// against the standard library: a string and a float encode as
// encoding/json encodes them (without HTML escaping), and a CSV record
// reads back, with encoding/csv, as the values written.
func FuzzDataValues(f *testing.F) {
	for _, s := range []string{"", "a,b", `"`, "x\r\ny", "\u2028", "bad\xff", "=1+1", "-2", "\x00\x1f\x7f", "é日本", `\.`, "a;=1+1", "a\t=1|=2"} {
		f.Add(s, "next", 1.5)
	}
	for _, n := range []string{"0", "-0.5", "123456789012345678901234567890.120", "1e-7", "1E+21", "01", "1.", ".5", "-", "1e", "+1", " 1", "1 ", "=1+1", "NaN"} {
		f.Add("", n, 0.0)
	}
	f.Add("", "", 1e21)
	f.Add("", "", 1e-7)
	f.Add("", "", -0.0)
	f.Add("", "", math.MaxFloat64)
	f.Add("", "", 5e-324)
	f.Fuzz(func(t *testing.T, s1, s2 string, x float64) {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		for _, s := range []string{s1, s2} {
			want.Reset()
			if err := enc.Encode(s); err != nil {
				t.Fatal(err)
			}
			if got := string(appendJSONValue(nil, s)); got+"\n" != want.String() {
				t.Fatalf("string %q encodes as %s, encoding/json %s", s, got, want.String())
			}
		}
		got := string(appendJSONValue(nil, x))
		if math.IsNaN(x) || math.IsInf(x, 0) {
			if got != `"`+nonFinite(x)+`"` {
				t.Fatalf("%v encodes as %s", x, got)
			}
		} else {
			want.Reset()
			if err := enc.Encode(x); err != nil {
				t.Fatal(err)
			}
			if got+"\n" != want.String() {
				t.Fatalf("%v encodes as %s, encoding/json %s", x, got, want.String())
			}
		}

		// A json.Number (a host's source may give any text) is written
		// as itself only when it is a JSON number, as a string otherwise.
		num := json.Number(s2)
		isNum := s2 != "" && (s2[0] == '-' || s2[0] >= '0' && s2[0] <= '9') && s2[len(s2)-1] >= '0' && s2[len(s2)-1] <= '9' && json.Valid([]byte(s2))
		if isJSONNumber(s2) != isNum {
			t.Fatalf("isJSONNumber(%q) = %v, encoding/json says %v", s2, !isNum, isNum)
		}
		got = string(appendJSONValue(nil, num))
		if !json.Valid([]byte(got)) || isNum && got != s2 || !isNum && got != string(appendJSONValue(nil, s2)) {
			t.Fatalf("json.Number %q encodes as %s", s2, got)
		}

		// In a column of numbers, a text that is a number is written as
		// one; any other text as in a column of texts.
		ns := dataStream{csv: true, number: []bool{true}}
		ns.row([]any{s2})
		if want := string(appendCSVValue(nil, s2, false)) + "\r\n"; isNum && string(ns.buf) != s2+"\r\n" || !isNum && string(ns.buf) != want {
			t.Fatalf("text %q in a column of numbers is written %q", s2, ns.buf)
		}

		// One record of the two texts, the number and the json.Number,
		// and one of the first text alone.
		for _, rec := range [][]any{{s1, s2, x, num}, {s1}} {
			s := dataStream{csv: true}
			s.row(rec)
			r := csv.NewReader(bytes.NewReader(s.buf))
			got, err := r.Read()
			if err != nil {
				t.Fatalf("record %q of %q does not read back: %v", s.buf, rec, err)
			}
			if len(got) != len(rec) {
				t.Fatalf("record %q reads back as %d fields, want %d", s.buf, len(got), len(rec))
			}
			for i, v := range rec {
				want := string(appendCSVValue(nil, v, false))
				if n, ok := v.(json.Number); ok && !isNum {
					v = string(n)
				}
				if str, ok := v.(string); ok {
					want = strings.ToValidUTF8(str, "\uFFFD")
					if want != "" && strings.IndexByte("=+-@\t\r", want[0]) >= 0 {
						want = "'" + want
					}
				}
				// encoding/csv drops the \r of a \r\n inside a quoted field.
				want = strings.ReplaceAll(want, "\r\n", "\n")
				if got[i] != want {
					t.Fatalf("field %d of %q reads back as %q, want %q", i, s.buf, got[i], want)
				}
			}
			if _, err := r.Read(); err == nil {
				t.Fatalf("record %q reads as more than one", s.buf)
			}
		}
		// A text is one field whatever separator a spreadsheet splits on.
		one := dataStream{csv: true}
		one.row([]any{s1})
		for _, sep := range []rune{';', '\t', '|'} {
			r := csv.NewReader(bytes.NewReader(one.buf))
			r.Comma = sep
			if got, err := r.Read(); err != nil || len(got) != 1 {
				t.Fatalf("record %q read with separator %q: %q, %v; want one field", one.buf, sep, got, err)
			}
		}
	})
}

// TestDataValueNumbers: the client gives an int64 for a whole number that
// fits (-0 is a float64's), a float64 when that keeps every digit, and the json.Number
// otherwise, deciding without arithmetic on huge exponents.
func TestDataValueNumbers(t *testing.T) {
	for in, want := range map[string]any{
		"7": int64(7), "-0": math.Copysign(0, -1), "0.1": 0.1, "64188.60": 64188.6, "1e-7": 1e-7, "1E+21": 1e21, "-2.5e-3": -0.0025,
		"9007199254740993.5":                 json.Number("9007199254740993.5"),
		"123456789012345678901234567890.120": json.Number("123456789012345678901234567890.120"),
		"1e-999999":                          json.Number("1e-999999"),
		"1e999999":                           json.Number("1e999999"),
		"1e-99999999999999999999999":         json.Number("1e-99999999999999999999999"),
	} {
		if got := dataValue(json.Number(in), true); got != want {
			t.Errorf("dataValue(%s) = %T %v, want %T %v", in, got, got, want, want)
		}
	}
}

// FuzzDataValueFloat: every float64, written as JSON writes it, comes
// back as itself, negative zero included.
func FuzzDataValueFloat(f *testing.F) {
	for _, x := range []float64{0, math.Copysign(0, -1), 0.1, 1.5, -2.25e-300, math.MaxFloat64, 5e-324, 1e21, 123456.789} {
		f.Add(x)
	}
	f.Fuzz(func(t *testing.T, x float64) {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return
		}
		text := string(appendJSONValue(nil, x))
		got := dataValue(json.Number(text), true)
		switch g := got.(type) {
		case int64:
			if float64(g) != x || (x == 0 && math.Signbit(x)) {
				t.Fatalf("%s: int64 %d, want %v", text, g, x)
			}
		case float64:
			if g != x || math.Signbit(g) != math.Signbit(x) {
				t.Fatalf("%s: %v, want %v", text, g, x)
			}
		default:
			t.Fatalf("%s: %T %v, want %v", text, got, got, x)
		}
	})
}
