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
			mustNil(t, "UpsertDefinitions", st.UpsertDefinitions(ctx(t), s, []store.GroupDef{{Name: "g", Description: ptr("kept")}}, []store.AttributeDef{
				{Name: "a", Type: store.TypeString, DisplayName: ptr("A"), DefaultValue: ptr("x"), Description: ptr("d")}}))
			mustNil(t, "UpsertDefinitions empty", st.UpsertDefinitions(ctx(t), s, []store.GroupDef{{Name: "g", Description: ptr("")}}, []store.AttributeDef{
				{Name: "a", Type: store.TypeString, DisplayName: ptr(""), DefaultValue: ptr(""), Description: ptr("")}}))
			gs := lookupGroups(t, st, s, "g")
			if len(gs) != 1 || gs[0].Description != "kept" {
				t.Errorf("group = %+v, want description kept", gs)
			}
			as := lookupAttrs(t, st, s, "a")
			if len(as) != 1 || as[0].DisplayName != "" || as[0].DefaultValue != "" || as[0].Description != "" {
				t.Errorf("attribute = %+v, want its optional fields cleared", as)
			}
			// An empty string over a field that was never set changes
			// nothing visible, so UpdatedAt stays.
			mustNil(t, "UpsertDefinitions bare", st.UpsertDefinitions(ctx(t), s, nil, []store.AttributeDef{{Name: "b", Type: store.TypeString}}))
			before := lookupAttrs(t, st, s, "b")
			time.Sleep(2 * time.Millisecond) // UpdatedAt has a finer resolution on every adapter
			mustNil(t, "UpsertDefinitions empty over unset", st.UpsertDefinitions(ctx(t), s, nil, []store.AttributeDef{
				{Name: "b", Type: store.TypeString, DisplayName: ptr(""), DefaultValue: ptr(""), Description: ptr("")}}))
			after := lookupAttrs(t, st, s, "b")
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
			a, err := st.EnsureEmbedTenant(ctx(t), f.account.ID, "tenant-one", 0)
			mustNil(t, "EnsureEmbedTenant", err)
			b, err := st.EnsureEmbedTenant(ctx(t), f.account.ID, "tenant-one", 0)
			mustNil(t, "EnsureEmbedTenant again", err)
			if a.ID == 0 || a.ID != b.ID || a.Name != "tenant-one" || a.AccountID != f.account.ID || !a.CreatedAt.Equal(b.CreatedAt) {
				t.Errorf("tenants %+v %+v", a, b)
			}
			got, err := st.EmbedTenantByName(ctx(t), f.account.ID, "tenant-one")
			mustNil(t, "EmbedTenantByName", err)
			if got.ID != a.ID {
				t.Errorf("EmbedTenantByName ID = %d, want %d", got.ID, a.ID)
			}
			_, err = st.EmbedTenantByName(ctx(t), other.account.ID, "tenant-one")
			wantErr(t, "other account", err, store.ErrNotFound)
			c, err := st.EnsureEmbedTenant(ctx(t), other.account.ID, "tenant-one", 0)
			mustNil(t, "EnsureEmbedTenant other", err)
			if c.ID == a.ID {
				t.Error("two accounts share an embed tenant")
			}
		},
	},
	{
		name: "EnsureEmbedTenant's max is exact and per account",
		doc:  "With max N an account gets N embed tenants and creating one more is ErrLimit and creates nothing; an existing tenant is returned whatever the count (even over a lower max); max 0 or less means no limit; other accounts count apart.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			other := newFixture(t, st, "other")
			for _, n := range []string{"t1", "t2"} {
				_, err := st.EnsureEmbedTenant(ctx(t), f.account.ID, n, 2)
				mustNil(t, "EnsureEmbedTenant "+n, err)
			}
			_, err := st.EnsureEmbedTenant(ctx(t), f.account.ID, "t3", 2)
			wantErr(t, "third tenant with max 2", err, store.ErrLimit)
			_, err = st.EmbedTenantByName(ctx(t), f.account.ID, "t3")
			wantErr(t, "refused tenant", err, store.ErrNotFound)
			for _, max := range []int{2, 1} {
				et, err := st.EnsureEmbedTenant(ctx(t), f.account.ID, "t1", max)
				mustNil(t, fmt.Sprint("existing tenant with max ", max), err)
				if et.Name != "t1" {
					t.Errorf("existing tenant = %+v", et)
				}
			}
			_, err = st.EnsureEmbedTenant(ctx(t), other.account.ID, "t3", 1)
			mustNil(t, "another account's first tenant", err)
			for _, max := range []int{0, -1} {
				_, err = st.EnsureEmbedTenant(ctx(t), f.account.ID, fmt.Sprint("free-", max), max)
				mustNil(t, fmt.Sprint("tenant with max ", max), err)
			}
			_, err = st.EnsureEmbedTenant(ctx(t), f.account.ID, "t5", 5)
			mustNil(t, "fifth tenant with max 5", err)
			_, err = st.EnsureEmbedTenant(ctx(t), f.account.ID, "t6", 5)
			wantErr(t, "sixth tenant with max 5", err, store.ErrLimit)
		},
	},
	{
		name: "UpsertDefinitions reuses groups by name and never clears descriptions",
		doc:  "groupDefinitions: existing names are reused (same ID); a supplied, different description replaces the stored one; a nil or empty one keeps it; running twice gives the same state.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			s := f.scope()
			groups := func(defs ...store.GroupDef) {
				t.Helper()
				mustNil(t, "UpsertDefinitions", st.UpsertDefinitions(ctx(t), s, defs, nil))
			}
			groups(store.GroupDef{Name: "sales", Description: ptr("Sales team")}, store.GroupDef{Name: "ops"})
			byName := map[string]store.Group{}
			for _, g := range lookupGroups(t, st, s, "sales", "ops") {
				byName[g.Name] = g
			}
			if byName["sales"].Description != "Sales team" || byName["ops"].Description != "" || len(byName) != 2 {
				t.Fatalf("groups = %+v", byName)
			}
			groups(store.GroupDef{Name: "sales"}, store.GroupDef{Name: "ops", Description: ptr("")})
			groups(store.GroupDef{Name: "sales"}, store.GroupDef{Name: "ops", Description: ptr("")})
			groups(store.GroupDef{Name: "ops", Description: ptr("Operations")}, store.GroupDef{Name: "new"})
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
				if g.Scope != s || g.CreatedAt.IsZero() || g.UpdatedAt.IsZero() {
					t.Errorf("group %s scope/times = %+v, want scope %+v", g.Name, g, s)
				}
			}
			mustNil(t, "UpsertDefinitions none", st.UpsertDefinitions(ctx(t), s, nil, nil))
		},
	},
	{
		name: "UpsertDefinitions keeps an attribute's type and nil fields",
		doc:  "userAttributeDefinitions: existing names are reused; the type is never changed by an upsert; nil optional fields keep the stored values; supplied ones overwrite.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			s := f.scope()
			mustNil(t, "UpsertDefinitions", st.UpsertDefinitions(ctx(t), s, nil, []store.AttributeDef{
				{Name: "country", Type: store.TypeString, DisplayName: ptr("Country"), DefaultValue: ptr("DE"), Description: ptr("ISO code")},
				{Name: "region_ids", Type: store.TypeNumberArray},
			}))
			before := lookupAttrs(t, st, s, "country")
			mustNil(t, "UpsertDefinitions again", st.UpsertDefinitions(ctx(t), s, nil, []store.AttributeDef{
				{Name: "country", Type: store.TypeNumber, DefaultValue: ptr("FR")},
				{Name: "region_ids", Type: store.TypeNumberArray, DisplayName: ptr("Regions")},
			}))
			got := lookupAttrs(t, st, s, "country", "region_ids", "missing")
			if len(got) != 2 {
				t.Fatalf("Lookup = %v, want 2", attrNames(got))
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
			other := newFixture(t, st, "other")
			scopes := []store.Scope{f.scope(), f.tenantScope(t, st, "tenant-one"), f.tenantScope(t, st, "tenant-two"), other.scope()}
			ids := map[int64]bool{}
			for i, s := range scopes {
				g := f.groups(t, st, s, "sales")
				a := f.attrs(t, st, s, "country")
				if ids[g[0].ID] || ids[-a[0].ID] {
					t.Fatalf("scope %d reuses an id of another scope", i)
				}
				ids[g[0].ID], ids[-a[0].ID] = true, true
			}
			mustNil(t, "UpsertDefinitions", st.UpsertDefinitions(ctx(t), scopes[1], []store.GroupDef{{Name: "only-one"}}, nil))
			for i, s := range scopes {
				gs := lookupGroups(t, st, s, "sales", "only-one")
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
		name: "keyset listing pages in ID order",
		doc:  "ListGroups and ListAttributes return at most limit rows with ID > afterID in increasing ID order (none for a limit of zero or less); walking the pages yields every row exactly once.",
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
			mustNil(t, "UpsertDefinitions", st.UpsertDefinitions(ctx(t), s, gdefs, adefs))
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
				if len(page) > 4 {
					t.Fatalf("page of %d, limit 4", len(page))
				}
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
			for _, limit := range []int{0, -1} {
				gs, err := st.ListGroups(ctx(t), s, 0, limit)
				mustNil(t, "ListGroups", err)
				as, err := st.ListAttributes(ctx(t), s, 0, limit)
				mustNil(t, "ListAttributes", err)
				if len(gs)+len(as) != 0 {
					t.Errorf("limit %d: %d groups and %d attributes, want none", limit, len(gs), len(as))
				}
			}
		},
	},
	{
		name: "DeleteGroup and DeleteAttribute are scoped and cascade",
		doc:  "Deleting a group removes its memberships, deleting an attribute removes its values; an id of another scope, or a missing one, is ErrNotFound and deletes nothing.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			s := f.tenantScope(t, st, "tenant-one")
			u := f.user(t, st, "u")
			gs := f.groups(t, st, s, "sales", "ops")
			as := f.attrs(t, st, s, "country", "city")
			f.member(t, st, u, s, gs[0].ID, gs[1].ID)
			f.values(t, st, u, val(as[0].ID, `"DE"`), val(as[1].ID, `"Berlin"`))
			wantErr(t, "DeleteGroup wrong scope", st.DeleteGroup(ctx(t), f.scope(), gs[0].ID), store.ErrNotFound)
			wantErr(t, "DeleteAttribute wrong scope", st.DeleteAttribute(ctx(t), f.scope(), as[0].ID), store.ErrNotFound)
			wantErr(t, "DeleteGroup missing", st.DeleteGroup(ctx(t), s, gs[1].ID+1000), store.ErrNotFound)
			wantErr(t, "DeleteAttribute missing", st.DeleteAttribute(ctx(t), s, as[1].ID+1000), store.ErrNotFound)
			if d := f.data(t, st, u.ID, s); len(d.Groups) != 2 || len(d.Attributes) != 2 {
				t.Fatalf("refused deletes changed the user's data: %+v", d)
			}

			mustNil(t, "DeleteGroup", st.DeleteGroup(ctx(t), s, gs[0].ID))
			mustNil(t, "DeleteAttribute", st.DeleteAttribute(ctx(t), s, as[0].ID))
			d := f.data(t, st, u.ID, s)
			if got := groupNames(d.Groups); !slices.Equal(got, []string{"ops"}) {
				t.Errorf("memberships after delete = %v", got)
			}
			if got := valueNames(d.Attributes); !slices.Equal(got, []string{"city"}) {
				t.Errorf("values after delete = %v", got)
			}
			wantErr(t, "DeleteGroup twice", st.DeleteGroup(ctx(t), s, gs[0].ID), store.ErrNotFound)
			wantErr(t, "DeleteAttribute twice", st.DeleteAttribute(ctx(t), s, as[0].ID), store.ErrNotFound)
			if len(lookupGroups(t, st, s, "sales"))+len(lookupAttrs(t, st, s, "country")) != 0 {
				t.Error("Lookup finds deleted definitions")
			}
			// The name can be defined again, with another type.
			mustNil(t, "recreate", st.UpsertDefinitions(ctx(t), s, nil, []store.AttributeDef{{Name: "country", Type: store.TypeNumber}}))
			got := lookupAttrs(t, st, s, "country")
			if len(got) != 1 || got[0].Type != store.TypeNumber || got[0].ID == as[0].ID {
				t.Errorf("recreated = %+v", got)
			}
		},
	},
	{
		name: "a definition created again is not inherited",
		doc:  "Users lose a deleted group's membership and a deleted attribute's value for good: a definition created afterwards, of the same name or another, has a new ID (even when the deleted one had the highest), no user is a member of it or has a value of it, and later upserts of the user's other values and groups do not bring the old ones back.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			s := f.scope()
			u := f.user(t, st, "u")
			gs := f.groups(t, st, s, "sales", "ops")
			as := f.attrs(t, st, s, "country", "city")
			f.member(t, st, u, s, gs[0].ID, gs[1].ID)
			f.values(t, st, u, val(as[0].ID, `"DE"`), val(as[1].ID, `"Berlin"`))
			// ops and city have the highest IDs of their kind.
			mustNil(t, "DeleteGroup", st.DeleteGroup(ctx(t), s, gs[1].ID))
			mustNil(t, "DeleteAttribute", st.DeleteAttribute(ctx(t), s, as[1].ID))
			other := f.groups(t, st, s, "other")
			otherAttr := f.attrs(t, st, s, "other")
			ng := f.groups(t, st, s, "ops")
			na := f.attrs(t, st, s, "city")
			for _, id := range []int64{other[0].ID, ng[0].ID} {
				if id == gs[1].ID {
					t.Fatalf("a new group reuses the deleted group's ID %d", id)
				}
			}
			for _, id := range []int64{otherAttr[0].ID, na[0].ID} {
				if id == as[1].ID {
					t.Fatalf("a new attribute reuses the deleted attribute's ID %d", id)
				}
			}
			d := f.data(t, st, u.ID, s)
			if got := groupNames(d.Groups); !slices.Equal(got, []string{"sales"}) {
				t.Errorf("groups after new definitions = %v, want [sales]", got)
			}
			if got := valueNames(d.Attributes); !slices.Equal(got, []string{"country"}) {
				t.Errorf("values after new definitions = %v, want [country]", got)
			}
			// Writing the user's other data keeps the old definitions gone.
			f.values(t, st, u, val(as[0].ID, `"FR"`))
			f.update(t, st, u, func(up *store.UserUpsert) { up.DisplayName = ptr("U") })
			d = f.data(t, st, u.ID, s)
			if len(d.Groups) != 1 || len(d.Attributes) != 1 || !jsonEqual(d.Attributes[0].Value, json.RawMessage(`"FR"`)) {
				t.Errorf("after later upserts = %+v", d)
			}
			// The new definitions are usable.
			f.member(t, st, u, s, ng[0].ID, gs[0].ID)
			f.values(t, st, u, val(na[0].ID, `"Paris"`))
			d = f.data(t, st, u.ID, s)
			if got := groupNames(d.Groups); !slices.Equal(got, []string{"ops", "sales"}) || d.Groups[0].ID != ng[0].ID {
				t.Errorf("groups = %+v", d.Groups)
			}
			if got := valueNames(d.Attributes); !slices.Equal(got, []string{"city", "country"}) || !jsonEqual(d.Attributes[0].Value, json.RawMessage(`"Paris"`)) {
				t.Errorf("values = %+v", d.Attributes)
			}
		},
	},
}
