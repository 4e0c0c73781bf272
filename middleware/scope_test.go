package middleware_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/memstore"
)

// A creator-mode session reads the embed tenant's attributes and groups,
// any other session the account-wide ones.
func TestAttributesAndGroups(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	acct, err := st.SaveAccount(ctx, store.Account{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	tenant, err := st.EnsureEmbedTenant(ctx, acct.ID, "t1", 0)
	if err != nil {
		t.Fatal(err)
	}
	var u store.User
	wide, scoped := store.TenantWide(acct.ID), store.Scope{AccountID: acct.ID, EmbedTenantID: tenant.ID}
	for sc, country := range map[store.Scope]string{wide: `"DE"`, scoped: `"FR"`} {
		grp := "g" + country[1:3]
		if err := st.UpsertDefinitions(ctx, sc, []store.GroupDef{{Name: grp}}, []store.AttributeDef{{Name: "country", Type: store.TypeString}}); err != nil {
			t.Fatal(err)
		}
		found, err := st.Lookup(ctx, store.Lookup{Scope: sc, AttrNames: []string{"country"}, GroupNames: []string{grp}})
		if err != nil || len(found.Attributes) != 1 || len(found.Groups) != 1 {
			t.Fatalf("lookup in %+v: %+v, %v", sc, found, err)
		}
		u, err = st.UpsertUser(ctx, store.UserUpsert{
			UserKey:    store.UserKey{AccountID: acct.ID, ExternalID: "jane"},
			Attributes: []store.AttributeValue{{AttributeID: found.Attributes[0].ID, Value: json.RawMessage(country)}},
			SetGroups:  true, GroupScope: sc, Groups: []int64{found.Groups[0].ID},
			Persistent: true, Now: time.Now(),
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		creator      bool
		country, grp string
	}{{false, `"DE"`, "gDE"}, {true, `"FR"`, "gFR"}} {
		es := middleware.EmbedSession{User: u, Session: store.Session{AccountID: acct.ID, UserID: u.ID, EmbedTenantID: tenant.ID, CreatorMode: c.creator}}
		attrs, groups, err := es.AttributesAndGroups(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		if len(attrs) != 1 || string(attrs[0].Value) != c.country || len(groups) != 1 || groups[0].Name != c.grp {
			t.Errorf("creatorMode %v: attributes %+v, groups %+v; want country %s, group %s", c.creator, attrs, groups, c.country, c.grp)
		}
	}
}
