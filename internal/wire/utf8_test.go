package wire_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/embedkit/embedkit/internal/wire"
)

func TestInvalidUTF8IsRefused(t *testing.T) {
	type doc struct {
		Name  string            `json:"name"`
		Tags  []string          `json:"tags"`
		Inner map[string]any    `json:"inner"`
		Attrs []map[string]any  `json:"attrs"`
		Extra map[string]string `json:"extra"`
	}
	cases := []struct {
		body string
		msg  string // substring of the message; "" for success
	}{
		{"{\"name\":\"col\xff\"}", "field name must be valid UTF-8"},
		{"{\"name\":\"col\xfe\"}", "field name must be valid UTF-8"},
		{"{\"name\":\"ok\",\"tags\":[\"a\",\"b\xc3\"]}", "field tags[1] must be valid UTF-8"},
		{"{\"inner\":{\"a\":{\"b\":[1,\"\xed\xa0\x80\"]}}}", "field inner.a.b[1] must be valid UTF-8"}, // CESU-encoded surrogate
		{"{\"attrs\":[{\"name\":\"x\"},{\"value\":[\"\x80\"]}]}", "field attrs[1].value[0] must be valid UTF-8"},
		{"{\"extra\":{\"k\xff\":\"v\"}}", "the keys of field extra must be valid UTF-8"},
		{"{\"k\xff\":1}", "the keys of the request body must be valid UTF-8"},
		{"{\"unknown\":\"\xff\"}", "field unknown must be valid UTF-8"},
		{`{"name":"\ud800"}`, "field name must be valid UTF-8"},
		{`{"name":"\udc00x"}`, "field name must be valid UTF-8"},
		{`{"name":"a\uD83Dz"}`, "field name must be valid UTF-8"},
		{`{"name":"\ud83d\u0041"}`, "field name must be valid UTF-8"},
		{`{"tags":["ok","\uDBFF"]}`, "field tags[1] must be valid UTF-8"},
		{`{"extra":{"\udfff":"v"}}`, "the keys of field extra must be valid UTF-8"},
		// Valid: pairs, escaped backslashes, ordinary non-ASCII.
		{`{"name":"\ud83d\ude00"}`, ""},
		{`{"name":"\uD83D\uDE00 ok"}`, ""},
		{`{"name":"\\ud800"}`, ""},
		{`{"name":"Zoë – 日本 😀"}`, ""},
		{`{"name":"\u00e9\ud7ff\ue000"}`, ""},
	}
	for _, c := range cases {
		var v doc
		err := wire.Unmarshal([]byte(c.body), &v)
		switch {
		case c.msg == "" && err != nil:
			t.Errorf("%q: %v, want success", c.body, err)
		case c.msg != "" && err == nil:
			t.Errorf("%q: accepted as %+v, want 400 %q", c.body, v, c.msg)
		case c.msg != "":
			status, msg := wire.Status(err)
			if status != 400 || !strings.Contains(msg, c.msg) {
				t.Errorf("%q: %d %q, want 400 %q", c.body, status, msg, c.msg)
			}
		}
	}
}

// BenchmarkUnmarshal decodes a typical generate-session body with
// Unmarshal (every rule, strict UTF-8 included) and, for reference, with
// encoding/json alone.
func BenchmarkUnmarshal(b *testing.B) {
	body := []byte(`{"deploymentId":1,"externalId":"jane.doe@example.com","email":"jane.doe@example.com",` +
		`"userProfile":{"displayName":"Jane Doë – 日本","picture":"https://cdn.example.com/u/jane.png"},` +
		`"userAttributes":[{"name":"country","value":"DE"},{"name":"region_ids","value":[1,2,3]}],` +
		`"groups":["sales","marketing"],"securityContext":{"tenant":"acme","level":3}}`)
	type req struct {
		DeploymentID    int64             `json:"deploymentId"`
		ExternalID      string            `json:"externalId"`
		Email           *string           `json:"email"`
		UserProfile     map[string]string `json:"userProfile"`
		UserAttributes  []map[string]any  `json:"userAttributes"`
		Groups          *[]string         `json:"groups"`
		SecurityContext json.RawMessage   `json:"securityContext"`
	}
	b.Run("wire.Unmarshal", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var r req
			if err := wire.Unmarshal(body, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var r req
			if err := json.Unmarshal(body, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
