package embedsession_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/internal/wire"
)

// FuzzDecodeSessionRequest decodes and validates arbitrary bodies as the
// handler does: no panic, and every rejection is a 4xx *wire.Error.
func FuzzDecodeSessionRequest(f *testing.F) {
	for _, seed := range []string{
		`{"deploymentId":1,"externalId":"jane"}`,
		`{"deploymentId":1,"internalId":"alice@acme.test"}`,
		`{"deploymentId":1,"externalId":"jane","email":"j@x.test","userProfile":{"displayName":"Jane","picture":"https://cdn.test/j.png"},"userAttributes":[{"name":"country","value":"US"},{"name":"region_ids","value":[1,2]}],"groups":["sales","marketing"],"securityContext":{"a":1}}`,
		`{"deploymentId":1,"externalId":"jane","creatorMode":true,"embedTenantName":"acme-eu","groupDefinitions":[{"name":"g","description":"d"}],"userAttributeDefinitions":[{"name":"a","type":"string_array","displayName":"A","defaultValue":"[]","description":"d"}],"groups":["g"],"userAttributes":[{"name":"a","value":["x"]}]}`,
		`{"deploymentId":1,"externalId":"jane","userAttributes":[{"name":"a","value":null}],"groups":[]}`,
		`{"deploymentId":"1"}`, `{"deploymentId":1e99}`, `[]`, `{`, ``, `null`, `{"groups":{}}`,
		`{"deploymentId":1,"externalId":"jane","userAttributes":[{"name":"a","value":[[1]]}]}`,
		`{"deploymentId":1,"externalId":"jane","userProfile":{"picture":"http://[::1]:namedport"}}`,
		"{\"deploymentId\":1,\"externalId\":\"col\xff\"}",
		`{"deploymentId":1,"externalId":"col\udcff","email":"\ud83d\ude00@x.test"}`,
		`{"deploymentId":1,"externalId":"` + strings.Repeat("é", 255) + `","userProfile":{"displayName":"` + strings.Repeat("日", 256) + `"}}`,
		`{"deploymentId":1,"externalId":"jane","groups":[` + strings.Repeat(`"g",`, 500) + `"g"]}`,
		`{"deploymentId":1,"externalId":"jane","userAttributes":[{"name":"a","value":[` + strings.Repeat(`1,`, 1000) + `1]}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req embedsession.SessionRequest
		err := wire.Unmarshal(data, &req)
		if err == nil {
			err = req.Validate()
		}
		if err == nil {
			checkAccepted(t, data, &req)
			return
		}
		we, ok := errors.AsType[*wire.Error](err)
		if !ok {
			t.Fatalf("rejection %T %v is not a *wire.Error", err, err)
		}
		if we.Status < 400 || we.Status > 499 {
			t.Fatalf("rejection status %d: %v", we.Status, err)
		}
		if we.Message == "" {
			t.Fatal("empty message")
		}
	})
}

// FuzzGenerateSessionHTTP posts arbitrary bodies to a live server on SQLite:
// no input may cause a 5xx, and every answer is a JSON object.
func FuzzGenerateSessionHTTP(f *testing.F) {
	for _, seed := range []string{
		`{"deploymentId":1,"externalId":"jane","userAttributes":[{"name":"country","value":"US"}],"groups":["sales"]}`,
		`{"deploymentId":1,"externalId":"jane","creatorMode":true,"embedTenantName":"fuzz-tenant","groupDefinitions":[{"name":"g"}],"userAttributeDefinitions":[{"name":"country","type":"number"}],"userAttributes":[{"name":"country","value":1}],"groups":["g"]}`,
		`{"deploymentId":1,"internalId":"alice@acme.test","creatorMode":true}`,
		`{"deploymentId":1,"externalId":"jane","securityContext":null,"userProfile":{"picture":""}}`,
		`{"deploymentId":9223372036854775807,"externalId":"x"}`,
		"{\"deploymentId\":1,\"externalId\":\"col\xfe\",\"groups\":[\"sales\xff\"]}",
		`{"deploymentId":1,"externalId":"jane","userProfile":{"displayName":"\ud800"},"email":"` + strings.Repeat("é", 320) + `"}`,
		`{"deploymentId":1,"externalId":"jane","userAttributes":[{"name":"region_ids","value":[1e-20000]}]}`,
	} {
		f.Add([]byte(seed))
	}
	// On every backend (what one database stores, another may refuse), with
	// a small embed-tenant limit, so that fuzzing reaches the refusal too.
	var servers []*apitest.Server
	for _, b := range testdb.Backends() {
		if b == testdb.Postgres && os.Getenv(testdb.EnvPostgresDSN) == "" {
			continue // SQLite alone, rather than the whole test skipped
		}
		servers = append(servers, apitest.New(f, apitest.Target{Backend: b, Router: apitest.ServeMux},
			apitest.WithEmbedOptions(embedsession.WithMaxEmbedTenants(3))))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, s := range servers {
			r := s.Send(t, s.Request(t, "POST", embedsession.PathGenerateSession, apitest.AdminKey, data))
			if r.Status >= 500 {
				t.Fatalf("status %d for %q: %s", r.Status, data, r.Raw)
			}
			if r.Body == nil {
				t.Fatalf("answer is not a JSON object: %s", r.Raw)
			}
			if msg, _ := r.Body["error"].(string); r.Status >= 400 && msg == "" {
				t.Fatalf("status %d without an error message: %s", r.Status, r.Raw)
			}
		}
	})
}

// checkAccepted fails t unless an accepted request keeps every limit: valid
// UTF-8 without replacement, lengths in characters, entry counts.
func checkAccepted(t *testing.T, data []byte, req *embedsession.SessionRequest) {
	t.Helper()
	spelledFFFD := bytes.Contains(data, []byte("\uFFFD")) || bytes.Contains(bytes.ToLower(data), []byte(`\ufffd`))
	text := func(field, s string, limit int) {
		if !utf8.ValidString(s) || (!spelledFFFD && strings.ContainsRune(s, utf8.RuneError)) {
			t.Fatalf("accepted %s %q: not valid, or replaced, text", field, s)
		}
		if n := utf8.RuneCountInString(s); n > limit {
			t.Fatalf("accepted %s of %d characters, limit %d", field, n, limit)
		}
	}
	opt := func(field string, s *string, limit int) {
		if s != nil {
			text(field, *s, limit)
		}
	}
	text("externalId", req.ExternalID, 255)
	text("internalId", req.InternalID, 255)
	opt("email", req.Email, 320)
	if p := req.UserProfile; p != nil {
		opt("displayName", p.DisplayName, 255)
		opt("picture", p.Picture, 2048)
	}
	if req.Groups != nil && len(*req.Groups) > 500 || len(req.UserAttributes) > 500 ||
		len(req.GroupDefinitions) > 500 || len(req.UserAttributeDefinitions) > 500 {
		t.Fatal("accepted more than 500 entries")
	}
	if req.Groups != nil {
		for _, g := range *req.Groups {
			text("group", g, 255)
		}
	}
	for _, d := range req.GroupDefinitions {
		text("group definition name", d.Name, 255)
		opt("group description", d.Description, 1024)
	}
	for _, d := range req.UserAttributeDefinitions {
		text("attribute definition name", d.Name, 255)
		opt("attribute displayName", d.DisplayName, 1024)
		opt("attribute defaultValue", d.DefaultValue, 1024)
		opt("attribute description", d.Description, 1024)
	}
	for _, a := range req.UserAttributes {
		text("attribute name", a.Name, 255)
		var v any
		if err := json.Unmarshal(a.Value, &v); err != nil {
			t.Fatalf("accepted attribute value %s: %v", a.Value, err)
		}
		switch x := v.(type) {
		case string:
			text("attribute value", x, 1024)
		case []any:
			if len(x) > 1000 {
				t.Fatalf("accepted an array of %d items", len(x))
			}
			for _, item := range x {
				if s, ok := item.(string); ok {
					text("attribute value item", s, 1024)
				}
			}
		}
	}
}
