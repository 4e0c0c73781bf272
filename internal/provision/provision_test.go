package provision_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/embedkit/embedkit/internal/provision"
	"github.com/embedkit/embedkit/internal/wire"
	"github.com/embedkit/embedkit/store"
)

func str(s string) *string { return &s }

// TestValidate checks the database-free rules; the end-to-end tests of
// embedsession cover them over HTTP as well.
func TestValidate(t *testing.T) {
	ok := func(r provision.Request) provision.Request {
		if r.ExternalID == "" && r.InternalID == "" {
			r.ExternalID = "jane"
		}
		return r
	}
	cases := []struct {
		name string
		req  provision.Request
		msg  string // "" means valid
	}{
		{"external user", ok(provision.Request{}), ""},
		{"internal user", provision.Request{InternalID: "alice"}, ""},
		{"internal user may send email (ignored)", provision.Request{InternalID: "alice", Email: str("a@x")}, ""},
		{"neither id", provision.Request{}, "exactly one of"},
		{"both ids", provision.Request{ExternalID: "a", InternalID: "b"}, "not both"},
		{"uppercase externalId", provision.Request{ExternalID: "Jane"}, "lowercase"},
		{"untrimmed externalId", provision.Request{ExternalID: "jane\t"}, "trimmed"},
		{"externalId with inner spaces", provision.Request{ExternalID: "jane doe"}, ""},
		{"externalId with a tab inside", provision.Request{ExternalID: "jane\tdoe"}, "control characters"},
		{"externalId with a non-breaking space at its end", provision.Request{ExternalID: "jane\u00a0"}, "trimmed"},
		{"externalId too long", provision.Request{ExternalID: strings.Repeat("a", 256)}, "at most 255"},
		{"internal with groups", provision.Request{InternalID: "a", GroupsSent: true}, "groups is not allowed"},
		{"internal with profile", provision.Request{InternalID: "a", Picture: str("https://x")}, "userProfile is not allowed"},
		{"picture must be http(s)", ok(provision.Request{Picture: str("data:image/png;base64,AA")}), "picture"},
		{"empty picture clears", ok(provision.Request{Picture: str("")}), ""},
		{"picture without a host name", ok(provision.Request{Picture: str("http://:80/a.png")}), "picture"},
		{"picture port out of range", ok(provision.Request{Picture: str("https://example.com:99999/a.png")}), "picture"},
		{"picture host with <", ok(provision.Request{Picture: str("https://<x>/a.png")}), "picture"},
		{"picture host with a quote", ok(provision.Request{Picture: str(`https://a"b/`)}), "picture"},
		{"picture host with a space", ok(provision.Request{Picture: str("https://a%20b/")}), "picture"},
		{"picture IPv6 with a zone", ok(provision.Request{Picture: str("http://[fe80::1%25en0]/a.png")}), "picture"},
		{"picture IPv4 in brackets", ok(provision.Request{Picture: str("http://[127.0.0.1]/a.png")}), "picture"},
		{"picture with port, user and query", ok(provision.Request{Picture: str("https://u:p@cdn.example.test:8443/a%20b.png?s=1#x")}), ""},
		{"picture IPv6", ok(provision.Request{Picture: str("http://[::1]:8080/a.png")}), ""},
		{"picture IDN host", ok(provision.Request{Picture: str("https://bücher.example/a.png")}), ""},
		{"picture empty port", ok(provision.Request{Picture: str("https://cdn.example.test:/a.png")}), ""},
		{"bad tenant name", ok(provision.Request{EmbedTenantName: "ab"}), "embedTenantName"},
		{"attribute without value", ok(provision.Request{Attributes: []provision.AttributeInput{{Name: "a"}}}), "value is required"},
		{"attribute null", ok(provision.Request{Attributes: []provision.AttributeInput{{Name: "a", Value: json.RawMessage("null")}}}), ""},
		{"attribute bool", ok(provision.Request{Attributes: []provision.AttributeInput{{Name: "a", Value: json.RawMessage("true")}}}), "value must be"},
		{"number with a far exponent", ok(provision.Request{Attributes: []provision.AttributeInput{{Name: "a", Value: json.RawMessage("1e-20000")}}}), "userAttributes[0].value must be a number of at most 64 characters, with an exponent of at most 400 in magnitude"},
		{"long number in an array", ok(provision.Request{Attributes: []provision.AttributeInput{{Name: "a", Value: json.RawMessage("[1, 0." + strings.Repeat("0", 70) + "]")}}}), "userAttributes[0].value[1] must be a number of at most 64"},
		{"a number past float64", ok(provision.Request{Attributes: []provision.AttributeInput{{Name: "a", Value: json.RawMessage("[1, 1e400]")}}}), "userAttributes[0].value[1] must be a number a 64-bit float can hold (at most 1.7976931348623157e308 in magnitude)"},
		{"a number just past float64", ok(provision.Request{Attributes: []provision.AttributeInput{{Name: "a", Value: json.RawMessage("-1.8e308")}}}), "userAttributes[0].value must be a number a 64-bit float can hold"},
		{"smallest and largest float64", ok(provision.Request{Attributes: []provision.AttributeInput{{Name: "a", Value: json.RawMessage("[4.9e-324, 1.7976931348623157E+308, -0]")}}}), ""},
		{"duplicate attribute", ok(provision.Request{Attributes: []provision.AttributeInput{{Name: "a", Value: json.RawMessage("1")}, {Name: "a", Value: json.RawMessage("2")}}}), "duplicate"},
		{"definitions need creatorMode", ok(provision.Request{EmbedTenantName: "tenant", GroupDefinitions: []store.GroupDef{{Name: "g"}}}), "creatorMode"},
		{"definitions need tenant", ok(provision.Request{CreatorMode: true, GroupDefinitions: []store.GroupDef{{Name: "g"}}}), "embedTenantName"},
		{"definition type", ok(provision.Request{CreatorMode: true, EmbedTenantName: "tenant", AttributeDefinitions: []store.AttributeDef{{Name: "a", Type: "x"}}}), "type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.req.Validate()
			if c.msg == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			we, isWire := errors.AsType[*wire.Error](err)
			if !isWire || we.Status != 400 || !strings.Contains(we.Message, c.msg) {
				t.Fatalf("Validate = %v, want a 400 containing %q", err, c.msg)
			}
		})
	}
	t.Run("prefix names the field in every message", func(t *testing.T) {
		for _, c := range cases {
			if c.msg == "" {
				continue
			}
			r := c.req
			r.Fields = "sessionSettings."
			if err := r.Validate(); err == nil || !strings.Contains(err.Error(), "sessionSettings.") {
				t.Errorf("%s: %v lacks the prefix", c.name, err)
			}
		}
	})
}

func TestValidEmbedTenantName(t *testing.T) {
	for name, want := range map[string]bool{
		"abcde": true, "a-b-c": true, "a2345": true, "a" + strings.Repeat("b", 35): true,
		"abcd": false, "a" + strings.Repeat("b", 36): false, "Abcde": false, "1abcd": false,
		"abcd-": false, "ab_cd": false, "ab cd": false, "": false,
	} {
		if got := provision.ValidEmbedTenantName(name); got != want {
			t.Errorf("ValidEmbedTenantName(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestOneWrite checks which requests Apply may run without a transaction
// of their own: those that write at most one thing.
func TestOneWrite(t *testing.T) {
	known := store.EmbedTenant{ID: 5, AccountID: 1, Name: "tenant-one"}
	sess := &store.NewSession{Hash: []byte("h")}
	for _, tc := range []struct {
		name string
		r    provision.Request
		want bool
	}{
		{"external user", provision.Request{ExternalID: "u"}, true},
		{"external user with a session", provision.Request{ExternalID: "u", Session: sess}, true},
		{"internal user (a read)", provision.Request{InternalID: "a@x.test"}, true},
		{"internal user with a session (a read, then a write)", provision.Request{InternalID: "a@x.test", Session: sess}, false},
		{"group definitions", provision.Request{ExternalID: "u", GroupDefinitions: []store.GroupDef{{Name: "g"}}}, false},
		{"attribute definitions", provision.Request{ExternalID: "u", AttributeDefinitions: []store.AttributeDef{{Name: "a", Type: store.TypeString}}}, false},
		{"creator mode, embed tenant unknown", provision.Request{ExternalID: "u", CreatorMode: true}, false},
		{"named embed tenant unknown", provision.Request{ExternalID: "u", EmbedTenantName: "tenant-one"}, false},
		{"named embed tenant known", provision.Request{ExternalID: "u", EmbedTenantName: "tenant-one", KnownEmbedTenant: known}, true},
		{"another embed tenant known", provision.Request{ExternalID: "u", EmbedTenantName: "tenant-two", KnownEmbedTenant: known}, false},
		{"creator mode, default embed tenant known", provision.Request{ExternalID: "u", CreatorMode: true,
			KnownEmbedTenant: store.EmbedTenant{ID: 6, AccountID: 1, Name: store.DefaultEmbedTenant}}, true},
	} {
		if got := tc.r.OneWrite(); got != tc.want {
			t.Errorf("%s: OneWrite = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestHolds: a request holds only when every attribute value (whatever
// its JSON's spacing) and membership it sends is the user's already; a
// value it clears (even an absent one: its definition must be checked), a
// group more or less or a conversion to persistent is a change, and a
// request that sends a profile field or security context (even the stored
// one), defines, names an embed tenant or deployment, or stores a session
// never holds.
func TestHolds(t *testing.T) {
	u := store.User{ExternalID: "jane", Email: "j@x.test", Ephemeral: true, SecurityContext: json.RawMessage(`{"t":1}`)}
	d := store.UserData{
		Attributes: []store.UserAttribute{
			{Name: "country", Type: store.TypeString, Value: json.RawMessage(`"DE"`)},
			{Name: "ids", Type: store.TypeNumberArray, Value: json.RawMessage(`[1, 2]`)},
		},
		Groups: []store.Group{{Name: "sales"}, {Name: "Marketing"}}, // a collation's order
	}
	attr := func(name, v string) provision.AttributeInput {
		return provision.AttributeInput{Name: name, Value: json.RawMessage(v)}
	}
	base := func() provision.Request { return provision.Request{ExternalID: "jane"} }
	with := func(f func(*provision.Request)) provision.Request { r := base(); f(&r); return r }
	cases := []struct {
		name string
		req  provision.Request
		want bool
	}{
		{"nothing sent", base(), true},
		{"same values", with(func(r *provision.Request) {
			r.Attributes = []provision.AttributeInput{attr("country", `"DE"`), attr("ids", `[1,2]`)}
			r.Groups, r.GroupsSent = []string{"sales", "Marketing", "sales"}, true
		}), true},
		{"the stored email", with(func(r *provision.Request) { r.Email = str("j@x.test") }), false},
		{"the stored security context", with(func(r *provision.Request) { r.SecurityContext = json.RawMessage(`{"t":1}`) }), false},
		{"other value", with(func(r *provision.Request) { r.Attributes = []provision.AttributeInput{attr("country", `"FR"`)} }), false},
		{"number written otherwise", with(func(r *provision.Request) { r.Attributes = []provision.AttributeInput{attr("ids", `[1.0,2]`)} }), false},
		{"new attribute", with(func(r *provision.Request) { r.Attributes = []provision.AttributeInput{attr("region", `"EU"`)} }), false},
		{"clears a value", with(func(r *provision.Request) { r.Attributes = []provision.AttributeInput{attr("country", `null`)} }), false},
		{"clears an absent value", with(func(r *provision.Request) { r.Attributes = []provision.AttributeInput{attr("region", `null`)} }), false},
		{"one group less", with(func(r *provision.Request) { r.Groups, r.GroupsSent = []string{"sales"}, true }), false},
		{"no groups", with(func(r *provision.Request) { r.Groups, r.GroupsSent = []string{}, true }), false},
		{"one group more", with(func(r *provision.Request) {
			r.Groups, r.GroupsSent = []string{"sales", "Marketing", "ops"}, true
		}), false},
		{"other email", with(func(r *provision.Request) { r.Email = str("k@x.test") }), false},
		{"display name", with(func(r *provision.Request) { r.DisplayName = str("Jane") }), false},
		{"other security context", with(func(r *provision.Request) { r.SecurityContext = json.RawMessage(`{"t":2}`) }), false},
		{"null security context", with(func(r *provision.Request) { r.SecurityContext = json.RawMessage(`null`) }), false},
		{"made persistent", with(func(r *provision.Request) { r.Persistent = true }), false},
		{"creator mode", with(func(r *provision.Request) { r.CreatorMode = true }), false},
		{"embed tenant", with(func(r *provision.Request) { r.EmbedTenantName = "t" }), false},
		{"deployment", with(func(r *provision.Request) { r.DeploymentID = 1 }), false},
		{"definitions", with(func(r *provision.Request) { r.GroupDefinitions = []store.GroupDef{{Name: "sales"}} }), false},
		{"session", with(func(r *provision.Request) { r.Session = &store.NewSession{} }), false},
		{"internal user", provision.Request{InternalID: "alice"}, false},
	}
	for _, c := range cases {
		if got := c.req.Holds(u, d); got != c.want {
			t.Errorf("%s: Holds = %v, want %v", c.name, got, c.want)
		}
	}
	if r := with(func(r *provision.Request) { r.Persistent = true }); !r.Holds(store.User{ExternalID: "jane"}, d) {
		t.Error("persistent request of a persistent user: Holds = false, want true")
	}
}
