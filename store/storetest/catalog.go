package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/embedkit/embedkit/store"
)

var catalogRules = []rule{
	{
		name: "empty strings clear attribute fields, never group descriptions",
		doc:  "A non-nil empty DisplayName, DefaultValue or Description is a value and clears the attribute's field; an empty group Description leaves the stored one.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			s := f.scope()
			mustNil(t, "UpsertGroups", st.UpsertGroups(ctx(t), s, []store.GroupDef{{Name: "g", Description: ptr("kept")}}))
			mustNil(t, "UpsertAttributes", st.UpsertAttributes(ctx(t), s, []store.AttributeDef{
				{Name: "a", Type: store.TypeString, DisplayName: ptr("A"), DefaultValue: ptr("x"), Description: ptr("d")}}))
			mustNil(t, "UpsertGroups empty", st.UpsertGroups(ctx(t), s, []store.GroupDef{{Name: "g", Description: ptr("")}}))
			mustNil(t, "UpsertAttributes empty", st.UpsertAttributes(ctx(t), s, []store.AttributeDef{
				{Name: "a", Type: store.TypeString, DisplayName: ptr(""), DefaultValue: ptr(""), Description: ptr("")}}))
			gs, err := st.GroupsByName(ctx(t), s, []string{"g"})
			mustNil(t, "GroupsByName", err)
			if len(gs) != 1 || gs[0].Description != "kept" {
				t.Errorf("group = %+v, want description kept", gs)
			}
			as, err := st.AttributesByName(ctx(t), s, []string{"a"})
			mustNil(t, "AttributesByName", err)
			if len(as) != 1 || as[0].DisplayName != "" || as[0].DefaultValue != "" || as[0].Description != "" {
				t.Errorf("attribute = %+v, want its optional fields cleared", as)
			}
			// An empty string over a field that was never set changes
			// nothing visible, so UpdatedAt stays.
			mustNil(t, "UpsertAttributes bare", st.UpsertAttributes(ctx(t), s, []store.AttributeDef{{Name: "b", Type: store.TypeString}}))
			before, err := st.AttributesByName(ctx(t), s, []string{"b"})
			mustNil(t, "AttributesByName b", err)
			time.Sleep(2 * time.Millisecond) // UpdatedAt has a finer resolution on every adapter
			mustNil(t, "UpsertAttributes empty over unset", st.UpsertAttributes(ctx(t), s, []store.AttributeDef{
				{Name: "b", Type: store.TypeString, DisplayName: ptr(""), DefaultValue: ptr(""), Description: ptr("")}}))
			after, err := st.AttributesByName(ctx(t), s, []string{"b"})
			mustNil(t, "AttributesByName b again", err)
			if !after[0].UpdatedAt.Equal(before[0].UpdatedAt) {
				t.Errorf("UpdatedAt moved from %v to %v though nothing visible changed", before[0].UpdatedAt, after[0].UpdatedAt)
			}
		},
	},
	{
		name: "EnsureEmbedTenant creates once per account",
		doc:  "An embed tenant is created on first use and returned unchanged afterwards; EmbedTenantByName of a missing name, or of another account, is ErrNotFound.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			other := newFixture(t, st, "other")
			_, err := st.EmbedTenantByName(ctx(t), f.account.ID, "tenant-one")
			wantErr(t, "before creation", err, store.ErrNotFound)
			a, err := st.EnsureEmbedTenant(ctx(t), f.account.ID, "tenant-one")
			mustNil(t, "EnsureEmbedTenant", err)
			b, err := st.EnsureEmbedTenant(ctx(t), f.account.ID, "tenant-one")
			mustNil(t, "EnsureEmbedTenant again", err)
			if a.ID == 0 || a.ID != b.ID || a.Name != "tenant-one" || a.AccountID != f.account.ID {
				t.Errorf("tenants %+v %+v", a, b)
			}
			got, err := st.EmbedTenantByName(ctx(t), f.account.ID, "tenant-one")
			mustNil(t, "EmbedTenantByName", err)
			if got.ID != a.ID {
				t.Errorf("EmbedTenantByName ID = %d, want %d", got.ID, a.ID)
			}
			_, err = st.EmbedTenantByName(ctx(t), other.account.ID, "tenant-one")
			wantErr(t, "other account", err, store.ErrNotFound)
			c, err := st.EnsureEmbedTenant(ctx(t), other.account.ID, "tenant-one")
			mustNil(t, "EnsureEmbedTenant other", err)
			if c.ID == a.ID {
				t.Error("two accounts share an embed tenant")
			}
		},
	},
	{
		name: "UpsertGroups reuses by name and never clears descriptions",
		doc:  "groupDefinitions: existing names are reused (same ID); a supplied, different description replaces the stored one; a nil or empty one keeps it; running twice gives the same state.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			s := f.scope()
			mustNil(t, "UpsertGroups", st.UpsertGroups(ctx(t), s, []store.GroupDef{{Name: "sales", Description: ptr("Sales team")}, {Name: "ops"}}))
			first, err := st.GroupsByName(ctx(t), s, []string{"sales", "ops"})
			mustNil(t, "GroupsByName", err)
			byName := map[string]store.Group{}
			for _, g := range first {
				byName[g.Name] = g
			}
			if byName["sales"].Description != "Sales team" || byName["ops"].Description != "" || len(byName) != 2 {
				t.Fatalf("groups = %+v", first)
			}
			mustNil(t, "UpsertGroups keep", st.UpsertGroups(ctx(t), s, []store.GroupDef{{Name: "sales"}, {Name: "ops", Description: ptr("")}}))
			mustNil(t, "UpsertGroups twice", st.UpsertGroups(ctx(t), s, []store.GroupDef{{Name: "sales"}, {Name: "ops", Description: ptr("")}}))
			mustNil(t, "UpsertGroups update", st.UpsertGroups(ctx(t), s, []store.GroupDef{{Name: "ops", Description: ptr("Operations")}, {Name: "new"}}))
			all, err := st.ListGroups(ctx(t), s, 0, 100)
			mustNil(t, "ListGroups", err)
			if len(all) != 3 {
				t.Fatalf("ListGroups = %v, want 3 groups", groupNames(all))
			}
			for _, g := range all {
				switch g.Name {
				case "sales":
					if g.ID != byName["sales"].ID || g.Description != "Sales team" {
						t.Errorf("sales = %+v", g)
					}
				case "ops":
					if g.ID != byName["ops"].ID || g.Description != "Operations" {
						t.Errorf("ops = %+v", g)
					}
				}
				if g.Scope != s {
					t.Errorf("group %s scope = %+v, want %+v", g.Name, g.Scope, s)
				}
			}
			mustNil(t, "UpsertGroups none", st.UpsertGroups(ctx(t), s, nil))
		},
	},
	{
		name: "UpsertAttributes keeps the type and nil fields",
		doc:  "userAttributeDefinitions: existing names are reused; the type is never changed by an upsert; nil optional fields keep the stored values; supplied ones overwrite.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			s := f.scope()
			mustNil(t, "UpsertAttributes", st.UpsertAttributes(ctx(t), s, []store.AttributeDef{
				{Name: "country", Type: store.TypeString, DisplayName: ptr("Country"), DefaultValue: ptr("DE"), Description: ptr("ISO code")},
				{Name: "region_ids", Type: store.TypeNumberArray},
			}))
			before, err := st.AttributesByName(ctx(t), s, []string{"country"})
			mustNil(t, "AttributesByName", err)
			mustNil(t, "UpsertAttributes again", st.UpsertAttributes(ctx(t), s, []store.AttributeDef{
				{Name: "country", Type: store.TypeNumber, DefaultValue: ptr("FR")},
				{Name: "region_ids", Type: store.TypeNumberArray, DisplayName: ptr("Regions")},
			}))
			got, err := st.AttributesByName(ctx(t), s, []string{"country", "region_ids", "missing"})
			mustNil(t, "AttributesByName", err)
			if len(got) != 2 {
				t.Fatalf("AttributesByName = %v, want 2", attrNames(got))
			}
			for _, a := range got {
				switch a.Name {
				case "country":
					if a.ID != before[0].ID || a.Type != store.TypeString || a.DisplayName != "Country" || a.DefaultValue != "FR" || a.Description != "ISO code" {
						t.Errorf("country = %+v", a)
					}
				case "region_ids":
					if a.Type != store.TypeNumberArray || a.DisplayName != "Regions" || a.DefaultValue != "" {
						t.Errorf("region_ids = %+v", a)
					}
				}
				if a.Scope != s || a.CreatedAt.IsZero() || a.UpdatedAt.IsZero() {
					t.Errorf("attribute %s scope/times = %+v", a.Name, a)
				}
			}
		},
	},
	{
		name: "catalog scopes are separate",
		doc:  "Creator-mode rule 4: groups and attributes of an embed tenant are separate from the tenant-wide ones and from other embed tenants, even with equal names.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			e1, err := st.EnsureEmbedTenant(ctx(t), f.account.ID, "tenant-one")
			mustNil(t, "EnsureEmbedTenant", err)
			e2, err := st.EnsureEmbedTenant(ctx(t), f.account.ID, "tenant-two")
			mustNil(t, "EnsureEmbedTenant", err)
			other := newFixture(t, st, "other")
			scopes := []store.Scope{f.scope(), {AccountID: f.account.ID, EmbedTenantID: e1.ID}, {AccountID: f.account.ID, EmbedTenantID: e2.ID}, other.scope()}
			ids := map[int64]bool{}
			for i, s := range scopes {
				g := f.groups(t, st, s, "sales")
				a := f.attrs(t, st, s, "country")
				if ids[g[0].ID] || ids[-a[0].ID] {
					t.Fatalf("scope %d reuses an id of another scope", i)
				}
				ids[g[0].ID], ids[-a[0].ID] = true, true
			}
			mustNil(t, "UpsertGroups", st.UpsertGroups(ctx(t), scopes[1], []store.GroupDef{{Name: "only-one"}}))
			for i, s := range scopes {
				gs, err := st.GroupsByName(ctx(t), s, []string{"sales", "only-one"})
				mustNil(t, "GroupsByName", err)
				want := 1
				if i == 1 {
					want = 2
				}
				if len(gs) != want {
					t.Errorf("scope %d has groups %v, want %d", i, groupNames(gs), want)
				}
				list, err := st.ListGroups(ctx(t), s, 0, 10)
				mustNil(t, "ListGroups", err)
				if len(list) != want {
					t.Errorf("scope %d lists %v, want %d", i, groupNames(list), want)
				}
				as, err := st.ListAttributes(ctx(t), s, 0, 10)
				mustNil(t, "ListAttributes", err)
				if len(as) != 1 || as[0].Scope != s {
					t.Errorf("scope %d lists attributes %+v", i, as)
				}
			}
		},
	},
	{
		name: "ByName lookups return only existing names",
		doc:  "GroupsByName and AttributesByName return the rows whose names exist, in one call whatever the number of names; no names gives none.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			f.groups(t, st, f.scope(), "a", "b")
			f.attrs(t, st, f.scope(), "x")
			gs, err := st.GroupsByName(ctx(t), f.scope(), []string{"b", "zz", "a"})
			mustNil(t, "GroupsByName", err)
			got := groupNames(gs)
			slices.Sort(got)
			if !slices.Equal(got, []string{"a", "b"}) {
				t.Errorf("GroupsByName = %v", got)
			}
			gs, err = st.GroupsByName(ctx(t), f.scope(), nil)
			mustNil(t, "GroupsByName none", err)
			if len(gs) != 0 {
				t.Errorf("GroupsByName(nil) = %v", groupNames(gs))
			}
			as, err := st.AttributesByName(ctx(t), f.scope(), []string{"y"})
			mustNil(t, "AttributesByName", err)
			if len(as) != 0 {
				t.Errorf("AttributesByName(y) = %v", attrNames(as))
			}
		},
	},
	{
		name: "keyset listing pages in ID order",
		doc:  "ListGroups and ListAttributes return at most limit rows with ID > afterID in increasing ID order; walking the pages yields every row exactly once.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			s := f.scope()
			var gdefs []store.GroupDef
			var adefs []store.AttributeDef
			for i := range 23 {
				// Names in an order unlike the IDs, so order by name would fail.
				n := fmt.Sprintf("n%02d", (i*7)%23)
				gdefs = append(gdefs, store.GroupDef{Name: n})
				adefs = append(adefs, store.AttributeDef{Name: n, Type: store.TypeString})
			}
			mustNil(t, "UpsertGroups", st.UpsertGroups(ctx(t), s, gdefs))
			mustNil(t, "UpsertAttributes", st.UpsertAttributes(ctx(t), s, adefs))
			var gids, aids []int64
			for after := int64(0); ; {
				page, err := st.ListGroups(ctx(t), s, after, 5)
				mustNil(t, "ListGroups", err)
				if len(page) > 5 {
					t.Fatalf("page of %d, limit 5", len(page))
				}
				if len(page) == 0 {
					break
				}
				for _, g := range page {
					gids = append(gids, g.ID)
				}
				after = page[len(page)-1].ID
			}
			for after := int64(0); ; {
				page, err := st.ListAttributes(ctx(t), s, after, 4)
				mustNil(t, "ListAttributes", err)
				if len(page) == 0 {
					break
				}
				for _, a := range page {
					aids = append(aids, a.ID)
				}
				after = page[len(page)-1].ID
			}
			for _, ids := range [][]int64{gids, aids} {
				if len(ids) != 23 || !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != 23 {
					t.Errorf("walked ids = %v, want 23 increasing distinct ids", ids)
				}
			}
		},
	},
	{
		name: "DeleteGroup and DeleteAttribute are scoped and cascade",
		doc:  "Deleting a group removes its memberships, deleting an attribute removes its values; an id of another scope, or a missing one, is ErrNotFound and deletes nothing.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			et, err := st.EnsureEmbedTenant(ctx(t), f.account.ID, "tenant-one")
			mustNil(t, "EnsureEmbedTenant", err)
			s := store.Scope{AccountID: f.account.ID, EmbedTenantID: et.ID}
			u := f.user(t, st, "u")
			gs := f.groups(t, st, s, "sales", "ops")
			as := f.attrs(t, st, s, "country", "city")
			mustNil(t, "ReplaceMemberships", st.ReplaceMemberships(ctx(t), u.ID, s, []int64{gs[0].ID, gs[1].ID}))
			mustNil(t, "SetAttributeValues", st.SetAttributeValues(ctx(t), u.ID, []store.AttributeValue{
				{AttributeID: as[0].ID, Value: json.RawMessage(`"DE"`)}, {AttributeID: as[1].ID, Value: json.RawMessage(`"Berlin"`)},
			}))
			wantErr(t, "DeleteGroup wrong scope", st.DeleteGroup(ctx(t), f.scope(), gs[0].ID), store.ErrNotFound)
			wantErr(t, "DeleteAttribute wrong scope", st.DeleteAttribute(ctx(t), f.scope(), as[0].ID), store.ErrNotFound)
			wantErr(t, "DeleteGroup missing", st.DeleteGroup(ctx(t), s, gs[1].ID+1000), store.ErrNotFound)

			mustNil(t, "DeleteGroup", st.DeleteGroup(ctx(t), s, gs[0].ID))
			mustNil(t, "DeleteAttribute", st.DeleteAttribute(ctx(t), s, as[0].ID))
			ms, err := st.Memberships(ctx(t), u.ID, s)
			mustNil(t, "Memberships", err)
			if got := groupNames(ms); !slices.Equal(got, []string{"ops"}) {
				t.Errorf("memberships after delete = %v", got)
			}
			vals, err := st.AttributeValues(ctx(t), u.ID, s)
			mustNil(t, "AttributeValues", err)
			if len(vals) != 1 || vals[0].Name != "city" {
				t.Errorf("values after delete = %+v", vals)
			}
			wantErr(t, "DeleteGroup twice", st.DeleteGroup(ctx(t), s, gs[0].ID), store.ErrNotFound)
			// The name can be defined again, with another type.
			mustNil(t, "recreate", st.UpsertAttributes(ctx(t), s, []store.AttributeDef{{Name: "country", Type: store.TypeNumber}}))
			got, err := st.AttributesByName(ctx(t), s, []string{"country"})
			mustNil(t, "AttributesByName", err)
			if len(got) != 1 || got[0].Type != store.TypeNumber {
				t.Errorf("recreated = %+v", got)
			}
		},
	},
}
