package apitest

import (
	"net/http"
	"strings"
	"testing"
)

// InvalidText lists the ways a JSON string can fail to be valid UTF-8: raw
// invalid bytes, and \u escapes of unpaired surrogates.
var InvalidText = []string{"col\xff", "col\xfe", "\xc3(", "\xed\xa0\x80", `\ud800`, `\udc00`, `x\uD83Dy`, `\ud83d\u0041`}

// TextField is a request body with the placeholder BAD where invalid text
// goes, and the field that the error must name ("the keys of ..." for a
// map key or the body's own keys).
type TextField = struct{ Name, Body string }

// ExpectInvalidText posts each body of fields to path with the admin key,
// once for each of [InvalidText] in place of BAD, and checks that each is
// a 400 whose message starts with "field <Name> must be valid UTF-8" (or
// "<Name> must be valid UTF-8" for keys).
func (s *Server) ExpectInvalidText(t testing.TB, path string, fields []TextField) {
	t.Helper()
	for _, f := range fields {
		for _, bad := range InvalidText {
			raw := strings.ReplaceAll(f.Body, "BAD", bad)
			status, out := s.Do(t, http.MethodPost, path, AdminKey, raw)
			msg, _ := out["error"].(string)
			want := "field " + f.Name + " must be valid UTF-8"
			if strings.HasPrefix(f.Name, "the keys") {
				want = f.Name + " must be valid UTF-8"
			}
			if status != http.StatusBadRequest || !strings.HasPrefix(msg, want) {
				t.Errorf("%q: %d %q, want 400 %q", raw, status, msg, want)
			}
		}
	}
}
