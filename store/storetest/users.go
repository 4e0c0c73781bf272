package storetest

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/embedkit/embedkit/store"
)

var userRules = []rule{
	{
		name: "UpsertExternalUser creates a persistent user",
		doc:  "The first upsert of (account, externalId) creates the user with the supplied profile; Persistent true means not ephemeral and no expiry.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			up := f.upsert("ext-1")
			up.Email, up.DisplayName, up.Picture = ptr("a@x.test"), ptr("Ann"), ptr("https://x.test/a.png")
			up.SecurityContext = json.RawMessage(`{"team":"red"}`)
			u, err := st.UpsertExternalUser(ctx(t), up)
			mustNil(t, "UpsertExternalUser", err)
			if u.ID == 0 || u.AccountID != f.account.ID || u.ExternalID != "ext-1" || u.InternalID != "" {
				t.Errorf("user = %+v", u)
			}
			if u.Email != "a@x.test" || u.DisplayName != "Ann" || u.Picture != "https://x.test/a.png" || !jsonEqual(u.SecurityContext, up.SecurityContext) {
				t.Errorf("profile = %+v", u)
			}
			if u.Ephemeral || !u.ExpiresAt.IsZero() {
				t.Errorf("persistent user has Ephemeral=%v ExpiresAt=%v", u.Ephemeral, u.ExpiresAt)
			}
			got, err := st.UserByExternalID(ctx(t), f.account.ID, "ext-1", t0)
			mustNil(t, "UserByExternalID", err)
			if got.ID != u.ID || got.Email != u.Email {
				t.Errorf("UserByExternalID = %+v, want %+v", got, u)
			}
			got, err = st.UserByID(ctx(t), u.ID, t0)
			mustNil(t, "UserByID", err)
			if got.ExternalID != "ext-1" {
				t.Errorf("UserByID = %+v", got)
			}
			_, err = st.UserByExternalID(ctx(t), f.account.ID, "nobody", t0)
			wantErr(t, "UserByExternalID missing", err, store.ErrNotFound)
			_, err = st.UserByID(ctx(t), u.ID+1000, t0)
			wantErr(t, "UserByID missing", err, store.ErrNotFound)
		},
	},
	{
		name: "nil fields preserve and non-nil fields overwrite",
		doc:  "userProfile rules 2 and 3: a later upsert overwrites the supplied fields and keeps the omitted ones, for the same user ID.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			up := f.upsert("ext-1")
			up.Email, up.DisplayName, up.Picture = ptr("a@x.test"), ptr("Ann"), ptr("https://x.test/a.png")
			up.SecurityContext = json.RawMessage(`{"a":1}`)
			u1, err := st.UpsertExternalUser(ctx(t), up)
			mustNil(t, "first upsert", err)

			up2 := f.upsert("ext-1")
			up2.DisplayName = ptr("Annie")
			up2.Now = t0.Add(time.Minute)
			u2, err := st.UpsertExternalUser(ctx(t), up2)
			mustNil(t, "second upsert", err)
			if u2.ID != u1.ID {
				t.Fatalf("second upsert ID = %d, want %d", u2.ID, u1.ID)
			}
			if u2.DisplayName != "Annie" || u2.Email != "a@x.test" || u2.Picture != "https://x.test/a.png" || !jsonEqual(u2.SecurityContext, up.SecurityContext) {
				t.Errorf("after partial update: %+v", u2)
			}
			up3 := f.upsert("ext-1")
			up3.Email, up3.Picture, up3.SecurityContext = ptr(""), ptr("https://x.test/b.png"), json.RawMessage(`{"b":2}`)
			u3, err := st.UpsertExternalUser(ctx(t), up3)
			mustNil(t, "third upsert", err)
			if u3.Email != "" || u3.Picture != "https://x.test/b.png" || u3.DisplayName != "Annie" || !jsonEqual(u3.SecurityContext, up3.SecurityContext) {
				t.Errorf("after overwrite: %+v", u3)
			}
			got, err := st.UserByExternalID(ctx(t), f.account.ID, "ext-1", t0)
			mustNil(t, "UserByExternalID", err)
			if got.Picture != u3.Picture || got.DisplayName != "Annie" {
				t.Errorf("stored = %+v", got)
			}
		},
	},
	{
		name: "external ids are per account",
		doc:  "Users are keyed by (account, externalId): the same externalId in two accounts is two users.",
		fn: func(t *testing.T, st store.Store) {
			a, b := newFixture(t, st, "acme"), newFixture(t, st, "other")
			ua, ub := a.user(t, st, "same"), b.user(t, st, "same")
			if ua.ID == ub.ID {
				t.Fatal("one user for two accounts")
			}
			got, err := st.UserByExternalID(ctx(t), b.account.ID, "same", t0)
			mustNil(t, "UserByExternalID", err)
			if got.ID != ub.ID {
				t.Errorf("UserByExternalID(b) = %d, want %d", got.ID, ub.ID)
			}
		},
	},
	{
		name: "Persistent false creates an ephemeral user that does not count",
		doc:  "An ephemeral user expires at EphemeralExpiresAt and does not count toward MaxUsers.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			exp := t0.Add(time.Hour)
			up := f.upsert("eph")
			up.Persistent, up.EphemeralExpiresAt, up.MaxUsers = false, exp, 1
			u, err := st.UpsertExternalUser(ctx(t), up)
			mustNil(t, "UpsertExternalUser", err)
			if !u.Ephemeral || !u.ExpiresAt.Equal(exp) {
				t.Errorf("Ephemeral=%v ExpiresAt=%v, want true %v", u.Ephemeral, u.ExpiresAt, exp)
			}
			p := f.upsert("persistent")
			p.MaxUsers = 1
			_, err = st.UpsertExternalUser(ctx(t), p)
			mustNil(t, "persistent user with limit 1 beside an ephemeral one", err)
		},
	},
	{
		name: "Persistent false leaves an existing user's state",
		doc:  "Persistent false on an existing user keeps it persistent, or keeps an ephemeral user's expiry, while updating the profile.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			p := f.user(t, st, "p")
			up := f.upsert("p")
			up.Persistent, up.EphemeralExpiresAt, up.DisplayName = false, t0.Add(time.Hour), ptr("P")
			got, err := st.UpsertExternalUser(ctx(t), up)
			mustNil(t, "upsert persistent as ephemeral", err)
			if got.ID != p.ID || got.Ephemeral || !got.ExpiresAt.IsZero() || got.DisplayName != "P" {
				t.Errorf("persistent user became %+v", got)
			}
			exp := t0.Add(time.Hour)
			e := f.ephemeral(t, st, "e", exp)
			up = f.upsert("e")
			up.Persistent, up.EphemeralExpiresAt = false, t0.Add(48*time.Hour)
			got, err = st.UpsertExternalUser(ctx(t), up)
			mustNil(t, "upsert ephemeral again", err)
			if got.ID != e.ID || !got.Ephemeral || !got.ExpiresAt.Equal(exp) {
				t.Errorf("ephemeral user became %+v, want expiry kept at %v", got, exp)
			}
		},
	},
	{
		name: "Persistent true converts an ephemeral user and counts it",
		doc:  "A chat-created ephemeral user becomes persistent when generate-session names it; the conversion counts toward MaxUsers and fails with ErrLimit when the account is full.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			e := f.ephemeral(t, st, "e", t0.Add(time.Hour))
			up := f.upsert("e")
			up.MaxUsers = 1
			got, err := st.UpsertExternalUser(ctx(t), up)
			mustNil(t, "convert", err)
			if got.ID != e.ID || got.Ephemeral || !got.ExpiresAt.IsZero() {
				t.Errorf("converted user = %+v", got)
			}
			f.ephemeral(t, st, "e2", t0.Add(time.Hour))
			up = f.upsert("e2")
			up.MaxUsers = 1
			_, err = st.UpsertExternalUser(ctx(t), up)
			wantErr(t, "conversion over the limit", err, store.ErrLimit)
			still, err := st.UserByExternalID(ctx(t), f.account.ID, "e2", t0)
			mustNil(t, "UserByExternalID", err)
			if !still.Ephemeral {
				t.Error("failed conversion changed the user")
			}
		},
	},
	{
		name: "persistent user limit is exact and DeleteUser frees a place",
		doc:  "With MaxUsers N, N persistent users can be created and the next is ErrLimit; existing users still upsert at the limit; deleting a persistent user frees its place.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			var users []store.User
			for i := range 3 {
				up := f.upsert("u" + string(rune('a'+i)))
				up.MaxUsers = 3
				u, err := st.UpsertExternalUser(ctx(t), up)
				mustNil(t, "create under the limit", err)
				users = append(users, u)
			}
			up := f.upsert("ud")
			up.MaxUsers = 3
			_, err := st.UpsertExternalUser(ctx(t), up)
			wantErr(t, "create over the limit", err, store.ErrLimit)
			_, err = st.UserByExternalID(ctx(t), f.account.ID, "ud", t0)
			wantErr(t, "refused user", err, store.ErrNotFound)

			again := f.upsert("ua")
			again.MaxUsers, again.DisplayName = 3, ptr("still here")
			_, err = st.UpsertExternalUser(ctx(t), again)
			mustNil(t, "update at the limit", err)

			mustNil(t, "DeleteUser", st.DeleteUser(ctx(t), users[0].ID))
			_, err = st.UpsertExternalUser(ctx(t), up)
			mustNil(t, "create after a delete", err)

			other := newFixture(t, st, "other")
			oup := other.upsert("ua")
			oup.MaxUsers = 1
			_, err = st.UpsertExternalUser(ctx(t), oup)
			mustNil(t, "limits are per account", err)
		},
	},
	{
		name: "MaxUsers of zero means no limit",
		doc:  "ExternalUserUpsert.MaxUsers <= 0 disables the limit: persistent users are created (and still counted, so a later positive limit applies to all of them).",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			for i := range 3 {
				up := f.upsert(string(rune('a' + i)))
				up.MaxUsers = 0
				_, err := st.UpsertExternalUser(ctx(t), up)
				mustNil(t, "create without limit", err)
			}
			up := f.upsert("d")
			up.MaxUsers = 3
			_, err := st.UpsertExternalUser(ctx(t), up)
			wantErr(t, "create with limit 3 after 3 users", err, store.ErrLimit)
		},
	},
	{
		name: "expired ephemeral users are invisible and recreated on upsert",
		doc:  "An ephemeral user is absent from the moment expires_at <= now; an upsert then deletes it with everything it owns and creates a new user.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			exp := t0.Add(time.Hour)
			old := f.ephemeral(t, st, "e", exp)
			as := f.attrs(t, st, f.scope(), "country")
			gs := f.groups(t, st, f.scope(), "sales")
			mustNil(t, "SetAttributeValues", st.SetAttributeValues(ctx(t), old.ID, []store.AttributeValue{{AttributeID: as[0].ID, Value: json.RawMessage(`"DE"`)}}))
			mustNil(t, "ReplaceMemberships", st.ReplaceMemberships(ctx(t), old.ID, f.scope(), []int64{gs[0].ID}))
			f.session(t, st, old.ID, "sess-old", exp.Add(time.Hour))
			f.thread(t, st, old.ID, "chat-old")

			_, err := st.UserByExternalID(ctx(t), f.account.ID, "e", exp.Add(-time.Nanosecond))
			mustNil(t, "before expiry", err)
			_, err = st.UserByExternalID(ctx(t), f.account.ID, "e", exp)
			wantErr(t, "UserByExternalID at expiry", err, store.ErrNotFound)
			_, err = st.UserByID(ctx(t), old.ID, exp)
			wantErr(t, "UserByID at expiry", err, store.ErrNotFound)

			up := f.upsert("e")
			up.Persistent, up.EphemeralExpiresAt, up.Now = false, exp.Add(time.Hour), exp
			nu, err := st.UpsertExternalUser(ctx(t), up)
			mustNil(t, "upsert after expiry", err)
			if nu.ID == old.ID {
				t.Fatal("expired user was reused, want a new user")
			}
			if !nu.ExpiresAt.Equal(exp.Add(time.Hour)) {
				t.Errorf("new user expires at %v", nu.ExpiresAt)
			}
			vals, err := st.AttributeValues(ctx(t), nu.ID, f.scope())
			mustNil(t, "AttributeValues", err)
			ms, err := st.Memberships(ctx(t), nu.ID, f.scope())
			mustNil(t, "Memberships", err)
			if len(vals) != 0 || len(ms) != 0 {
				t.Errorf("new user inherited values %v memberships %v", vals, ms)
			}
			_, err = st.Thread(ctx(t), f.account.ID, "chat-old")
			wantErr(t, "old user's thread", err, store.ErrNotFound)
			_, err = st.ExchangeSession(ctx(t), []byte("sess-old"), []byte("tok"), exp.Add(24*time.Hour), exp)
			wantErr(t, "old user's session", err, store.ErrNotFound)
		},
	},
	{
		name: "InsertFirst is a hint that changes no result",
		doc:  "ExternalUserUpsert.InsertFirst creates a new user as without it (counted toward MaxUsers, or ephemeral), and still updates an existing user, converts an ephemeral one and replaces an expired one.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			upsert := func(up store.ExternalUserUpsert) (store.User, error) {
				up.InsertFirst = true
				return st.UpsertExternalUser(ctx(t), up)
			}
			up := f.upsert("new")
			up.MaxUsers, up.DisplayName = 2, ptr("Ann")
			nu, err := upsert(up)
			mustNil(t, "new user", err)
			if nu.ID == 0 || nu.DisplayName != "Ann" || nu.Ephemeral || !nu.CreatedAt.Equal(t0) {
				t.Errorf("new user = %+v", nu)
			}
			up.DisplayName, up.Email = nil, ptr("ann@x.test")
			again, err := upsert(up)
			mustNil(t, "existing user", err)
			if again.ID != nu.ID || again.DisplayName != "Ann" || again.Email != "ann@x.test" {
				t.Errorf("existing user = %+v, want %d updated with its name kept", again, nu.ID)
			}

			e := f.ephemeral(t, st, "eph", t0.Add(time.Hour))
			conv := f.upsert("eph")
			conv.MaxUsers = 2
			got, err := upsert(conv)
			mustNil(t, "conversion", err)
			if got.ID != e.ID || got.Ephemeral {
				t.Errorf("converted user = %+v, want %d persistent", got, e.ID)
			}
			full := f.upsert("third")
			full.MaxUsers = 2
			_, err = upsert(full)
			wantErr(t, "new user over the limit", err, store.ErrLimit)
			_, err = st.UserByExternalID(ctx(t), f.account.ID, "third", t0)
			wantErr(t, "refused user", err, store.ErrNotFound)

			exp := t0.Add(time.Minute)
			old := f.ephemeral(t, st, "gone", exp)
			re := f.upsert("gone")
			re.Persistent, re.EphemeralExpiresAt, re.Now = false, exp.Add(time.Hour), exp
			fresh, err := upsert(re)
			mustNil(t, "expired user", err)
			if fresh.ID == old.ID || !fresh.Ephemeral || !fresh.ExpiresAt.Equal(exp.Add(time.Hour)) || !fresh.CreatedAt.Equal(exp) {
				t.Errorf("user replacing an expired one = %+v (old id %d)", fresh, old.ID)
			}
		},
	},
	{
		name: "internal users are saved idempotently",
		doc:  "SaveInternalUser creates an internal user once; InternalUser and UserByID find it; a missing username is ErrNotFound.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			u, err := st.SaveInternalUser(ctx(t), f.account.ID, "alice@acme.test")
			mustNil(t, "SaveInternalUser", err)
			u2, err := st.SaveInternalUser(ctx(t), f.account.ID, "alice@acme.test")
			mustNil(t, "SaveInternalUser again", err)
			if u.ID == 0 || u2.ID != u.ID || u.InternalID != "alice@acme.test" || u.ExternalID != "" {
				t.Errorf("internal users %+v %+v", u, u2)
			}
			got, err := st.InternalUser(ctx(t), f.account.ID, "alice@acme.test")
			mustNil(t, "InternalUser", err)
			if got.ID != u.ID {
				t.Errorf("InternalUser ID = %d, want %d", got.ID, u.ID)
			}
			got, err = st.UserByID(ctx(t), u.ID, t0)
			mustNil(t, "UserByID", err)
			if got.InternalID != "alice@acme.test" {
				t.Errorf("UserByID = %+v", got)
			}
			_, err = st.InternalUser(ctx(t), f.account.ID, "bob@acme.test")
			wantErr(t, "InternalUser missing", err, store.ErrNotFound)
			_, err = st.UserByExternalID(ctx(t), f.account.ID, "alice@acme.test", t0)
			wantErr(t, "internal user by external id", err, store.ErrNotFound)
		},
	},
	{
		name: "SetAttributeValues sets, overwrites and clears per scope",
		doc:  "Values of the named attributes are overwritten, nil (or JSON null) deletes, others are kept; AttributeValues returns the scope's values ordered by name.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			u := f.user(t, st, "u")
			as := f.attrs(t, st, f.scope(), "zeta", "alpha", "mid")
			et, err := st.EnsureEmbedTenant(ctx(t), f.account.ID, "tenant-one")
			mustNil(t, "EnsureEmbedTenant", err)
			scoped := store.Scope{AccountID: f.account.ID, EmbedTenantID: et.ID}
			sa := f.attrs(t, st, scoped, "alpha")
			mustNil(t, "set", st.SetAttributeValues(ctx(t), u.ID, []store.AttributeValue{
				{AttributeID: as[0].ID, Value: json.RawMessage(`"z"`)},
				{AttributeID: as[1].ID, Value: json.RawMessage(`["a","b"]`)},
				{AttributeID: as[2].ID, Value: json.RawMessage(`1.5`)},
				{AttributeID: sa[0].ID, Value: json.RawMessage(`"scoped"`)},
			}))
			vals, err := st.AttributeValues(ctx(t), u.ID, f.scope())
			mustNil(t, "AttributeValues", err)
			if got := names(vals, func(v store.UserAttribute) string { return v.Name }); !slices.Equal(got, []string{"alpha", "mid", "zeta"}) {
				t.Fatalf("names = %v, want ordered alpha mid zeta", got)
			}
			if !jsonEqual(vals[0].Value, json.RawMessage(`["a","b"]`)) || vals[0].Type != store.TypeString {
				t.Errorf("alpha = %+v", vals[0])
			}
			mustNil(t, "overwrite and clear", st.SetAttributeValues(ctx(t), u.ID, []store.AttributeValue{
				{AttributeID: as[0].ID, Value: nil},
				{AttributeID: as[2].ID, Value: json.RawMessage(`null`)},
				{AttributeID: as[1].ID, Value: json.RawMessage(`"new"`)},
			}))
			vals, err = st.AttributeValues(ctx(t), u.ID, f.scope())
			mustNil(t, "AttributeValues", err)
			if len(vals) != 1 || vals[0].Name != "alpha" || !jsonEqual(vals[0].Value, json.RawMessage(`"new"`)) {
				t.Errorf("after clear = %+v", vals)
			}
			sv, err := st.AttributeValues(ctx(t), u.ID, scoped)
			mustNil(t, "AttributeValues scoped", err)
			if len(sv) != 1 || !jsonEqual(sv[0].Value, json.RawMessage(`"scoped"`)) {
				t.Errorf("scoped values = %+v", sv)
			}
			mustNil(t, "empty set", st.SetAttributeValues(ctx(t), u.ID, nil))
		},
	},
	{
		name: "ReplaceMemberships replaces within one scope only",
		doc:  "groups rules: a populated list replaces the scope's memberships exactly, an empty list clears them, other scopes are untouched; Memberships is ordered by name.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			u := f.user(t, st, "u")
			gs := f.groups(t, st, f.scope(), "sales", "marketing", "admins")
			et, err := st.EnsureEmbedTenant(ctx(t), f.account.ID, "tenant-one")
			mustNil(t, "EnsureEmbedTenant", err)
			scoped := store.Scope{AccountID: f.account.ID, EmbedTenantID: et.ID}
			sg := f.groups(t, st, scoped, "sales")
			mustNil(t, "scoped", st.ReplaceMemberships(ctx(t), u.ID, scoped, []int64{sg[0].ID}))
			mustNil(t, "replace", st.ReplaceMemberships(ctx(t), u.ID, f.scope(), []int64{gs[0].ID, gs[1].ID}))
			ms, err := st.Memberships(ctx(t), u.ID, f.scope())
			mustNil(t, "Memberships", err)
			if got := groupNames(ms); !slices.Equal(got, []string{"marketing", "sales"}) {
				t.Errorf("memberships = %v, want [marketing sales]", got)
			}
			mustNil(t, "replace again", st.ReplaceMemberships(ctx(t), u.ID, f.scope(), []int64{gs[2].ID, gs[1].ID}))
			ms, err = st.Memberships(ctx(t), u.ID, f.scope())
			mustNil(t, "Memberships", err)
			if got := groupNames(ms); !slices.Equal(got, []string{"admins", "marketing"}) {
				t.Errorf("memberships = %v, want [admins marketing]", got)
			}
			mustNil(t, "clear", st.ReplaceMemberships(ctx(t), u.ID, f.scope(), nil))
			ms, err = st.Memberships(ctx(t), u.ID, f.scope())
			mustNil(t, "Memberships", err)
			if len(ms) != 0 {
				t.Errorf("after clear: %v", groupNames(ms))
			}
			ms, err = st.Memberships(ctx(t), u.ID, scoped)
			mustNil(t, "Memberships scoped", err)
			if got := groupNames(ms); !slices.Equal(got, []string{"sales"}) || ms[0].ID != sg[0].ID {
				t.Errorf("scoped memberships = %v, want the embed tenant's sales", got)
			}
		},
	},
	{
		name: "DeleteUser removes everything the user owns",
		doc:  "DeleteUser deletes the user with attribute values, memberships, sessions, tokens and chat threads; a missing user is ErrNotFound.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			u := f.user(t, st, "u")
			keep := f.user(t, st, "keep")
			as := f.attrs(t, st, f.scope(), "country")
			gs := f.groups(t, st, f.scope(), "sales")
			for _, id := range []int64{u.ID, keep.ID} {
				mustNil(t, "SetAttributeValues", st.SetAttributeValues(ctx(t), id, []store.AttributeValue{{AttributeID: as[0].ID, Value: json.RawMessage(`"DE"`)}}))
				mustNil(t, "ReplaceMemberships", st.ReplaceMemberships(ctx(t), id, f.scope(), []int64{gs[0].ID}))
			}
			f.session(t, st, u.ID, "s1", t0.Add(time.Hour))
			f.session(t, st, u.ID, "s2", t0.Add(time.Hour))
			_, err := st.ExchangeSession(ctx(t), []byte("s1"), []byte("t1"), t0.Add(24*time.Hour), t0)
			mustNil(t, "ExchangeSession", err)
			f.thread(t, st, u.ID, "chat-u")
			f.thread(t, st, keep.ID, "chat-keep")

			mustNil(t, "DeleteUser", st.DeleteUser(ctx(t), u.ID))
			_, err = st.UserByID(ctx(t), u.ID, t0)
			wantErr(t, "deleted user", err, store.ErrNotFound)
			_, err = st.SessionByToken(ctx(t), []byte("t1"), t0)
			wantErr(t, "deleted user's token", err, store.ErrNotFound)
			_, err = st.ExchangeSession(ctx(t), []byte("s2"), []byte("t2"), t0.Add(24*time.Hour), t0)
			wantErr(t, "deleted user's session", err, store.ErrNotFound)
			_, err = st.Thread(ctx(t), f.account.ID, "chat-u")
			wantErr(t, "deleted user's thread", err, store.ErrNotFound)
			msgs, err := st.Messages(ctx(t), f.account.ID, "chat-u")
			mustNil(t, "Messages", err)
			if len(msgs) != 0 {
				t.Errorf("deleted user's messages survive: %v", msgs)
			}
			vals, err := st.AttributeValues(ctx(t), u.ID, f.scope())
			mustNil(t, "AttributeValues", err)
			ms, err := st.Memberships(ctx(t), u.ID, f.scope())
			mustNil(t, "Memberships", err)
			if len(vals) != 0 || len(ms) != 0 {
				t.Errorf("deleted user's values %v memberships %v survive", vals, ms)
			}
			// The other user is untouched.
			vals, _ = st.AttributeValues(ctx(t), keep.ID, f.scope())
			ms, _ = st.Memberships(ctx(t), keep.ID, f.scope())
			_, err = st.Thread(ctx(t), f.account.ID, "chat-keep")
			if len(vals) != 1 || len(ms) != 1 || err != nil {
				t.Errorf("other user lost data: values %v memberships %v thread err %v", vals, ms, err)
			}
			wantErr(t, "DeleteUser again", st.DeleteUser(ctx(t), u.ID), store.ErrNotFound)
		},
	},
	{
		name: "DeleteUnusedUser deletes only a user that nothing uses",
		doc:  "DeleteUnusedUser deletes the user created at createdAt that owns no thread, session or token, with its values and memberships, and frees its place; a user in use, created at another time, or missing stays and is (false, nil).",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			as := f.attrs(t, st, f.scope(), "country")
			gs := f.groups(t, st, f.scope(), "sales")
			fresh := f.user(t, st, "fresh")
			mustNil(t, "SetAttributeValues", st.SetAttributeValues(ctx(t), fresh.ID, []store.AttributeValue{{AttributeID: as[0].ID, Value: json.RawMessage(`"DE"`)}}))
			mustNil(t, "ReplaceMemberships", st.ReplaceMemberships(ctx(t), fresh.ID, f.scope(), []int64{gs[0].ID}))
			withThread := f.user(t, st, "with-thread")
			f.thread(t, st, withThread.ID, "chat")
			withSession := f.user(t, st, "with-session")
			f.session(t, st, withSession.ID, "s1", t0.Add(time.Hour))

			for _, c := range []struct {
				what    string
				u       store.User
				created time.Time
				want    bool
			}{
				{"a user with a thread", withThread, withThread.CreatedAt, false},
				{"a user with a session", withSession, withSession.CreatedAt, false},
				{"another creation time", fresh, fresh.CreatedAt.Add(time.Second), false},
				{"an unused user", fresh, fresh.CreatedAt, true},
				{"a missing user", fresh, fresh.CreatedAt, false},
			} {
				got, err := st.DeleteUnusedUser(ctx(t), c.u.ID, c.created)
				mustNil(t, "DeleteUnusedUser "+c.what, err)
				if got != c.want {
					t.Errorf("DeleteUnusedUser %s = %v, want %v", c.what, got, c.want)
				}
				_, err = st.UserByID(ctx(t), c.u.ID, t0)
				if c.want {
					wantErr(t, "deleted user", err, store.ErrNotFound)
				} else if c.u.ID != fresh.ID {
					mustNil(t, "kept user", err)
				}
			}
			vals, err := st.AttributeValues(ctx(t), fresh.ID, f.scope())
			mustNil(t, "AttributeValues", err)
			ms, err := st.Memberships(ctx(t), fresh.ID, f.scope())
			mustNil(t, "Memberships", err)
			if len(vals) != 0 || len(ms) != 0 {
				t.Errorf("deleted user's values %v memberships %v survive", vals, ms)
			}
			if _, err := st.Thread(ctx(t), f.account.ID, "chat"); err != nil {
				t.Errorf("the thread of the kept user: %v", err)
			}
			// The deleted user's place is free: the limit counts the 2 left.
			up := f.upsert("third")
			up.MaxUsers = 3
			_, err = st.UpsertExternalUser(ctx(t), up)
			mustNil(t, "UpsertExternalUser in the freed place", err)
			// Deleting the user's only thread makes it unused, in one
			// transaction.
			mustNil(t, "InTx", st.InTx(ctx(t), func(tx store.Tx) error {
				if err := tx.DeleteThread(ctx(t), f.account.ID, "chat"); err != nil {
					return err
				}
				ok, err := tx.DeleteUnusedUser(ctx(t), withThread.ID, withThread.CreatedAt)
				if err == nil && !ok {
					t.Error("DeleteUnusedUser after DeleteThread kept the user")
				}
				return err
			}))
			_, err = st.UserByID(ctx(t), withThread.ID, t0)
			wantErr(t, "user deleted with its thread", err, store.ErrNotFound)
		},
	},
	{
		name: "DeleteExpiredUsers removes expired ephemeral users and their threads",
		doc:  "DeleteExpiredUsers deletes at most limit ephemeral users expired at now, with everything they own, and returns the count; persistent and unexpired users stay.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			var expired []store.User
			for i := range 5 {
				u := f.ephemeral(t, st, "old"+string(rune('a'+i)), t0.Add(time.Duration(i+1)*time.Minute))
				expired = append(expired, u)
			}
			f.thread(t, st, expired[0].ID, "chat-old")
			live := f.ephemeral(t, st, "live", t0.Add(time.Hour))
			p := f.user(t, st, "persistent")
			now := t0.Add(10 * time.Minute)

			n, err := st.DeleteExpiredUsers(ctx(t), now, 3)
			mustNil(t, "DeleteExpiredUsers", err)
			if n != 3 {
				t.Errorf("first batch deleted %d, want 3 (the limit)", n)
			}
			n, err = st.DeleteExpiredUsers(ctx(t), now, 100)
			mustNil(t, "DeleteExpiredUsers", err)
			if n != 2 {
				t.Errorf("second batch deleted %d, want 2", n)
			}
			n, err = st.DeleteExpiredUsers(ctx(t), now, 100)
			mustNil(t, "DeleteExpiredUsers", err)
			if n != 0 {
				t.Errorf("third batch deleted %d, want 0", n)
			}
			for _, u := range expired {
				if _, err := st.UserByID(ctx(t), u.ID, t0); err == nil {
					t.Errorf("expired user %s survives (visible at an earlier now)", u.ExternalID)
				}
			}
			_, err = st.Thread(ctx(t), f.account.ID, "chat-old")
			wantErr(t, "expired user's thread", err, store.ErrNotFound)
			for _, u := range []store.User{live, p} {
				if _, err := st.UserByID(ctx(t), u.ID, now); err != nil {
					t.Errorf("user %s deleted: %v", u.ExternalID, err)
				}
			}
		},
	},
}
