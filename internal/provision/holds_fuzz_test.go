package provision_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/embedkit/embedkit/internal/provision"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/memstore"
)

// FuzzHolds: whatever a returning user holds and whatever a request sends,
// a request that Holds is one that Apply accepts and that changes nothing
// the user holds (its profile, attribute values and groups), so skipping
// it is safe. Each input is a user's first request and a second one, as
// userAttributes JSON and comma-separated groups ("-" for none sent).
func FuzzHolds(f *testing.F) {
	f.Add(`[{"name":"country","value":"DE"}]`, "sales", `[{"name":"country","value":"DE"}]`, "sales")
	f.Add(`[{"name":"ids","value":[1,2]}]`, "sales,ops", `[{"name":"ids","value":[1, 2.0]}]`, "ops,sales,sales")
	f.Add(`[{"name":"n","value":1e2}]`, "-", `[{"name":"n","value":100}]`, "")
	f.Add(`[{"name":"tags","value":["a","b"]}]`, "", `[{"name":"tags","value":null}]`, "-")
	f.Add(`[{"name":"country","value":"\u00e9<"}]`, "-", `[{"name":"country","value":"é\u003c"},{"name":"nope","value":"x"}]`, "marketing")
	f.Fuzz(func(t *testing.T, attrs0, groups0, attrs1, groups1 string) {
		ctx := context.Background()
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		st := memstore.New()
		defer st.Close()
		acct, err := st.SaveAccount(ctx, store.Account{Name: "acme", Plan: store.PlanEnterprise})
		if err != nil {
			t.Fatal(err)
		}
		scope := store.TenantWide(acct.ID)
		if err := st.UpsertDefinitions(ctx, scope, []store.GroupDef{{Name: "sales"}, {Name: "marketing"}, {Name: "ops"}},
			[]store.AttributeDef{{Name: "country", Type: store.TypeString}, {Name: "ids", Type: store.TypeNumberArray},
				{Name: "tags", Type: store.TypeStringArray}, {Name: "n", Type: store.TypeNumber}}); err != nil {
			t.Fatal(err)
		}
		r0, ok0 := fuzzRequest(attrs0, groups0, now)
		r1, ok1 := fuzzRequest(attrs1, groups1, now)
		if !ok0 || !ok1 {
			return
		}
		if _, err := provision.Run(ctx, st, acct, r0, now); err != nil {
			return // a first request the rules refuse: no user to return to
		}
		held := func() (store.User, store.UserData) {
			u, err := st.UserByKey(ctx, store.UserKey{AccountID: acct.ID, ExternalID: "jane"}, now)
			if err != nil {
				t.Fatal(err)
			}
			d, err := st.UserData(ctx, u.ID, scope)
			if err != nil {
				t.Fatal(err)
			}
			u.UpdatedAt = time.Time{}
			return u, d
		}
		u, d := held()
		if !r1.Holds(u, d) {
			return
		}
		if _, err := provision.Run(ctx, st, acct, r1, now.Add(time.Second)); err != nil {
			t.Fatalf("Holds, yet Apply refuses: %v", err)
		}
		u2, d2 := held()
		if !reflect.DeepEqual(u, u2) || !reflect.DeepEqual(d, d2) {
			t.Fatalf("Holds, yet Apply changes the user:\n%+v %+v\n%+v %+v", u, d, u2, d2)
		}
	})
}

// fuzzRequest is a chat's sessionSettings request for the external user
// jane, as validated before provisioning; ok is false for one the rules
// refuse before reading the store.
func fuzzRequest(attrs, groups string, now time.Time) (provision.Request, bool) {
	r := provision.Request{ExternalID: "jane", EphemeralExpiresAt: now.Add(time.Hour)}
	if attrs != "" {
		var in []struct {
			Name  string          `json:"name"`
			Value json.RawMessage `json:"value"`
		}
		if json.Unmarshal([]byte(attrs), &in) != nil {
			return r, false
		}
		r.Attributes = []provision.AttributeInput{}
		for _, a := range in {
			r.Attributes = append(r.Attributes, provision.AttributeInput{Name: a.Name, Value: a.Value})
		}
	}
	if groups != "-" {
		r.GroupsSent, r.Groups = true, []string{}
		if groups != "" {
			r.Groups = strings.Split(groups, ",")
		}
	}
	r.Fields = "sessionSettings."
	return r, r.Validate() == nil
}
