package operator_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/embedkit/embedkit/internal/secret"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/operator"
)

// demoJSON is the example server's bootstrap document, as documented.
const demoJSON = `{
  "accounts": [{
    "name": "acme",
    "plan": "enterprise",
    "useCreatorMode": true,
    "maxExternalUsers": 10000,
    "apiKeys": [{"key": "sk-acme-admin", "admin": true}, {"key": "sk-acme-user"}],
    "deployments": [{"id": 1, "name": "production"}],
    "agents": [{"id": "7", "deploymentId": 1}],
    "userAttributes": [{"name": "country", "type": "string"},
                       {"name": "region_ids", "type": "number_array"}],
    "groups": [{"name": "sales"}, {"name": "marketing"}],
    "internalUsers": [{"username": "alice@acme.test"}],
    "branches": ["main", "dev-1"]
  }]
}`

func TestDecodeMatchesDemo(t *testing.T) {
	cfg, err := operator.DecodeConfig(strings.NewReader(demoJSON))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, operator.DemoConfig()) {
		t.Errorf("decoded document = %+v\nwant DemoConfig() = %+v", cfg, operator.DemoConfig())
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct{ name, json string }{
		{"account without name", `{"accounts":[{}]}`},
		{"unknown plan", `{"accounts":[{"name":"a","plan":"gold"}]}`},
		{"bad attribute type", `{"accounts":[{"name":"a","userAttributes":[{"name":"x","type":"date"}]}]}`},
		{"empty key", `{"accounts":[{"name":"a","apiKeys":[{"key":""}]}]}`},
		{"negative limit", `{"accounts":[{"name":"a","maxExternalUsers":-1}]}`},
		{"one key for two accounts", `{"accounts":[{"name":"a","apiKeys":[{"key":"k"}]},{"name":"b","apiKeys":[{"key":"k","admin":true}]}]}`},
		{"malformed", `{`},
		{"key and keyHash", `{"accounts":[{"name":"a","apiKeys":[{"key":"k","keyHash":"` + strings.Repeat("ab", 32) + `"}]}]}`},
		{"short keyHash", `{"accounts":[{"name":"a","apiKeys":[{"keyHash":"abcd"}]}]}`},
		{"keyHash not hex", `{"accounts":[{"name":"a","apiKeys":[{"keyHash":"` + strings.Repeat("zz", 32) + `"}]}]}`},
		{"one key twice", `{"accounts":[{"name":"a","apiKeys":[{"key":"k"},{"keyHash":"` + operator.HashKey("k") + `"}]}]}`},
		{"one key hashed for two accounts", `{"accounts":[{"name":"a","apiKeys":[{"key":"k"}]},{"name":"b","apiKeys":[{"keyHash":"` + operator.HashKey("k") + `"}]}]}`},
		{"account twice", `{"accounts":[{"name":"a"},{"name":"a"}]}`},
		{"deployment id 0", `{"accounts":[{"name":"a","deployments":[{"id":0}]}]}`},
		{"agent without deployment", `{"accounts":[{"name":"a","agents":[{"id":"7"}]}]}`},
		{"group without name", `{"accounts":[{"name":"a","groups":[{}]}]}`},
		{"attribute twice", `{"accounts":[{"name":"a","userAttributes":[{"name":"c","type":"string"},{"name":"c","type":"number"}]}]}`},
		{"group twice", `{"accounts":[{"name":"a","groups":[{"name":"g"},{"name":"g"}]}]}`},
		{"deployment twice", `{"accounts":[{"name":"a","deployments":[{"id":1},{"id":1}]}]}`},
		{"long name", `{"accounts":[{"name":"` + strings.Repeat("x", 256) + `"}]}`},
		// A browser removes a dot segment from a URL path however it is
		// escaped: the chat page could not reach such an account or agent.
		{"account ..", `{"accounts":[{"name":".."}]}`},
		{"agent .", `{"accounts":[{"name":"a","deployments":[{"id":1}],"agents":[{"id":".","deploymentId":1}]}]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := operator.DecodeConfig(strings.NewReader(c.json))
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.Contains(err.Error(), `"k"`) {
				t.Errorf("the key appears in the error: %v", err)
			}
		})
	}
}

func TestApplyIsIdempotent(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			st := testdb.Open(t, backend)
			ctx := context.Background()
			for range 2 {
				if err := operator.New(st).Apply(ctx, operator.DemoConfig()); err != nil {
					t.Fatal(err)
				}
			}
			acct, err := st.AccountByName(ctx, "acme")
			if err != nil {
				t.Fatal(err)
			}
			if acct.Plan != store.PlanEnterprise || !acct.UseCreatorMode || acct.MaxExternalUsers != 10000 ||
				!reflect.DeepEqual(acct.Branches, []string{"main", "dev-1"}) {
				t.Errorf("account = %+v", acct)
			}
			for key, admin := range map[string]bool{"sk-acme-admin": true, "sk-acme-user": false} {
				k, _, err := st.APIKeyByHash(ctx, secret.Hash(key))
				if err != nil || k.Admin != admin || k.AccountID != acct.ID {
					t.Errorf("key %s = %+v, %v", key, k, err)
				}
			}
			if found, err := st.Lookup(ctx, store.Lookup{Scope: store.TenantWide(acct.ID), DeploymentID: 1}); err != nil || !found.DeploymentFound {
				t.Errorf("deployment 1: %+v, %v", found, err)
			}
			if a, err := st.Agent(ctx, acct.ID, "7"); err != nil || a.DeploymentID != 1 {
				t.Errorf("agent = %+v, %v", a, err)
			}
			gs, _ := st.ListGroups(ctx, store.TenantWide(acct.ID), 0, 10)
			as, _ := st.ListAttributes(ctx, store.TenantWide(acct.ID), 0, 10)
			if len(gs) != 2 || len(as) != 2 {
				t.Errorf("catalog: %d groups, %d attributes", len(gs), len(as))
			}
			if _, err := st.UserByKey(ctx, store.UserKey{AccountID: acct.ID, InternalID: "alice@acme.test"}, time.Now()); err != nil {
				t.Error(err)
			}
			t.Run("a key of another account is refused and kept as it is", func(t *testing.T) {
				cfg := operator.Config{Accounts: []operator.Account{{Name: "zz", APIKeys: []operator.APIKey{{Key: "sk-acme-admin"}}}}}
				err := operator.New(st).Apply(ctx, cfg)
				if !errors.Is(err, store.ErrConflict) && (err == nil || !strings.Contains(err.Error(), "another account")) {
					t.Fatalf("err = %v, want a refusal", err)
				}
				if strings.Contains(err.Error(), "sk-acme-admin") {
					t.Errorf("the key appears in the error: %v", err)
				}
				if k, _, err := st.APIKeyByHash(ctx, secret.Hash("sk-acme-admin")); err != nil || !k.Admin || k.AccountID != acct.ID {
					t.Errorf("key = %+v, %v; want acme's admin key unchanged", k, err)
				}
				if _, err := st.AccountByName(ctx, "zz"); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("account zz = %v, want none (the config applies all or nothing)", err)
				}
			})
			t.Run("changed attribute type is a conflict", func(t *testing.T) {
				cfg := operator.DemoConfig()
				cfg.Accounts[0].UserAttributes[0].Type = store.TypeNumber
				if err := operator.New(st).Apply(ctx, cfg); !errors.Is(err, store.ErrConflict) {
					t.Errorf("err = %v, want ErrConflict", err)
				}
			})
		})
	}
}

// TestLimits: an account's "limits" object reaches store.Account.Limits,
// and a later start without it clears them (the file is authoritative).
func TestLimits(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			st := testdb.Open(t, backend)
			ctx := t.Context()
			cfg, err := operator.DecodeConfig(strings.NewReader(`{"accounts":[{"name":"lim","plan":"premium","limits":{
				"runningTurns":7,"runningTurnsPerUser":2,"newEphemeralUsersPerMinute":30,
				"embedTenants":4,"threadTurns":9,"threadBytes":1048576}}]}`))
			if err != nil {
				t.Fatal(err)
			}
			if err := operator.New(st).Apply(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			acct, err := st.AccountByName(ctx, "lim")
			if err != nil {
				t.Fatal(err)
			}
			want := store.Limits{RunningTurns: 7, RunningTurnsPerUser: 2, NewEphemeralUsersPerMinute: 30, EmbedTenants: 4, ThreadTurns: 9, ThreadBytes: 1 << 20}
			if acct.Limits != want {
				t.Errorf("limits = %+v, want %+v", acct.Limits, want)
			}
			cfg.Accounts[0].Limits = store.Limits{}
			if err := operator.New(st).Apply(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			if acct, _ = st.AccountByName(ctx, "lim"); acct.Limits != (store.Limits{}) {
				t.Errorf("limits after a start without them = %+v, want none", acct.Limits)
			}
		})
	}
}

// TestDecodeConfigStrict: the bootstrap document is decoded strictly; each
// refusal names the field or the line, and none quotes a value.
func TestDecodeConfigStrict(t *testing.T) {
	for _, c := range []struct{ name, json, want string }{
		{"unknown top-level field", `{"accounts":[],"acounts":[]}`, `unknown field "acounts"`},
		{"unknown account field", `{"accounts":[{"name":"a","plann":"premium"}]}`, `unknown field "plann"`},
		{"unknown key field", `{"accounts":[{"name":"a","apiKeys":[{"key":"sk-secret","admn":true}]}]}`, `unknown field "admn"`},
		{"unknown limit", `{"accounts":[{"name":"a","limits":{"runingTurns":3}}]}`, `unknown field "runingTurns"`},
		{"wrong type", "{\"accounts\":[\n{\"name\":\"a\",\"maxExternalUsers\":\"many\"}]}", `field accounts[0].maxExternalUsers (line 2)`},
		{"wrong type of a key", `{"accounts":[{"name":"a","apiKeys":[{"key":"sk-secret","admin":"yes"}]}]}`, `field accounts[0].apiKeys[0].admin`},
		{"trailing document", "{\"accounts\":[]}\n{\"accounts\":[]}", `content after the JSON document (line 2)`},
		{"trailing garbage", `{"accounts":[]} x`, `content after the JSON document`},
		{"malformed", "{\"accounts\":[\n\n{\"name\":\"sk-secret\",}]}", `malformed JSON at line 3`},
		{"empty", ``, `empty or cut short`},
		{"cut short", `{"accounts":[`, `empty or cut short`},
		{"a key given twice", `{"accounts":[{"name":"a","apiKeys":[{"key":"sk-secret"}],"apiKeys":[]}]}`, `field accounts[0].apiKeys appears more than once`},
		{"a field's name in another case", `{"accounts":[],"Accounts":[]}`, `unknown field "Accounts"`},
		{"a nested field's name in another case", `{"accounts":[{"name":"a","apiKeys":[{"key":"sk-secret","Admin":true}]}]}`, `unknown field "accounts[0].apiKeys[0].Admin"`},
		{"null keys", `{"accounts":[{"name":"a","apiKeys":null}]}`, `field accounts[0].apiKeys is null`},
		{"null deep", `{"accounts":[{"name":"a","apiKeys":[{"key":"sk-secret","admin":false},{"key":"sk-other"}],"branches":["main","x"],"deployments":[{"id":1,"name":null}]}]}`, `field accounts[0].deployments[0].name is null`},
		{"null after an empty object in an array", `{"accounts":[{},{"name":null}]}`, `field accounts[1].name is null`},
		{"NUL in a string", `{"accounts":[{"name":"a","branches":["main","d\u0000v"]}]}`, `field accounts[0].branches[1] must not contain the NUL character`},
		{"null", `null`, `must be a JSON object`},
		{"an array", `[]`, `must be a JSON object`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := operator.DecodeConfig(strings.NewReader(c.json))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error = %v, want one containing %q", err, c.want)
			}
			if strings.Contains(err.Error(), "sk-secret") || strings.Contains(err.Error(), "many") {
				t.Errorf("the error quotes a value: %v", err)
			}
		})
	}
	// White space after the document is fine.
	if _, err := operator.DecodeConfig(strings.NewReader("{\"accounts\":[]}\n\n")); err != nil {
		t.Errorf("trailing white space: %v", err)
	}
}
