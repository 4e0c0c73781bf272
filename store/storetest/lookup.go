package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/embedkit/embedkit/store"
)

var lookupRules = []rule{
	{
		name: "Lookup resolves attributes and groups of one scope",
		doc:  "Lookup returns what AttributesByName and GroupsByName return for the same names: existing names of the scope only, every field filled; either list may be empty.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			et, err := st.EnsureEmbedTenant(ctx(t), f.account.ID, "tenant-cat")
			mustNil(t, "EnsureEmbedTenant", err)
			s := store.Scope{AccountID: f.account.ID, EmbedTenantID: et.ID}
			mustNil(t, "UpsertGroups", st.UpsertGroups(ctx(t), s, []store.GroupDef{{Name: "sales", Description: ptr("Sales team")}, {Name: "ops"}}))
			mustNil(t, "UpsertAttributes", st.UpsertAttributes(ctx(t), s, []store.AttributeDef{
				{Name: "country", Type: store.TypeString, DisplayName: ptr("Country")}, {Name: "level", Type: store.TypeNumber}}))
			other := f.scope()
			mustNil(t, "UpsertGroups other scope", st.UpsertGroups(ctx(t), other, []store.GroupDef{{Name: "marketing"}}))

			wantAttrs, err := st.AttributesByName(ctx(t), s, []string{"country", "level", "missing"})
			mustNil(t, "AttributesByName", err)
			wantGroups, err := st.GroupsByName(ctx(t), s, []string{"sales", "marketing", "missing"})
			mustNil(t, "GroupsByName", err)
			res, err := st.Lookup(ctx(t), store.Lookup{Scope: s,
				AttrNames: []string{"country", "level", "missing"}, GroupNames: []string{"sales", "marketing", "missing"}})
			mustNil(t, "Lookup", err)
			attrs, groups := res.Attributes, res.Groups
			byID := func(a, b store.Attribute) int { return int(a.ID - b.ID) }
			gByID := func(a, b store.Group) int { return int(a.ID - b.ID) }
			slices.SortFunc(attrs, byID)
			slices.SortFunc(wantAttrs, byID)
			slices.SortFunc(groups, gByID)
			slices.SortFunc(wantGroups, gByID)
			if fmt.Sprint(attrs) != fmt.Sprint(wantAttrs) || len(attrs) != 2 {
				t.Errorf("attributes = %+v, want %+v", attrs, wantAttrs)
			}
			if fmt.Sprint(groups) != fmt.Sprint(wantGroups) || len(groups) != 1 {
				t.Errorf("groups = %+v, want %+v (marketing is of another scope)", groups, wantGroups)
			}
			if res.UserUpdated {
				t.Errorf("UserUpdated without a ReturningUser")
			}
			res, err = st.Lookup(ctx(t), store.Lookup{Scope: s, GroupNames: []string{"ops"}})
			mustNil(t, "Lookup groups only", err)
			if len(res.Attributes) != 0 || len(res.Groups) != 1 || res.Groups[0].Name != "ops" {
				t.Errorf("groups only: %v %v", res.Attributes, res.Groups)
			}
			err = st.InTx(ctx(t), func(tx store.Tx) error {
				res, err = tx.Lookup(ctx(t), store.Lookup{Scope: s, AttrNames: []string{"level"}})
				return err
			})
			mustNil(t, "Lookup in a transaction", err)
			if len(res.Attributes) != 1 || res.Attributes[0].Type != store.TypeNumber || len(res.Groups) != 0 {
				t.Errorf("attributes only: %v %v", res.Attributes, res.Groups)
			}
			res, err = st.Lookup(ctx(t), store.Lookup{Scope: s})
			mustNil(t, "empty Lookup", err)
			if len(res.Attributes)+len(res.Groups) != 0 || res.UserUpdated {
				t.Errorf("empty Lookup = %+v", res)
			}
		},
	},
	{
		name: "Lookup updates a returning user and no other",
		doc:  "A ReturningUser is applied as UpsertExternalUser would (nil fields preserve, others overwrite) to an existing visible user it leaves persistent or ephemeral as it is; a missing user, an expired ephemeral one and an ephemeral one asked to become persistent are left untouched with UserUpdated false.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			later := t0.Add(time.Minute)
			touch := func(externalID string, persistent bool) store.ExternalUserUpsert {
				up := f.upsert(externalID)
				up.Persistent, up.Now = persistent, later
				up.DisplayName = ptr("New " + externalID)
				up.EphemeralExpiresAt = later.Add(time.Hour)
				return up
			}
			lookup := func(up store.ExternalUserUpsert) store.LookupResult {
				t.Helper()
				res, err := st.Lookup(ctx(t), store.Lookup{Scope: f.scope(), AttrNames: []string{"x"}, ReturningUser: &up})
				mustNil(t, "Lookup "+up.ExternalID, err)
				return res
			}
			unchanged := func(externalID string, want store.User) {
				t.Helper()
				got, err := st.UserByExternalID(ctx(t), f.account.ID, externalID, t0)
				if errors.Is(err, store.ErrNotFound) && want.ID == 0 {
					return
				}
				mustNil(t, "UserByExternalID "+externalID, err)
				if got.DisplayName != want.DisplayName || got.Ephemeral != want.Ephemeral || !got.UpdatedAt.Equal(want.UpdatedAt) {
					t.Errorf("%s changed: %+v, was %+v", externalID, got, want)
				}
			}

			// A persistent user, whether or not the upsert asks for persistence.
			up := f.upsert("p")
			up.Email, up.DisplayName = ptr("p@x.test"), ptr("Old p")
			p, err := st.UpsertExternalUser(ctx(t), up)
			mustNil(t, "UpsertExternalUser p", err)
			for _, persistent := range []bool{true, false} {
				res := lookup(touch("p", persistent))
				if !res.UserUpdated || res.User.ID != p.ID || res.User.DisplayName != "New p" || res.User.Email != "p@x.test" ||
					res.User.Ephemeral || !res.User.UpdatedAt.Equal(later) || !res.User.CreatedAt.Equal(t0) {
					t.Errorf("persistent=%v: %+v", persistent, res)
				}
				got, err := st.UserByExternalID(ctx(t), f.account.ID, "p", later)
				mustNil(t, "UserByExternalID p", err)
				if got.DisplayName != "New p" || got.Ephemeral {
					t.Errorf("stored p = %+v", got)
				}
			}

			// An ephemeral user stays ephemeral; asked to become persistent, it is
			// left to UpsertExternalUser (the limit applies).
			e := f.ephemeral(t, st, "e", t0.Add(time.Hour))
			if res := lookup(touch("e", true)); res.UserUpdated {
				t.Errorf("ephemeral made persistent by Lookup: %+v", res)
			}
			unchanged("e", e)
			res := lookup(touch("e", false))
			if !res.UserUpdated || res.User.ID != e.ID || !res.User.Ephemeral || res.User.DisplayName != "New e" ||
				!res.User.ExpiresAt.Equal(e.ExpiresAt) {
				t.Errorf("ephemeral returning user: %+v (was %+v)", res, e)
			}

			// Missing and expired users are not created.
			if res := lookup(touch("nobody", true)); res.UserUpdated {
				t.Errorf("missing user updated: %+v", res)
			}
			unchanged("nobody", store.User{})
			x := f.ephemeral(t, st, "x", t0.Add(30*time.Second))
			if res := lookup(touch("x", false)); res.UserUpdated {
				t.Errorf("expired user updated: %+v", res)
			}
			unchanged("x", x)
		},
	},
	{
		name: "Lookup's update goes with its transaction",
		doc:  "A Lookup in a transaction that rolls back leaves the returning user as it was.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			u := f.user(t, st, "r")
			up := f.upsert("r")
			up.DisplayName, up.Now = ptr("Rolled back"), t0.Add(time.Minute)
			errInvalid := errors.New("invalid request")
			err := st.InTx(ctx(t), func(tx store.Tx) error {
				res, err := tx.Lookup(ctx(t), store.Lookup{Scope: f.scope(), GroupNames: []string{"g"}, ReturningUser: &up})
				if err != nil {
					return err
				}
				if !res.UserUpdated || res.User.DisplayName != "Rolled back" {
					t.Errorf("in the transaction: %+v", res)
				}
				return errInvalid
			})
			if !errors.Is(err, errInvalid) {
				t.Fatalf("InTx = %v, want the error of fn", err)
			}
			got, err := st.UserByExternalID(ctx(t), f.account.ID, "r", t0)
			mustNil(t, "UserByExternalID", err)
			if got.DisplayName != u.DisplayName || !got.UpdatedAt.Equal(u.UpdatedAt) {
				t.Errorf("after rollback: %+v, want %+v", got, u)
			}
		},
	},
}
