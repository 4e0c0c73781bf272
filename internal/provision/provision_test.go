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
		{"externalId too long", provision.Request{ExternalID: strings.Repeat("a", 256)}, "at most 255"},
		{"internal with groups", provision.Request{InternalID: "a", GroupsSent: true}, "groups is not allowed"},
		{"internal with profile", provision.Request{InternalID: "a", Picture: str("https://x")}, "userProfile is not allowed"},
		{"picture must be http(s)", ok(provision.Request{Picture: str("data:image/png;base64,AA")}), "picture"},
		{"empty picture clears", ok(provision.Request{Picture: str("")}), ""},
		{"bad tenant name", ok(provision.Request{EmbedTenantName: "ab"}), "embedTenantName"},
		{"attribute without value", ok(provision.Request{Attributes: []provision.AttributeInput{{Name: "a"}}}), "value is required"},
		{"attribute null", ok(provision.Request{Attributes: []provision.AttributeInput{{Name: "a", Value: json.RawMessage("null")}}}), ""},
		{"attribute bool", ok(provision.Request{Attributes: []provision.AttributeInput{{Name: "a", Value: json.RawMessage("true")}}}), "value must be"},
		{"duplicate attribute", ok(provision.Request{Attributes: []provision.AttributeInput{{Name: "a", Value: json.RawMessage("1")}, {Name: "a", Value: json.RawMessage("2")}}}), "duplicate"},
		{"definitions need creatorMode", ok(provision.Request{EmbedTenantName: "tenant", GroupDefinitions: []store.GroupDef{{Name: "g"}}}), "creatorMode"},
		{"definitions need tenant", ok(provision.Request{CreatorMode: true, GroupDefinitions: []store.GroupDef{{Name: "g"}}}), "embedTenantName"},
		{"definition type", ok(provision.Request{CreatorMode: true, EmbedTenantName: "tenant", AttributeDefinitions: []store.AttributeDef{{Name: "a", Type: "x"}}}), "type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.req.Validate("")
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
			if err := c.req.Validate("sessionSettings."); err == nil || !strings.Contains(err.Error(), "sessionSettings.") {
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
