package embedsession_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/middleware/httperr"
)

const gen = embedsession.PathGenerateSession

type obj = map[string]any

// body returns a generate-session body for deployment 1 and externalID with
// the fields of extra.
func body(externalID string, extra obj) obj {
	b := obj{"deploymentId": 1, "externalId": externalID}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

func attrs(kv ...any) []any {
	var out []any
	for i := 0; i < len(kv); i += 2 {
		out = append(out, obj{"name": kv[i], "value": kv[i+1]})
	}
	return out
}

// rejection is one request that must fail with status and a message
// (exact when exact is set, else a substring).
type rejection struct {
	name   string
	key    string
	body   any
	status int
	msg    string
	exact  bool
}

func checkRejection(t *testing.T, s *apitest.Server, c rejection) {
	t.Helper()
	key := c.key
	if key == "" {
		key = apitest.AdminKey
	}
	r := s.Send(t, s.Request(t, http.MethodPost, gen, key, c.body))
	if r.Status != c.status {
		t.Fatalf("status = %d (%s), want %d", r.Status, r.Raw, c.status)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	msg, _ := r.Body["error"].(string)
	if c.exact && msg != c.msg || !c.exact && !strings.Contains(msg, c.msg) {
		t.Errorf("error = %q, want %q (exact %v)", msg, c.msg, c.exact)
	}
}

// TestGenerateSessionRejects covers every validation rule and error path of
// generate-session; each failing request must leave the store as it was.
func TestGenerateSessionRejects(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		t.Parallel()
		s := apitest.New(t, tg)
		// An existing user whose state must survive every failure below.
		s.GenerateSession(t, body("keeper", obj{
			"email": "keeper@x.test", "userProfile": obj{"displayName": "Keeper"},
			"userAttributes": attrs("country", "DE"), "groups": []string{"sales"},
			"securityContext": obj{"a": 1},
		}))
		before := s.User(t, apitest.Account, "keeper", "")
		catalogBefore := s.Catalog(t, apitest.Account, "")

		long := strings.Repeat("x", 1<<20+10)
		cases := []rejection{
			// authentication and framing
			{name: "missing API key is 401", key: "-", body: body("keeper", nil), status: 401, msg: "API key"},
			{name: "unknown API key is 401", key: "sk-nope", body: body("keeper", nil), status: 401, msg: "invalid API key", exact: true},
			{name: "malformed JSON is 400", body: `{"deploymentId": 1,`, status: 400, msg: "malformed JSON"},
			{name: "non-object body is 400", body: `[1,2]`, status: 400, msg: "JSON object"},
			{name: "empty body is 400", body: ``, status: 400, msg: "JSON object"},
			{name: "a repeated key is 400 naming it", body: `{"deploymentId":1,"externalId":"keeper","externalId":"other"}`, status: 400, msg: "field externalId appears more than once", exact: true},
			{name: "a securityContext key given twice is 400", body: `{"deploymentId":1,"externalId":"keeper","securityContext":{"region":"eu","region":"us"}}`, status: 400, msg: "field securityContext.region appears more than once", exact: true},
			{name: "trailing data is 400", body: `{"deploymentId":1,"externalId":"keeper"} {}`, status: 400, msg: "single JSON object"},
			{name: "body over 1 MiB is 413", body: `{"deploymentId":1,"externalId":"keeper","email":"` + long + `"}`, status: 413, msg: "too large"},
			// wrong JSON types name the field
			{name: "deploymentId as string names the field", body: obj{"deploymentId": "1", "externalId": "keeper"}, status: 400, msg: "deploymentId"},
			{name: "deploymentId fraction names the field", body: obj{"deploymentId": 1.5, "externalId": "keeper"}, status: 400, msg: "deploymentId"},
			{name: "externalId as number names the field", body: obj{"deploymentId": 1, "externalId": 5}, status: 400, msg: "externalId"},
			{name: "a wrong type in an array names the element", body: `{"deploymentId":1,"externalId":"keeper","userAttributes":[{"name":"country","value":"DE"},{"name":7,"value":"x"}]}`, status: 400, msg: "field userAttributes[1].name has the wrong type: string expected", exact: true},
			{name: "creatorMode as string names the field", body: body("keeper", obj{"creatorMode": "yes"}), status: 400, msg: "creatorMode"},
			{name: "groups as string names the field", body: body("keeper", obj{"groups": "sales"}), status: 400, msg: "groups"},
			{name: "groups of numbers names the field", body: body("keeper", obj{"groups": []int{1}}), status: 400, msg: "groups"},
			{name: "userProfile as string names the field", body: body("keeper", obj{"userProfile": "x"}), status: 400, msg: "userProfile"},
			{name: "displayName as number names the field", body: body("keeper", obj{"userProfile": obj{"displayName": 5}}), status: 400, msg: "userProfile.displayName"},
			{name: "userAttributes as object names the field", body: body("keeper", obj{"userAttributes": obj{}}), status: 400, msg: "userAttributes"},
			{name: "attribute name as number names the field", body: body("keeper", obj{"userAttributes": []any{obj{"name": 1, "value": "x"}}}), status: 400, msg: "userAttributes"},
			{name: "group description as number names the field", body: body("keeper", obj{"creatorMode": true, "embedTenantName": "tenant-x", "groupDefinitions": []any{obj{"name": "g", "description": 5}}}), status: 400, msg: "groupDefinitions"},
			{name: "email as number names the field", body: body("keeper", obj{"email": 5}), status: 400, msg: "email"},
			// deployment
			{name: "empty embedTenantName is 400", body: body("keeper", obj{"embedTenantName": ""}), status: 400, msg: "embedTenantName must be"},
			{name: "deploymentId is required", body: obj{"externalId": "keeper"}, status: 400, msg: "deploymentId"},
			{name: "unknown deployment is 404", body: obj{"deploymentId": 99, "externalId": "keeper"}, status: 404, msg: "deployment not found", exact: true},
			{name: "deployment of another account is 404", body: obj{"deploymentId": 2, "externalId": "keeper"}, status: 404, msg: "deployment not found", exact: true},
			// a missing deployment is 404 ahead of what the database would refuse next
			{name: "unknown deployment before unknown names", body: obj{"deploymentId": 99, "externalId": "keeper", "userAttributes": attrs("nope", "x"), "groups": []string{"nope"}}, status: 404, msg: "deployment not found", exact: true},
			{name: "unknown deployment before a wrong value type", body: obj{"deploymentId": 99, "externalId": "keeper", "userAttributes": attrs("country", 5)}, status: 404, msg: "deployment not found", exact: true},
			{name: "unknown deployment before an unknown internal user", body: obj{"deploymentId": 99, "internalId": "nobody@acme.test"}, status: 404, msg: "deployment not found", exact: true},
			{name: "unknown deployment before creatorMode without the flag", key: apitest.OtherAdminKey, body: obj{"deploymentId": 99, "externalId": "keeper", "creatorMode": true, "embedTenantName": "tenant-x"}, status: 404, msg: "deployment not found", exact: true},
			// identity
			{name: "neither externalId nor internalId", body: obj{"deploymentId": 1}, status: 400, msg: "exactly one of externalId or internalId"},
			{name: "both externalId and internalId", body: obj{"deploymentId": 1, "externalId": "keeper", "internalId": apitest.InternalUser}, status: 400, msg: "not both"},
			{name: "externalId must be lowercase", body: body("Keeper", nil), status: 400, msg: "lowercase"},
			{name: "externalId must be trimmed", body: body(" keeper", nil), status: 400, msg: "trimmed"},
			{name: "externalId trailing space", body: body("keeper ", nil), status: 400, msg: "trimmed"},
			{name: "internal user must exist", body: obj{"deploymentId": 1, "internalId": "nobody@acme.test"}, status: 400, msg: "internal user"},
			{name: "internal user of another account does not exist here", body: obj{"deploymentId": 1, "internalId": "bob@globex.test"}, status: 400, msg: "internal user"},
			// profile
			{name: "picture must be http or https", body: body("keeper", obj{"userProfile": obj{"picture": "ftp://x.test/a.png"}}), status: 400, msg: "userProfile.picture"},
			{name: "picture must be absolute", body: body("keeper", obj{"userProfile": obj{"picture": "/a.png"}}), status: 400, msg: "userProfile.picture"},
			{name: "picture javascript URL", body: body("keeper", obj{"userProfile": obj{"picture": "javascript:alert(1)"}}), status: 400, msg: "userProfile.picture"},
			{name: "picture without host", body: body("keeper", obj{"userProfile": obj{"picture": "https:///a.png"}}), status: 400, msg: "userProfile.picture"},
			// attributes
			{name: "unknown attribute", body: body("keeper", obj{"userAttributes": attrs("nope", "x")}), status: 400, msg: "User attributes not found", exact: true},
			{name: "duplicate attribute names", body: body("keeper", obj{"userAttributes": attrs("country", "US", "country", "FR")}), status: 400, msg: "duplicate"},
			{name: "attribute without name", body: body("keeper", obj{"userAttributes": []any{obj{"value": "x"}}}), status: 400, msg: "name"},
			{name: "attribute without value", body: body("keeper", obj{"userAttributes": []any{obj{"name": "country"}}}), status: 400, msg: "value is required"},
			{name: "string attribute given a number", body: body("keeper", obj{"userAttributes": attrs("country", 5)}), status: 400, msg: "country"},
			{name: "a number past float64", body: `{"deploymentId":1,"externalId":"keeper","userAttributes":[{"name":"country","value":"DE"},{"name":"region_ids","value":1e400}]}`, status: 400, msg: "userAttributes[1].value must be a number a 64-bit float can hold (at most 1.7976931348623157e308 in magnitude)", exact: true},
			{name: "a number no database stores as sent", body: `{"deploymentId":1,"externalId":"keeper","userAttributes":[{"name":"region_ids","value":[1e-20000]}]}`, status: 400, msg: "userAttributes[0].value[0] must be a number of at most 64 characters, with an exponent of at most 400 in magnitude", exact: true},
			{name: "number_array attribute given strings", body: body("keeper", obj{"userAttributes": attrs("region_ids", []string{"a"})}), status: 400, msg: "region_ids"},
			{name: "number_array attribute given a number", body: body("keeper", obj{"userAttributes": attrs("region_ids", 1)}), status: 400, msg: "region_ids"},
			{name: "mixed array is rejected", body: body("keeper", obj{"userAttributes": attrs("region_ids", []any{1, "a"})}), status: 400, msg: "value"},
			{name: "object value is rejected", body: body("keeper", obj{"userAttributes": attrs("country", obj{"a": 1})}), status: 400, msg: "value"},
			{name: "boolean value is rejected", body: body("keeper", obj{"userAttributes": attrs("country", true)}), status: 400, msg: "value"},
			{name: "nested array is rejected", body: body("keeper", obj{"userAttributes": attrs("region_ids", []any{[]int{1}})}), status: 400, msg: "value"},
			{name: "unknown attribute after valid ones changes nothing", body: body("keeper", obj{"userAttributes": attrs("country", "FR", "nope", 1)}), status: 400, msg: "User attributes not found", exact: true},
			// groups
			{name: "unknown groups are listed", body: body("keeper", obj{"groups": []string{"zzz", "sales", "nope"}}), status: 400, msg: "Groups with names nope, zzz not found", exact: true},
			{name: "one unknown group", body: body("keeper", obj{"groups": []string{"nope"}}), status: 400, msg: "Groups with names nope not found", exact: true},
			{name: "empty group name", body: body("keeper", obj{"groups": []string{""}}), status: 400, msg: "groups[0]"},
			// security context
			{name: "securityContext must be an object", body: body("keeper", obj{"securityContext": "x"}), status: 400, msg: "securityContext"},
			{name: "securityContext array is rejected", body: body("keeper", obj{"securityContext": []int{1}}), status: 400, msg: "securityContext"},
			// embed tenant names
			{name: "embedTenantName too short", body: body("keeper", obj{"embedTenantName": "abcd"}), status: 400, msg: "embedTenantName"},
			{name: "embedTenantName too long", body: body("keeper", obj{"embedTenantName": "a" + strings.Repeat("b", 36)}), status: 400, msg: "embedTenantName"},
			{name: "embedTenantName uppercase", body: body("keeper", obj{"embedTenantName": "Tenant"}), status: 400, msg: "embedTenantName"},
			{name: "embedTenantName starts with digit", body: body("keeper", obj{"embedTenantName": "1tenant"}), status: 400, msg: "embedTenantName"},
			{name: "embedTenantName ends with dash", body: body("keeper", obj{"embedTenantName": "tenant-"}), status: 400, msg: "embedTenantName"},
			{name: "embedTenantName underscore", body: body("keeper", obj{"embedTenantName": "ten_ant"}), status: 400, msg: "embedTenantName"},
			// creator mode
			{name: "creatorMode with flag off is 403", key: apitest.OtherAdminKey, body: body("keeper", obj{"creatorMode": true}), status: 403, msg: "useCreatorMode"},
			{name: "groupDefinitions without creatorMode", body: body("keeper", obj{"embedTenantName": "tenant-x", "groupDefinitions": []any{obj{"name": "g"}}}), status: 400, msg: "require creatorMode"},
			{name: "userAttributeDefinitions without creatorMode", body: body("keeper", obj{"embedTenantName": "tenant-x", "userAttributeDefinitions": []any{obj{"name": "a", "type": "string"}}}), status: 400, msg: "require creatorMode"},
			{name: "groupDefinitions without embedTenantName", body: body("keeper", obj{"creatorMode": true, "groupDefinitions": []any{obj{"name": "g"}}}), status: 400, msg: "require embedTenantName"},
			{name: "userAttributeDefinitions without embedTenantName", body: body("keeper", obj{"creatorMode": true, "userAttributeDefinitions": []any{obj{"name": "a", "type": "string"}}}), status: 400, msg: "require embedTenantName"},
			{name: "duplicate groupDefinitions", body: body("keeper", obj{"creatorMode": true, "embedTenantName": "tenant-x", "groupDefinitions": []any{obj{"name": "g"}, obj{"name": "g"}}}), status: 400, msg: "duplicate"},
			{name: "duplicate userAttributeDefinitions", body: body("keeper", obj{"creatorMode": true, "embedTenantName": "tenant-x", "userAttributeDefinitions": []any{obj{"name": "a", "type": "string"}, obj{"name": "a", "type": "number"}}}), status: 400, msg: "duplicate"},
			{name: "attribute definition with unknown type", body: body("keeper", obj{"creatorMode": true, "embedTenantName": "tenant-x", "userAttributeDefinitions": []any{obj{"name": "a", "type": "date"}}}), status: 400, msg: "type"},
			{name: "attribute definition without name", body: body("keeper", obj{"creatorMode": true, "embedTenantName": "tenant-x", "userAttributeDefinitions": []any{obj{"type": "string"}}}), status: 400, msg: "name"},
			{name: "creator mode does not see tenant-wide groups", body: body("keeper", obj{"creatorMode": true, "embedTenantName": "tenant-x", "groups": []string{"sales"}}), status: 400, msg: "Groups with names sales not found", exact: true},
			{name: "creator mode does not see tenant-wide attributes", body: body("keeper", obj{"creatorMode": true, "embedTenantName": "tenant-x", "userAttributes": attrs("country", "US")}), status: 400, msg: "User attributes not found", exact: true},
			{name: "definitions with a group that is then missing", body: body("keeper", obj{"creatorMode": true, "embedTenantName": "tenant-x", "groupDefinitions": []any{obj{"name": "g"}}, "groups": []string{"g", "h"}}), status: 400, msg: "Groups with names h not found", exact: true},
		}
		// internalId with each field that internal users may not send.
		for field, v := range map[string]any{
			"groups": []string{}, "userAttributes": []any{}, "groupDefinitions": []any{},
			"userAttributeDefinitions": []any{}, "securityContext": obj{}, "userProfile": obj{"displayName": "A"},
			"userProfile ": obj{}, // an empty profile is sent too (the space keeps the key distinct)
		} {
			field = strings.TrimSpace(field)
			cases = append(cases, rejection{
				name:   "internalId forbids " + field + " " + fmt.Sprint(v),
				body:   obj{"deploymentId": 1, "internalId": apitest.InternalUser, "creatorMode": true, "embedTenantName": "tenant-x", field: v},
				status: 400, msg: field + " is not allowed with internalId",
			})
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				if c.key == "-" {
					r := s.Send(t, s.Request(t, http.MethodPost, gen, "", c.body))
					if r.Status != c.status || !strings.Contains(fmt.Sprint(r.Body["error"]), c.msg) {
						t.Fatalf("got %d %s, want %d %q", r.Status, r.Raw, c.status, c.msg)
					}
					return
				}
				checkRejection(t, s, c)
			})
		}
		t.Run("failures changed nothing", func(t *testing.T) {
			if after := s.User(t, apitest.Account, "keeper", ""); !reflect.DeepEqual(after, before) {
				t.Errorf("user state changed:\n got %+v\nwant %+v", after, before)
			}
			if after := s.Catalog(t, apitest.Account, ""); !reflect.DeepEqual(after, catalogBefore) {
				t.Errorf("tenant-wide catalog changed:\n got %+v\nwant %+v", after, catalogBefore)
			}
			if c := s.Catalog(t, apitest.Account, "tenant-x"); c.Exists {
				t.Errorf("embed tenant tenant-x was created by failed requests: %+v", c)
			}
			for _, ext := range []string{"Keeper", " keeper"} {
				if u := s.User(t, apitest.Account, ext, ""); u.Exists {
					t.Errorf("user %q was created", ext)
				}
			}
		})
	})
}

// TestGenerateSessionProvisions covers the rules of a successful
// generate-session, checking the stored state after each step.
func TestGenerateSessionProvisions(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		t.Parallel()
		s := apitest.New(t, tg)
		user := func(t *testing.T, ext string) apitest.UserState {
			t.Helper()
			return s.User(t, apitest.Account, ext, "")
		}

		t.Run("response holds a URL-safe sessionId of at least 128 bits", func(t *testing.T) {
			status, out := s.Do(t, "POST", gen, apitest.UserKey, body("resp", nil))
			id, _ := out["sessionId"].(string)
			if status != 200 || len(id) < 22 || strings.ContainsAny(id, "+/=%?&# ") {
				t.Fatalf("got %d %v", status, out)
			}
			if len(out) != 1 {
				t.Errorf("response has extra fields: %v", out)
			}
		})
		t.Run("every request stores a new sessionId", func(t *testing.T) {
			a := s.GenerateSession(t, body("multi", nil))
			b := s.GenerateSession(t, body("multi", nil))
			if a == b {
				t.Fatal("two requests returned the same sessionId")
			}
			// both usable: a user may hold many sessions
			s.Whoami(t, a)
			s.Whoami(t, b)
		})
		t.Run("non-admin key may generate sessions", func(t *testing.T) {
			if status, out := s.Do(t, "POST", gen, apitest.UserKey, body("nonadmin", nil)); status != 200 {
				t.Fatalf("got %d %v", status, out)
			}
		})
		t.Run("unknown JSON fields are ignored", func(t *testing.T) {
			if status, out := s.Do(t, "POST", gen, apitest.AdminKey, body("unknown-fields", obj{"whatever": []int{1}})); status != 200 {
				t.Fatalf("got %d %v", status, out)
			}
		})
		t.Run("a JSON body is read whatever its Content-Type says", func(t *testing.T) {
			req := s.Request(t, "POST", gen, apitest.AdminKey, body("ct", nil))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded") // curl -d
			if r := s.Send(t, req); r.Status != 200 {
				t.Fatalf("got %d %s", r.Status, r.Raw)
			}
		})
		t.Run("profile is stored and overwritten or preserved per property", func(t *testing.T) {
			s.GenerateSession(t, body("prof", obj{"email": "p@x.test", "userProfile": obj{"displayName": "P One", "picture": "https://cdn.test/1.png"}}))
			if u := user(t, "prof"); u.DisplayName != "P One" || u.Picture != "https://cdn.test/1.png" || u.Email != "p@x.test" {
				t.Fatalf("after create: %+v", u)
			}
			s.GenerateSession(t, body("prof", obj{"userProfile": obj{"displayName": "P Two"}}))
			if u := user(t, "prof"); u.DisplayName != "P Two" || u.Picture != "https://cdn.test/1.png" || u.Email != "p@x.test" {
				t.Fatalf("displayName only: %+v", u)
			}
			s.GenerateSession(t, body("prof", obj{"userProfile": obj{"picture": "http://cdn.test/2.png"}}))
			if u := user(t, "prof"); u.DisplayName != "P Two" || u.Picture != "http://cdn.test/2.png" {
				t.Fatalf("picture only: %+v", u)
			}
			s.GenerateSession(t, body("prof", nil))
			if u := user(t, "prof"); u.DisplayName != "P Two" || u.Picture != "http://cdn.test/2.png" || u.Email != "p@x.test" {
				t.Fatalf("profile omitted: %+v", u)
			}
			s.GenerateSession(t, body("prof", obj{"email": "q@x.test", "userProfile": obj{}}))
			if u := user(t, "prof"); u.DisplayName != "P Two" || u.Email != "q@x.test" {
				t.Fatalf("empty profile: %+v", u)
			}
		})
		t.Run("whoami shows the provisioned user through the session", func(t *testing.T) {
			sid := s.GenerateSession(t, body("who", obj{"userProfile": obj{"displayName": "W"}}))
			if who := s.Whoami(t, sid); who.ExternalID != "who" || who.DisplayName != "W" || who.DeploymentID != 1 {
				t.Fatalf("whoami = %+v", who)
			}
		})
		t.Run("all four attribute types and null clearing", func(t *testing.T) {
			// string_array and number attributes exist only in an embed tenant here.
			s.GenerateSession(t, body("typed", obj{"creatorMode": true, "embedTenantName": "typed-tenant",
				"userAttributeDefinitions": []any{
					obj{"name": "s", "type": "string"}, obj{"name": "n", "type": "number"},
					obj{"name": "sa", "type": "string_array"}, obj{"name": "na", "type": "number_array"},
				},
				"userAttributes": attrs("s", "x", "n", 1.5, "sa", []string{"a", "b"}, "na", []any{1, 2.5}),
			}))
			st := s.User(t, apitest.Account, "typed", "typed-tenant")
			want := map[string]string{"s": `"x"`, "n": `1.5`, "sa": `["a","b"]`, "na": `[1,2.5]`}
			if !reflect.DeepEqual(st.Attributes, want) {
				t.Fatalf("attributes = %v, want %v", st.Attributes, want)
			}
			s.GenerateSession(t, body("typed", obj{"creatorMode": true, "embedTenantName": "typed-tenant",
				"userAttributes": attrs("s", nil, "sa", []string{}, "na", []int{})}))
			st = s.User(t, apitest.Account, "typed", "typed-tenant")
			want = map[string]string{"n": `1.5`, "sa": `[]`, "na": `[]`}
			if !reflect.DeepEqual(st.Attributes, want) {
				t.Fatalf("after null and empty arrays: %v, want %v", st.Attributes, want)
			}
		})
		t.Run("attribute values overwrite only the supplied names", func(t *testing.T) {
			s.GenerateSession(t, body("vals", obj{"userAttributes": attrs("country", "US", "region_ids", []int{1, 2})}))
			s.GenerateSession(t, body("vals", obj{"userAttributes": attrs("country", "FR")}))
			if a := user(t, "vals").Attributes; a["country"] != `"FR"` || a["region_ids"] != `[1,2]` {
				t.Fatalf("attributes = %v", a)
			}
			s.GenerateSession(t, body("vals", obj{"userAttributes": []any{}}))
			if a := user(t, "vals").Attributes; len(a) != 2 {
				t.Fatalf("empty userAttributes changed values: %v", a)
			}
			s.GenerateSession(t, body("vals", obj{"userAttributes": attrs("region_ids", nil)}))
			if a := user(t, "vals").Attributes; a["country"] != `"FR"` || a["region_ids"] != "" {
				t.Fatalf("after null: %v", a)
			}
		})
		t.Run("groups omitted keeps memberships, empty clears, populated replaces", func(t *testing.T) {
			s.GenerateSession(t, body("grp", obj{"groups": []string{"sales", "marketing"}}))
			if g := user(t, "grp").Groups; !reflect.DeepEqual(g, []string{"marketing", "sales"}) {
				t.Fatalf("populated: %v", g)
			}
			s.GenerateSession(t, body("grp", nil))
			if g := user(t, "grp").Groups; len(g) != 2 {
				t.Fatalf("omitted: %v", g)
			}
			s.GenerateSession(t, body("grp", obj{"groups": nil}))
			if g := user(t, "grp").Groups; len(g) != 2 {
				t.Fatalf("null: %v", g)
			}
			s.GenerateSession(t, body("grp", obj{"groups": []string{"sales"}}))
			if g := user(t, "grp").Groups; !reflect.DeepEqual(g, []string{"sales"}) {
				t.Fatalf("replaced: %v", g)
			}
			if status, out := s.Do(t, "POST", gen, apitest.UserKey, body("grp", obj{"groups": []string{"marketing", "sales", "marketing"}})); status != 400 || out["error"] != `groups has duplicate name "marketing"` {
				t.Fatalf("repeated name: %d %v", status, out)
			}
			if g := user(t, "grp").Groups; !reflect.DeepEqual(g, []string{"sales"}) {
				t.Fatalf("a refused request changed the memberships: %v", g)
			}
			// Keys name fields exactly: "Groups" is an unknown field, ignored.
			s.GenerateSession(t, body("grp", obj{"Groups": []string{}, "GROUPS": 5}))
			if g := user(t, "grp").Groups; !reflect.DeepEqual(g, []string{"sales"}) {
				t.Fatalf("a field's name in another case was read: %v", g)
			}
			s.GenerateSession(t, body("grp", obj{"groups": []string{}}))
			if g := user(t, "grp").Groups; len(g) != 0 {
				t.Fatalf("empty: %v", g)
			}
		})
		t.Run("securityContext is stored, preserved when omitted, cleared by null", func(t *testing.T) {
			s.GenerateSession(t, body("sec", obj{"securityContext": obj{"tenant": "a", "ids": []int{1}}}))
			if c := user(t, "sec").SecurityContext; c != `{"ids":[1],"tenant":"a"}` && c != `{"tenant":"a","ids":[1]}` {
				t.Fatalf("stored: %s", c)
			}
			s.GenerateSession(t, body("sec", nil))
			if c := user(t, "sec").SecurityContext; !strings.Contains(c, "tenant") {
				t.Fatalf("omitted: %s", c)
			}
			s.GenerateSession(t, body("sec", obj{"securityContext": nil}))
			if c := user(t, "sec").SecurityContext; strings.Contains(c, "tenant") {
				t.Fatalf("null did not clear: %s", c)
			}
		})
		t.Run("securityContext keys differing in case are two keys", func(t *testing.T) {
			s.GenerateSession(t, `{"deploymentId":1,"externalId":"sec-case","securityContext":{"Region":"eu","region":"EU-WEST"}}`)
			if c := user(t, "sec-case").SecurityContext; !strings.Contains(c, `"Region":"eu"`) || !strings.Contains(c, `"region":"EU-WEST"`) {
				t.Fatalf("stored: %s", c)
			}
		})
		t.Run("internal user gets a session with existing permissions", func(t *testing.T) {
			sid := s.GenerateSession(t, obj{"deploymentId": 1, "internalId": apitest.InternalUser, "email": "ignored@x.test"})
			if who := s.Whoami(t, sid); who.InternalID != apitest.InternalUser || who.ExternalID != "" {
				t.Fatalf("whoami = %+v", who)
			}
		})
		t.Run("internal user: a forbidden field sent as null counts as omitted", func(t *testing.T) {
			s.GenerateSession(t, obj{"deploymentId": 1, "internalId": apitest.InternalUser, "groups": nil, "userAttributes": nil,
				"groupDefinitions": nil, "userAttributeDefinitions": nil, "securityContext": nil, "userProfile": nil})
		})
		t.Run("a whole number written with a fraction or exponent is a number", func(t *testing.T) {
			for _, raw := range []string{`{"deploymentId":1.0,"externalId":"float-id"}`, `{"deploymentId":1e0,"externalId":"float-id"}`} {
				s.GenerateSession(t, raw)
			}
		})
		t.Run("internal user in creator mode with an embed tenant", func(t *testing.T) {
			sid := s.GenerateSession(t, obj{"deploymentId": 1, "internalId": apitest.InternalUser, "creatorMode": true, "embedTenantName": "internal-t"})
			if who := s.Whoami(t, sid); !who.CreatorMode || who.EmbedTenantName != "internal-t" {
				t.Fatalf("whoami = %+v", who)
			}
		})
		t.Run("embedTenantName valid forms are accepted", func(t *testing.T) {
			for _, name := range []string{"abcde", "a-b-c-1", "z" + strings.Repeat("9", 35)} {
				sid := s.GenerateSession(t, body("names", obj{"embedTenantName": name}))
				if who := s.Whoami(t, sid); who.EmbedTenantName != name {
					t.Errorf("embedTenantName = %q, want %q", who.EmbedTenantName, name)
				}
			}
		})
		t.Run("creator mode defines and uses names in one request", func(t *testing.T) {
			sid := s.GenerateSession(t, body("creator", obj{"creatorMode": true, "embedTenantName": "creator-t",
				"groupDefinitions":         []any{obj{"name": "analysts", "description": "Analysts"}},
				"userAttributeDefinitions": []any{obj{"name": "country", "type": "number", "displayName": "Country code"}},
				"groups":                   []string{"analysts"},
				"userAttributes":           attrs("country", 49),
			}))
			who := s.Whoami(t, sid)
			if !who.CreatorMode || who.EmbedTenantName != "creator-t" || !reflect.DeepEqual(who.Groups, []string{"analysts"}) ||
				string(who.UserAttributes["country"]) != "49" {
				t.Fatalf("whoami = %+v", who)
			}
		})
		t.Run("creator mode without embedTenantName uses the default embed tenant", func(t *testing.T) {
			sid := s.GenerateSession(t, body("creator-default", obj{"creatorMode": true}))
			if who := s.Whoami(t, sid); !who.CreatorMode || who.EmbedTenantName != "default" {
				t.Fatalf("whoami = %+v", who)
			}
		})
		t.Run("definitions affect only the embed tenant scope", func(t *testing.T) {
			tw := s.Catalog(t, apitest.Account, "")
			if tw.Attributes["country"] != "string|||" || len(tw.Groups) != 2 {
				t.Fatalf("tenant-wide catalog changed: %+v", tw)
			}
			if _, ok := tw.Groups["analysts"]; ok {
				t.Fatal("analysts leaked into the tenant-wide groups")
			}
			et := s.Catalog(t, apitest.Account, "creator-t")
			if et.Attributes["country"] != "number|Country code||" || et.Groups["analysts"] != "Analysts" {
				t.Fatalf("embed tenant catalog = %+v", et)
			}
			// the tenant-wide value of the same user is untouched by creator mode
			s.GenerateSession(t, body("creator", obj{"userAttributes": attrs("country", "DE"), "groups": []string{"sales"}}))
			if u := s.User(t, apitest.Account, "creator", "creator-t"); u.Attributes["country"] != "49" || !reflect.DeepEqual(u.Groups, []string{"analysts"}) {
				t.Fatalf("embed scope state = %+v", u)
			}
			if u := user(t, "creator"); u.Attributes["country"] != `"DE"` || !reflect.DeepEqual(u.Groups, []string{"sales"}) {
				t.Fatalf("tenant-wide state = %+v", u)
			}
		})
		t.Run("definitions are idempotent: same request twice, same state", func(t *testing.T) {
			req := body("idem", obj{"creatorMode": true, "embedTenantName": "idem-tenant",
				"groupDefinitions":         []any{obj{"name": "a", "description": "A"}, obj{"name": "b"}},
				"userAttributeDefinitions": []any{obj{"name": "x", "type": "string_array", "defaultValue": "[]", "description": "X"}},
				"groups":                   []string{"a", "b"},
				"userAttributes":           attrs("x", []string{"1"}),
			})
			s.GenerateSession(t, req)
			c1, u1 := s.Catalog(t, apitest.Account, "idem-tenant"), s.User(t, apitest.Account, "idem", "idem-tenant")
			s.GenerateSession(t, req)
			c2, u2 := s.Catalog(t, apitest.Account, "idem-tenant"), s.User(t, apitest.Account, "idem", "idem-tenant")
			if !reflect.DeepEqual(c1, c2) || !reflect.DeepEqual(u1, u2) {
				t.Fatalf("state differs:\n%+v %+v\n%+v %+v", c1, u1, c2, u2)
			}
			if len(c2.Groups) != 2 || len(c2.Attributes) != 1 {
				t.Fatalf("catalog = %+v", c2)
			}
		})
		t.Run("descriptions update when supplied; group descriptions are never cleared", func(t *testing.T) {
			def := func(g, a obj) obj {
				return body("desc", obj{"creatorMode": true, "embedTenantName": "desc-tenant",
					"groupDefinitions": []any{g}, "userAttributeDefinitions": []any{a}})
			}
			s.GenerateSession(t, def(obj{"name": "g", "description": "one"}, obj{"name": "a", "type": "string", "displayName": "A", "description": "d1"}))
			s.GenerateSession(t, def(obj{"name": "g"}, obj{"name": "a", "type": "string"}))
			c := s.Catalog(t, apitest.Account, "desc-tenant")
			if c.Groups["g"] != "one" || c.Attributes["a"] != "string|A||d1" {
				t.Fatalf("omitted fields changed: %+v", c)
			}
			s.GenerateSession(t, def(obj{"name": "g", "description": "two"}, obj{"name": "a", "type": "string", "defaultValue": "dv", "description": "d2"}))
			c = s.Catalog(t, apitest.Account, "desc-tenant")
			if c.Groups["g"] != "two" || c.Attributes["a"] != "string|A|dv|d2" {
				t.Fatalf("supplied fields not updated: %+v", c)
			}
			// Empty strings are supplied values: they clear an attribute's
			// optional fields, but a group description is never cleared.
			s.GenerateSession(t, def(obj{"name": "g", "description": ""}, obj{"name": "a", "type": "string", "displayName": "", "defaultValue": "", "description": ""}))
			c = s.Catalog(t, apitest.Account, "desc-tenant")
			if c.Groups["g"] != "two" || c.Attributes["a"] != "string|||" {
				t.Fatalf("empty strings: %+v", c)
			}
		})
		t.Run("cannot change type is 409 and nothing is upserted", func(t *testing.T) {
			before := s.Catalog(t, apitest.Account, "creator-t")
			checkRejection(t, s, rejection{
				body: body("type-change", obj{"creatorMode": true, "embedTenantName": "creator-t",
					"groupDefinitions":         []any{obj{"name": "brand-new"}, obj{"name": "analysts", "description": "changed"}},
					"userAttributeDefinitions": []any{obj{"name": "fresh", "type": "string"}, obj{"name": "country", "type": "string"}},
					"groups":                   []string{"brand-new"},
				}),
				status: 409, msg: "cannot change type", exact: true,
			})
			if after := s.Catalog(t, apitest.Account, "creator-t"); !reflect.DeepEqual(after, before) {
				t.Fatalf("catalog changed:\n got %+v\nwant %+v", after, before)
			}
			if u := user(t, "type-change"); u.Exists {
				t.Fatal("user created by a failed request")
			}
		})
		t.Run("cannot change type in a new embed tenant leaves no tenant", func(t *testing.T) {
			checkRejection(t, s, rejection{
				body: body("type-change", obj{"creatorMode": true, "embedTenantName": "never-made",
					"userAttributeDefinitions": []any{obj{"name": "a", "type": "string"}},
					"userAttributes":           attrs("a", 1)}),
				status: 400, msg: "attribute \"a\"",
			})
			if c := s.Catalog(t, apitest.Account, "never-made"); c.Exists {
				t.Fatalf("embed tenant created by a failed request: %+v", c)
			}
		})
		t.Run("the same names in two accounts are separate", func(t *testing.T) {
			status, out := s.Do(t, "POST", gen, apitest.OtherAdminKey, body("shared", obj{"userAttributes": attrs("country", "JP"), "groups": []string{"sales"}}))
			if status != 200 {
				t.Fatalf("got %d %v", status, out)
			}
			if u := user(t, "shared"); u.Exists {
				t.Fatal("user of another account visible in acme")
			}
			if u := s.User(t, apitest.OtherAccount, "shared", ""); u.Attributes["country"] != `"JP"` {
				t.Fatalf("other account user = %+v", u)
			}
			// region_ids exists only in acme
			checkRejection(t, s, rejection{key: apitest.OtherAdminKey, body: body("shared", obj{"userAttributes": attrs("region_ids", []int{1})}),
				status: 400, msg: "User attributes not found", exact: true})
		})
	})
}

// TestDefaultEmbedTenantName checks that a session without embedTenantName
// names the account's default embed tenant.
func TestDefaultEmbedTenantName(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		s := apitest.New(t, tg)
		if who := s.Whoami(t, s.GenerateSession(t, body("dflt", nil))); who.EmbedTenantName != "default" || who.CreatorMode {
			t.Errorf("whoami = %+v", who)
		}
	})
}

// TestStoreUnavailable checks that a store that cannot answer gives 503 with
// a generic message, on the API key check and on the handlers.
func TestStoreUnavailable(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		s := apitest.New(t, tg)
		if err := s.Store.Close(); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ method, path, key string }{
			{"POST", gen, apitest.AdminKey},
			{"POST", tokenPath, ""},
			{"GET", apitest.WhoamiPath + "?sessionId=x", ""},
		} {
			r := s.Send(t, s.Request(t, c.method, c.path, c.key, body("down", nil)))
			if c.path == tokenPath {
				r = s.Send(t, s.Request(t, c.method, c.path, c.key, obj{"sessionId": "x"}))
			}
			if r.Status != 503 || r.Body["error"] != "service unavailable, try again" {
				t.Errorf("%s %s = %d %s, want 503", c.method, c.path, r.Status, r.Raw)
			}
		}
	})
}

// TestCacheTTL runs creator-mode flows with WithCacheTTL: cached keys,
// deployments and embed tenants give the same results, and a tenant created
// by a failed request is not remembered.
func TestCacheTTL(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		s := apitest.New(t, tg, apitest.WithEmbedOptions(embedsession.WithCacheTTL(time.Minute)))
		// a failed first request in a new tenant: rolled back, not cached
		checkRejection(t, s, rejection{body: body("c", obj{"creatorMode": true, "embedTenantName": "cache-t",
			"groupDefinitions": []any{obj{"name": "g"}}, "groups": []string{"g", "missing"}}), status: 400, msg: "Groups with names missing not found", exact: true})
		if c := s.Catalog(t, apitest.Account, "cache-t"); c.Exists {
			t.Fatal("tenant of a failed request exists")
		}
		for i := range 3 {
			sid := s.GenerateSession(t, body("c", obj{"creatorMode": true, "embedTenantName": "cache-t",
				"groupDefinitions": []any{obj{"name": "g"}}, "groups": []string{"g"}}))
			if who := s.Whoami(t, sid); who.EmbedTenantName != "cache-t" || len(who.Groups) != 1 {
				t.Fatalf("request %d: whoami = %+v", i, who)
			}
		}
		s.GenerateSession(t, body("c", obj{"creatorMode": true, "embedTenantName": "cache-t",
			"userAttributeDefinitions": []any{obj{"name": "a", "type": "string"}}}))
		checkRejection(t, s, rejection{body: body("c", obj{"creatorMode": true, "embedTenantName": "cache-t",
			"userAttributeDefinitions": []any{obj{"name": "a", "type": "number"}}}), status: 409, msg: "cannot change type", exact: true})
		// the same tenant name in another account is another tenant
		checkRejection(t, s, rejection{key: apitest.OtherAdminKey, body: body("c", obj{"embedTenantName": "cache-t", "groups": []string{"g"}}),
			status: 400, msg: "Groups with names g not found", exact: true})
		checkRejection(t, s, rejection{body: obj{"deploymentId": 2, "externalId": "c"}, status: 404, msg: "deployment not found", exact: true})
		checkRejection(t, s, rejection{key: "sk-nope", body: body("c", nil), status: 401, msg: "invalid API key", exact: true})
	})
}

// TestClientNilValueNeverClears: through the Go client, an attribute whose
// Value was left nil is refused (400) and the stored value kept; Value(nil)
// is how a value is cleared.
func TestClientNilValueNeverClears(t *testing.T) {
	s := apitest.New(t, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux})
	c := embedsession.NewClient(s.URL, apitest.AdminKey)
	ctx := t.Context()
	req := func(v json.RawMessage) embedsession.SessionRequest {
		return embedsession.SessionRequest{DeploymentID: 1, ExternalID: "jane",
			UserAttributes: []embedsession.UserAttribute{{Name: "country", Value: v}}}
	}
	if _, err := c.GenerateSession(ctx, req(embedsession.Value("Germany"))); err != nil {
		t.Fatal(err)
	}
	_, err := c.GenerateSession(ctx, req(nil))
	if status, _ := httperr.Status(err); status != http.StatusBadRequest {
		t.Errorf("nil Value: %v, want a 400", err)
	}
	if got := s.User(t, apitest.Account, "jane", "").Attributes["country"]; got != `"Germany"` {
		t.Errorf("stored country after a nil Value = %q, want it kept", got)
	}
	if _, err := c.GenerateSession(ctx, req(embedsession.Value(nil))); err != nil {
		t.Fatal(err)
	}
	if got, ok := s.User(t, apitest.Account, "jane", "").Attributes["country"]; ok {
		t.Errorf("stored country after Value(nil) = %q, want it cleared", got)
	}
}
