package embedsession_test

import (
	"errors"
	"testing"

	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/internal/apitest"
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
	} {
		f.Add([]byte(seed))
	}
	// A small embed-tenant limit, so that fuzzing reaches the refusal too.
	s := apitest.New(f, apitest.Target{Backend: "sqlite", Router: apitest.ServeMux},
		apitest.WithEmbedOptions(embedsession.WithMaxEmbedTenants(3)))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := s.Send(t, s.Request(t, "POST", embedsession.PathGenerateSession, apitest.AdminKey, data))
		if r.Status >= 500 {
			t.Fatalf("status %d for %q: %s", r.Status, data, r.Raw)
		}
		if r.Body == nil {
			t.Fatalf("answer is not a JSON object: %s", r.Raw)
		}
	})
}
