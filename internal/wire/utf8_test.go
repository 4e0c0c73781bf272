package wire_test

import (
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
