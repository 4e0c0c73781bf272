package embedsession_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/store/operator"
)

// chars returns n characters, most of them two or three bytes long in
// UTF-8, so that a limit counted in bytes would fail the test.
func chars(n int) string {
	return strings.Repeat("é", n/2) + strings.Repeat("日", n-n/2)
}

// seq returns n distinct names with prefix.
func seq(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%04d", prefix, i)
	}
	return out
}

// limitTenant is the embed tenant of the creator-mode limit cases.
const limitTenant = "limits-tenant"

// longInternalID is an internal user whose id has exactly 255 characters.
var longInternalID = chars(255)

// TestFieldLimits sends, for every limited field of generate-session, the
// longest (or fullest) allowed value, which succeeds, then one character
// (or entry) more, which is a 400 naming the field and changes nothing:
// neither the user, nor its attributes and groups, nor the catalog.
func TestFieldLimits(t *testing.T) {
	cases := []struct {
		field string // named by the error message
		// set puts the value at limit+over into a creator-mode body for the
		// user "limits" of limitTenant.
		set func(b obj, over int)
	}{
		{"externalId", func(b obj, over int) { b["externalId"] = "x" + chars(254+over) }},
		{"email", func(b obj, over int) { b["email"] = chars(310+over) + "@mail.test" }},
		{"userProfile.displayName", func(b obj, over int) { b["userProfile"] = obj{"displayName": chars(255 + over)} }},
		{"userProfile.picture", func(b obj, over int) {
			b["userProfile"] = obj{"picture": "https://cdn.test/" + strings.Repeat("p", 2048-17+over)}
		}},
		{"groups", func(b obj, over int) {
			names := seq("g", 500+over)
			defs := make([]obj, 500)
			for i := range defs {
				defs[i] = obj{"name": names[i]}
			}
			b["groupDefinitions"], b["groups"] = defs, names
		}},
		{"groupDefinitions", func(b obj, over int) {
			defs := make([]obj, 500+over)
			for i := range defs {
				defs[i] = obj{"name": fmt.Sprintf("d%04d", i)}
			}
			b["groupDefinitions"] = defs
		}},
		{"groupDefinitions[0].name", func(b obj, over int) { b["groupDefinitions"] = []obj{{"name": chars(255 + over)}} }},
		{"groups[0]", func(b obj, over int) {
			b["groupDefinitions"] = []obj{{"name": chars(255)}}
			b["groups"] = []string{chars(255 + over)}
		}},
		{"userAttributes[0].name", func(b obj, over int) {
			b["userAttributeDefinitions"] = []obj{{"name": chars(255), "type": "string"}}
			b["userAttributes"] = attrs(chars(255+over), "v")
		}},
		{"groupDefinitions[0].description", func(b obj, over int) {
			b["groupDefinitions"] = []obj{{"name": "g", "description": chars(1024 + over)}}
		}},
		{"userAttributeDefinitions", func(b obj, over int) {
			defs := make([]obj, 500+over)
			for i := range defs {
				defs[i] = obj{"name": fmt.Sprintf("a%04d", i), "type": "number"}
			}
			b["userAttributeDefinitions"] = defs
		}},
		{"userAttributes", func(b obj, over int) {
			defs := make([]obj, 500)
			var values []any
			for i := range 500 + over {
				name := fmt.Sprintf("v%04d", i%500)
				if i < 500 {
					defs[i] = obj{"name": name, "type": "number"}
				} else {
					name = fmt.Sprintf("w%04d", i) // over: one more, distinct name
				}
				values = append(values, obj{"name": name, "value": i})
			}
			b["userAttributeDefinitions"], b["userAttributes"] = defs, values
		}},
		{"userAttributeDefinitions[0].name", func(b obj, over int) {
			b["userAttributeDefinitions"] = []obj{{"name": chars(255 + over), "type": "string"}}
		}},
		{"userAttributeDefinitions[0].displayName", func(b obj, over int) {
			b["userAttributeDefinitions"] = []obj{{"name": "s", "type": "string", "displayName": chars(1024 + over)}}
		}},
		{"userAttributeDefinitions[0].defaultValue", func(b obj, over int) {
			b["userAttributeDefinitions"] = []obj{{"name": "s", "type": "string", "defaultValue": chars(1024 + over)}}
		}},
		{"userAttributeDefinitions[0].description", func(b obj, over int) {
			b["userAttributeDefinitions"] = []obj{{"name": "s", "type": "string", "description": chars(1024 + over)}}
		}},
		{"userAttributes[0].value", func(b obj, over int) {
			b["userAttributeDefinitions"] = []obj{{"name": "s", "type": "string"}}
			b["userAttributes"] = attrs("s", chars(1024+over))
		}},
		{"userAttributes[0].value[3]", func(b obj, over int) {
			b["userAttributeDefinitions"] = []obj{{"name": "sa", "type": "string_array"}}
			b["userAttributes"] = attrs("sa", []string{"a", "b", "c", chars(1024 + over)})
		}},
		{"userAttributes[0].value", func(b obj, over int) { // items of a string array
			items := make([]string, 1000+over)
			for i := range items {
				items[i] = "x"
			}
			b["userAttributeDefinitions"] = []obj{{"name": "sa", "type": "string_array"}}
			b["userAttributes"] = attrs("sa", items)
		}},
		{"userAttributes[0].value", func(b obj, over int) { // items of a number array
			items := make([]int, 1000+over)
			b["userAttributeDefinitions"] = []obj{{"name": "na", "type": "number_array"}}
			b["userAttributes"] = attrs("na", items)
		}},
	}
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		t.Parallel()
		s := apitest.New(t, tg)
		for i, c := range cases {
			user := fmt.Sprintf("limits-%02d", i)
			mk := func(over, marker int) obj {
				b := body(user, obj{"creatorMode": true, "embedTenantName": limitTenant,
					"securityContext": obj{"marker": marker}})
				c.set(b, over)
				return b
			}
			ok := mk(0, 1)
			if ext, _ := ok["externalId"].(string); ext != user {
				user = ext // the externalId case names its own user
			}
			if status, out := s.Do(t, http.MethodPost, gen, apitest.AdminKey, ok); status != http.StatusOK {
				t.Fatalf("%s at its limit: %d %v, want 200", c.field, status, out)
			}
			beforeUser := s.User(t, apitest.Account, user, limitTenant)
			beforeCatalog := s.Catalog(t, apitest.Account, limitTenant)
			if !beforeUser.Exists {
				t.Fatalf("%s at its limit: user %q not stored", c.field, user)
			}
			over := mk(1, 2)
			if c.field == "externalId" {
				over["externalId"] = user + "x"
			}
			status, out := s.Do(t, http.MethodPost, gen, apitest.AdminKey, over)
			msg, _ := out["error"].(string)
			if status != http.StatusBadRequest || !strings.HasPrefix(msg, c.field+" must") {
				t.Errorf("%s over its limit: %d %q, want 400 naming the field", c.field, status, msg)
			}
			if len(msg) > 200 {
				t.Errorf("%s: message of %d bytes", c.field, len(msg))
			}
			if got := s.User(t, apitest.Account, user, limitTenant); !reflect.DeepEqual(got, beforeUser) {
				t.Errorf("%s over its limit changed the user:\n%+v\nwant\n%+v", c.field, got, beforeUser)
			}
			if c.field == "externalId" {
				if got := s.User(t, apitest.Account, user+"x", ""); got.Exists {
					t.Errorf("externalId over its limit stored a user")
				}
			}
			if got := s.Catalog(t, apitest.Account, limitTenant); !reflect.DeepEqual(got, beforeCatalog) {
				t.Errorf("%s over its limit changed the catalog", c.field)
			}
		}
	})
}

// TestInternalIDLimit: an internalId of 255 characters names its internal
// user; one of 256 is a 400.
func TestInternalIDLimit(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		t.Parallel()
		s := apitest.New(t, tg, apitest.WithConfig(func(c *operator.Config) {
			c.Accounts[0].InternalUsers = append(c.Accounts[0].InternalUsers, operator.InternalUser{Username: longInternalID})
		}))
		if status, out := s.Do(t, http.MethodPost, gen, apitest.AdminKey, obj{"deploymentId": 1, "internalId": longInternalID}); status != http.StatusOK {
			t.Fatalf("internalId of 255 characters: %d %v", status, out)
		}
		status, out := s.Do(t, http.MethodPost, gen, apitest.AdminKey, obj{"deploymentId": 1, "internalId": longInternalID + "x"})
		if msg, _ := out["error"].(string); status != http.StatusBadRequest || msg != "internalId must be at most 255 characters" {
			t.Errorf("internalId of 256 characters: %d %q", status, msg)
		}
	})
}

// TestInvalidUTF8 puts invalid text into every string field (and keys) of
// generate-session and the token exchange: each is a 400 that names the
// field, and nothing is stored. Two externalIds that differ only in their
// invalid bytes never become one user.
func TestInvalidUTF8(t *testing.T) {
	const base = `"deploymentId":1,"creatorMode":true,"embedTenantName":"utf-tenant"`
	fields := []apitest.TextField{
		{"externalId", `{` + base + `,"externalId":"BAD"}`},
		{"internalId", `{"deploymentId":1,"internalId":"alice@acme.testBAD"}`},
		{"email", `{` + base + `,"externalId":"utf","email":"aBAD@x.test"}`},
		{"userProfile.displayName", `{` + base + `,"externalId":"utf","userProfile":{"displayName":"BAD"}}`},
		{"userProfile.picture", `{` + base + `,"externalId":"utf","userProfile":{"picture":"https://cdn.test/BAD"}}`},
		{"embedTenantName", `{"deploymentId":1,"externalId":"utf","embedTenantName":"tenantBAD"}`},
		{"groups[1]", `{` + base + `,"externalId":"utf","groupDefinitions":[{"name":"g"}],"groups":["g","BAD"]}`},
		{"groupDefinitions[0].name", `{` + base + `,"externalId":"utf","groupDefinitions":[{"name":"gBAD"}]}`},
		{"groupDefinitions[0].description", `{` + base + `,"externalId":"utf","groupDefinitions":[{"name":"g","description":"BAD"}]}`},
		{"userAttributeDefinitions[0].name", `{` + base + `,"externalId":"utf","userAttributeDefinitions":[{"name":"BAD","type":"string"}]}`},
		{"userAttributeDefinitions[0].type", `{` + base + `,"externalId":"utf","userAttributeDefinitions":[{"name":"s","type":"stringBAD"}]}`},
		{"userAttributeDefinitions[0].displayName", `{` + base + `,"externalId":"utf","userAttributeDefinitions":[{"name":"s","type":"string","displayName":"BAD"}]}`},
		{"userAttributeDefinitions[0].defaultValue", `{` + base + `,"externalId":"utf","userAttributeDefinitions":[{"name":"s","type":"string","defaultValue":"BAD"}]}`},
		{"userAttributeDefinitions[0].description", `{` + base + `,"externalId":"utf","userAttributeDefinitions":[{"name":"s","type":"string","description":"BAD"}]}`},
		{"userAttributes[0].name", `{` + base + `,"externalId":"utf","userAttributeDefinitions":[{"name":"s","type":"string"}],"userAttributes":[{"name":"sBAD","value":"v"}]}`},
		{"userAttributes[0].value", `{` + base + `,"externalId":"utf","userAttributeDefinitions":[{"name":"s","type":"string"}],"userAttributes":[{"name":"s","value":"BAD"}]}`},
		{"userAttributes[0].value[1]", `{` + base + `,"externalId":"utf","userAttributeDefinitions":[{"name":"s","type":"string_array"}],"userAttributes":[{"name":"s","value":["a","BAD"]}]}`},
		{"securityContext.k[0]", `{` + base + `,"externalId":"utf","securityContext":{"k":["BAD"]}}`},
		{"unknownField", `{` + base + `,"externalId":"utf","unknownField":"BAD"}`},
		{"the keys of field securityContext", `{` + base + `,"externalId":"utf","securityContext":{"kBAD":1}}`},
		{"the keys of field userProfile", `{` + base + `,"externalId":"utf","userProfile":{"BAD":"x"}}`},
		{"the keys of the request body", `{` + base + `,"externalId":"utf","BAD":1}`},
	}
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		t.Parallel()
		s := apitest.New(t, tg)
		s.ExpectInvalidText(t, gen, fields)
		for _, id := range []string{"utf", "col", "col\ufffd"} {
			if u := s.User(t, apitest.Account, id, ""); u.Exists {
				t.Errorf("user %q was stored", id)
			}
		}
		if c := s.Catalog(t, apitest.Account, "utf-tenant"); c.Exists {
			t.Errorf("embed tenant utf-tenant was created: %+v", c)
		}
		// The token exchange decodes with the same rules: 400, not 401.
		for _, bad := range apitest.InvalidText {
			raw := `{"sessionId":"` + bad + `"}`
			status, out := s.Do(t, http.MethodPost, tokenPath, "", raw)
			if msg, _ := out["error"].(string); status != http.StatusBadRequest || !strings.HasPrefix(msg, "field sessionId must be valid UTF-8") {
				t.Errorf("token exchange %q: %d %q, want 400", raw, status, msg)
			}
		}
		// Valid text around the invalid kinds still works: a surrogate
		// pair, U+FFFD itself, an escaped backslash before "ud800".
		for _, ok := range []string{`\ud83d\ude00`, "\ufffd", `\\ud800`} {
			raw := `{"deploymentId":1,"externalId":"ok","userProfile":{"displayName":"` + ok + `"}}`
			if status, out := s.Do(t, http.MethodPost, gen, apitest.AdminKey, raw); status != http.StatusOK {
				t.Errorf("%q: %d %v, want 200", raw, status, out)
			}
		}
	})
}

// TestClientRefusesInvalidText: the Go client does not send a request
// holding a string that is not valid UTF-8, which encoding/json would
// replace with U+FFFD.
func TestClientRefusesInvalidText(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { calls.Add(1) }))
	defer srv.Close()
	c := embedsession.NewClient(srv.URL, "key")
	for field, req := range map[string]embedsession.SessionRequest{
		"externalId":              {DeploymentID: 1, ExternalID: "col\xff"},
		"email":                   {DeploymentID: 1, ExternalID: "a", Email: embedsession.String("\xfe")},
		"userProfile.displayName": {DeploymentID: 1, ExternalID: "a", UserProfile: &embedsession.UserProfile{DisplayName: embedsession.String("\xc3")}},
		"groups[0]":               {DeploymentID: 1, ExternalID: "a", Groups: embedsession.Groups("g\xff")},
		"userAttributes[0].value": {DeploymentID: 1, ExternalID: "a", UserAttributes: []embedsession.UserAttribute{{Name: "n", Value: []byte("\"\xff\"")}}},
		"groupDefinitions[0]":     {DeploymentID: 1, ExternalID: "a", GroupDefinitions: []embedsession.GroupDefinition{{Name: "g", Description: embedsession.String("\xff")}}},
	} {
		_, err := c.GenerateSession(t.Context(), req)
		if err == nil || !strings.Contains(err.Error(), field+" must be valid UTF-8") {
			t.Errorf("%s: %v, want a refusal naming the field", field, err)
		}
		if err := req.Validate(); err == nil || !strings.Contains(err.Error(), field+" must be valid UTF-8") {
			t.Errorf("Validate, %s: %v", field, err)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("%d requests reached the server", n)
	}
}
