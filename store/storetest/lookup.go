package storetest

import (
	"cmp"
	"slices"
	"testing"

	"github.com/embedkit/embedkit/store"
)

var lookupRules = []rule{
	{
		name: "Lookup resolves attributes and groups of one scope",
		doc:  "Lookup returns the definitions of its scope whose names it is given, each once (names may repeat) with every field filled; names that do not exist, or exist only in another scope, are absent; either list may be empty.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			s := f.tenantScope(t, st, "tenant-cat")
			mustNil(t, "UpsertDefinitions", st.UpsertDefinitions(ctx(t), s,
				[]store.GroupDef{{Name: "sales", Description: ptr("Sales team")}, {Name: "ops"}},
				[]store.AttributeDef{{Name: "country", Type: store.TypeString, DisplayName: ptr("Country"), DefaultValue: ptr("DE"), Description: ptr("ISO")}, {Name: "level", Type: store.TypeNumber}}))
			mustNil(t, "UpsertDefinitions other scope", st.UpsertDefinitions(ctx(t), f.scope(), []store.GroupDef{{Name: "marketing"}}, []store.AttributeDef{{Name: "city", Type: store.TypeString}}))

			res, err := st.Lookup(ctx(t), store.Lookup{Scope: s,
				AttrNames: []string{"level", "country", "missing", "city", "country"}, GroupNames: []string{"sales", "marketing", "missing", "sales"}})
			mustNil(t, "Lookup", err)
			slices.SortFunc(res.Attributes, func(a, b store.Attribute) int { return cmp.Compare(a.Name, b.Name) })
			if got := attrNames(res.Attributes); !slices.Equal(got, []string{"country", "level"}) {
				t.Fatalf("attributes = %v, want [country level] (city is of another scope)", got)
			}
			c := res.Attributes[0]
			if c.ID == 0 || c.Scope != s || c.Type != store.TypeString || c.DisplayName != "Country" || c.DefaultValue != "DE" || c.Description != "ISO" || c.CreatedAt.IsZero() || c.UpdatedAt.IsZero() {
				t.Errorf("country = %+v", c)
			}
			if res.Attributes[1].Type != store.TypeNumber {
				t.Errorf("level = %+v", res.Attributes[1])
			}
			if len(res.Groups) != 1 {
				t.Fatalf("groups = %v, want [sales] (marketing is of another scope)", groupNames(res.Groups))
			}
			if g := res.Groups[0]; g.ID == 0 || g.Name != "sales" || g.Scope != s || g.Description != "Sales team" || g.CreatedAt.IsZero() {
				t.Errorf("sales = %+v", g)
			}
			res, err = st.Lookup(ctx(t), store.Lookup{Scope: s, GroupNames: []string{"ops"}})
			mustNil(t, "Lookup groups only", err)
			if len(res.Attributes) != 0 || len(res.Groups) != 1 || res.Groups[0].Name != "ops" || res.DeploymentFound {
				t.Errorf("groups only: %+v", res)
			}
			err = st.InTx(ctx(t), func(tx store.Tx) error {
				res, err = tx.Lookup(ctx(t), store.Lookup{Scope: s, AttrNames: []string{"level"}})
				return err
			})
			mustNil(t, "Lookup in a transaction", err)
			if len(res.Attributes) != 1 || res.Attributes[0].Type != store.TypeNumber || len(res.Groups) != 0 {
				t.Errorf("attributes only: %+v", res)
			}
			res, err = st.Lookup(ctx(t), store.Lookup{Scope: s})
			mustNil(t, "empty Lookup", err)
			if len(res.Attributes)+len(res.Groups) != 0 || res.DeploymentFound {
				t.Errorf("empty Lookup = %+v", res)
			}
		},
	},
	{
		name: "Lookup finds a deployment of the account",
		doc:  "With a DeploymentID, Lookup returns that deployment of the scope's account with DeploymentFound true (from any scope of the account), and DeploymentFound false for a missing one or one of another account; the definitions are resolved alongside.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			other := newFixture(t, st, "other")
			mustNil(t, "SaveDeployment", st.SaveDeployment(ctx(t), store.Deployment{AccountID: other.account.ID, ID: 2, Name: "theirs"}))
			f.groups(t, st, f.scope(), "sales")
			res, err := st.Lookup(ctx(t), store.Lookup{Scope: f.scope(), DeploymentID: 1, GroupNames: []string{"sales"}})
			mustNil(t, "Lookup", err)
			if !res.DeploymentFound || res.Deployment != f.deploy || len(res.Groups) != 1 {
				t.Errorf("Lookup = %+v, want deployment %+v and the group", res, f.deploy)
			}
			res, err = st.Lookup(ctx(t), store.Lookup{Scope: f.tenantScope(t, st, "tenant-one"), DeploymentID: 1})
			mustNil(t, "Lookup from an embed tenant", err)
			if !res.DeploymentFound || res.Deployment != f.deploy {
				t.Errorf("Lookup from an embed tenant = %+v", res)
			}
			for _, id := range []int64{2, 3} {
				res, err = st.Lookup(ctx(t), store.Lookup{Scope: f.scope(), DeploymentID: id})
				mustNil(t, "Lookup", err)
				if res.DeploymentFound {
					t.Errorf("deployment %d found: %+v", id, res)
				}
			}
		},
	},
	{
		name: "Lookup finds an embed tenant by name, and names in its scope",
		doc:  "With EmbedTenantName, Lookup returns that embed tenant of the scope's account (EmbedTenantFound; false for a missing one or one of another account) with the definitions of Scope; with InEmbedTenant too, the definitions are those of the tenant's scope, and none when the tenant does not exist; the deployment is resolved alongside.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			other := newFixture(t, st, "other")
			ts := f.tenantScope(t, st, "tenant-one")
			other.tenantScope(t, st, "theirs")
			f.groups(t, st, f.scope(), "sales")
			f.groups(t, st, ts, "sales", "ops")
			want, err := st.EmbedTenantByName(ctx(t), f.account.ID, "tenant-one")
			mustNil(t, "EmbedTenantByName", err)
			res, err := st.Lookup(ctx(t), store.Lookup{Scope: f.scope(), DeploymentID: 1, EmbedTenantName: "tenant-one", GroupNames: []string{"sales", "ops"}})
			mustNil(t, "Lookup", err)
			if !res.EmbedTenantFound || res.EmbedTenant.ID != want.ID || res.EmbedTenant.Name != "tenant-one" || res.EmbedTenant.AccountID != f.account.ID || !res.EmbedTenant.CreatedAt.Equal(want.CreatedAt) {
				t.Errorf("embed tenant = %+v (found %v), want %+v", res.EmbedTenant, res.EmbedTenantFound, want)
			}
			if !res.DeploymentFound || len(res.Groups) != 1 || res.Groups[0].Scope != f.scope() {
				t.Errorf("Lookup = %+v, want the deployment and the account's sales", res)
			}
			res, err = st.Lookup(ctx(t), store.Lookup{Scope: f.scope(), EmbedTenantName: "tenant-one", InEmbedTenant: true, GroupNames: []string{"sales", "ops"}})
			mustNil(t, "Lookup in the tenant", err)
			slices.SortFunc(res.Groups, func(a, b store.Group) int { return cmp.Compare(a.Name, b.Name) })
			if !res.EmbedTenantFound || len(res.Groups) != 2 || res.Groups[0].Scope != ts || res.Groups[1].Scope != ts {
				t.Errorf("Lookup in the tenant = %+v, want its ops and sales", res)
			}
			for _, name := range []string{"missing", "theirs"} {
				res, err = st.Lookup(ctx(t), store.Lookup{Scope: f.scope(), DeploymentID: 1, EmbedTenantName: name, InEmbedTenant: true, GroupNames: []string{"sales"}})
				mustNil(t, "Lookup of a missing tenant", err)
				if res.EmbedTenantFound || len(res.Groups) != 0 || !res.DeploymentFound {
					t.Errorf("Lookup of tenant %q = %+v, want none of it, no group, the deployment", name, res)
				}
			}
		},
	},
}
