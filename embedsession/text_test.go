package embedsession_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/embedkit/embedkit/internal/apitest"
)

// TestTextThatNoBackendStores covers input that one backend could store and
// another could not (PostgreSQL text holds no NUL, nor invalid UTF-8): it is
// a 4xx on every backend, never a 500.
func TestTextThatNoBackendStores(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		t.Parallel()
		s := apitest.New(t, tg)
		gen := "/api/v1/embed/generate-session"
		for _, raw := range []string{
			`{"deploymentId":1,"externalId":"a\u0000b"}`,
			`{"deploymentId":1,"externalId":"nul","email":"x\u0000@y"}`,
			`{"deploymentId":1,"externalId":"nul","groups":["\u0000"]}`,
			`{"deploymentId":1,"internalId":"alice\u0000"}`,
			`{"deploymentId":1,"externalId":"nul","creatorMode":true,"embedTenantName":"tenant-nul","groupDefinitions":[{"name":"g","description":"\u0000"}]}`,
		} {
			if status, out := s.Do(t, http.MethodPost, gen, apitest.AdminKey, raw); status != http.StatusBadRequest {
				t.Errorf("%s: %d %v, want 400", raw, status, out)
			}
		}
		// An escaped backslash before u0000 is ordinary text.
		if status, out := s.Do(t, http.MethodPost, gen, apitest.AdminKey, `{"deploymentId":1,"externalId":"bs","email":"a\\u0000b"}`); status != http.StatusOK {
			t.Errorf("escaped backslash: %d %v, want 200", status, out)
		}
		for _, path := range []string{"/api/v1/embed/users/a%00b/sessions", "/api/v1/embed/users/a%00b", "/api/v1/embed/users/%ff%fe"} {
			if status, out := s.Do(t, http.MethodDelete, path, apitest.AdminKey, nil); status != http.StatusNotFound {
				t.Errorf("DELETE %s: %d %v, want 404", path, status, out)
			}
		}
		// Lowercase and trimmed, the spec's rule: inner spaces are part of
		// an id; control characters are not.
		for id, want := range map[string]int{"john doe": 200, "a\u00a0b": 200, "a\u2003b": 200, "a\u000bb": 400, "a\u0085b": 400, "a\tb": 400, "\u2003a": 400} {
			if status, out := s.Do(t, http.MethodPost, gen, apitest.AdminKey, body(id, nil)); status != want {
				t.Errorf("externalId %q: %d %v, want %d", id, status, out, want)
			}
		}
		// Such an id names its user in the admin paths, percent-encoded.
		for _, path := range []string{"/api/v1/embed/users/john%20doe/sessions", "/api/v1/embed/users/john%20doe"} {
			if status, out := s.Do(t, http.MethodDelete, path, apitest.AdminKey, nil); status != http.StatusNoContent {
				t.Errorf("DELETE %s: %d %v, want 204", path, status, out)
			}
		}
		if u := s.User(t, apitest.Account, "john doe", ""); u.Exists {
			t.Error("john doe was not deleted")
		}
		// A name too long to be stored is refused before it is looked up.
		long := strings.Repeat("g", 100000)
		if status, out := s.Do(t, http.MethodPost, gen, apitest.AdminKey, body("long", obj{"groups": []string{long}})); status != http.StatusBadRequest || len(out["error"].(string)) > 200 {
			t.Errorf("long group name: %d, message of %d bytes", status, len(out["error"].(string)))
		}
		many := make([]string, 200)
		for i := range many {
			many[i] = fmt.Sprintf("unknown-group-%03d", i)
		}
		// The message lists every unresolved name, as the spec quotes it.
		if status, out := s.Do(t, http.MethodPost, gen, apitest.AdminKey, body("many", obj{"groups": many})); status != http.StatusBadRequest ||
			out["error"] != "Groups with names "+strings.Join(many, ", ")+" not found" {
			t.Errorf("many unknown groups: %d %.200v", status, out["error"])
		}
	})
}
