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
		name: "UpsertUser creates a persistent user",
		doc:  "The first upsert of (account, externalId) creates the user with the supplied profile; Persistent true means not ephemeral and no expiry; UserByKey and UserByID find it.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			up := f.upsert("ext-1")
			up.Email, up.DisplayName, up.Picture = ptr("a@x.test"), ptr("Ann"), ptr("https://x.test/a.png")
			up.SecurityContext = json.RawMessage(`{"team":"red"}`)
			u, err := st.UpsertUser(ctx(t), up)
			mustNil(t, "UpsertUser", err)
			if u.ID == 0 || u.AccountID != f.account.ID || u.ExternalID != "ext-1" || u.InternalID != "" {
				t.Errorf("user = %+v", u)
			}
			if u.Email != "a@x.test" || u.DisplayName != "Ann" || u.Picture != "https://x.test/a.png" || !jsonEqual(u.SecurityContext, up.SecurityContext) {
				t.Errorf("profile = %+v", u)
			}
			if u.Ephemeral || !u.ExpiresAt.IsZero() || !u.CreatedAt.Equal(t0) {
				t.Errorf("persistent user has Ephemeral=%v ExpiresAt=%v CreatedAt=%v", u.Ephemeral, u.ExpiresAt, u.CreatedAt)
			}
			got, err := st.UserByKey(ctx(t), u.Key(), t0)
			mustNil(t, "UserByKey", err)
			if got.ID != u.ID || got.Email != u.Email {
				t.Errorf("UserByKey = %+v, want %+v", got, u)
			}
			got, err = st.UserByID(ctx(t), u.ID, t0)
			mustNil(t, "UserByID", err)
			if got.ExternalID != "ext-1" {
				t.Errorf("UserByID = %+v", got)
			}
			_, err = st.UserByKey(ctx(t), store.UserKey{AccountID: f.account.ID, ExternalID: "nobody"}, t0)
			wantErr(t, "UserByKey missing", err, store.ErrNotFound)
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
			u1, err := st.UpsertUser(ctx(t), up)
			mustNil(t, "first upsert", err)

			up2 := f.upsert("ext-1")
			up2.DisplayName = ptr("Annie")
			up2.Now = t0.Add(time.Minute)
			u2, err := st.UpsertUser(ctx(t), up2)
			mustNil(t, "second upsert", err)
			if u2.ID != u1.ID {
				t.Fatalf("second upsert ID = %d, want %d", u2.ID, u1.ID)
			}
			if u2.DisplayName != "Annie" || u2.Email != "a@x.test" || u2.Picture != "https://x.test/a.png" || !jsonEqual(u2.SecurityContext, up.SecurityContext) {
				t.Errorf("after partial update: %+v", u2)
			}
			if !u2.CreatedAt.Equal(t0) {
				t.Errorf("CreatedAt = %v, want %v kept", u2.CreatedAt, t0)
			}
			up3 := f.upsert("ext-1")
			up3.Email, up3.Picture, up3.SecurityContext = ptr(""), ptr("https://x.test/b.png"), json.RawMessage(`{"b":2}`)
			u3, err := st.UpsertUser(ctx(t), up3)
			mustNil(t, "third upsert", err)
			if u3.Email != "" || u3.Picture != "https://x.test/b.png" || u3.DisplayName != "Annie" || !jsonEqual(u3.SecurityContext, up3.SecurityContext) {
				t.Errorf("after overwrite: %+v", u3)
			}
			got, err := st.UserByKey(ctx(t), u1.Key(), t0)
			mustNil(t, "UserByKey", err)
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
			got, err := st.UserByKey(ctx(t), store.UserKey{AccountID: b.account.ID, ExternalID: "same"}, t0)
			mustNil(t, "UserByKey", err)
			if got.ID != ub.ID {
				t.Errorf("UserByKey(b) = %d, want %d", got.ID, ub.ID)
			}
		},
	},
	{
		name: "Persistent false creates an ephemeral user that does not count",
		doc:  "An ephemeral user expires at EphemeralExpiresAt (never, when it is zero) and does not count toward MaxUsers.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			exp := t0.Add(time.Hour)
			up := f.upsert("eph")
			up.Persistent, up.EphemeralExpiresAt, up.MaxUsers = false, exp, 1
			u, err := st.UpsertUser(ctx(t), up)
			mustNil(t, "UpsertUser", err)
			if !u.Ephemeral || !u.ExpiresAt.Equal(exp) {
				t.Errorf("Ephemeral=%v ExpiresAt=%v, want true %v", u.Ephemeral, u.ExpiresAt, exp)
			}
			p := f.upsert("persistent")
			p.MaxUsers = 1
			_, err = st.UpsertUser(ctx(t), p)
			mustNil(t, "persistent user with limit 1 beside an ephemeral one", err)
			// At the limit, ephemeral users are still created.
			up = f.upsert("eph2")
			up.Persistent, up.EphemeralExpiresAt, up.MaxUsers = false, exp, 1
			_, err = st.UpsertUser(ctx(t), up)
			mustNil(t, "ephemeral user at the limit", err)
			up = f.upsert("forever")
			up.Persistent = false
			u, err = st.UpsertUser(ctx(t), up)
			mustNil(t, "ephemeral user without an expiry", err)
			if !u.Ephemeral || !u.ExpiresAt.IsZero() {
				t.Errorf("Ephemeral=%v ExpiresAt=%v, want true and zero", u.Ephemeral, u.ExpiresAt)
			}
			_, err = st.UserByKey(ctx(t), u.Key(), t0.AddDate(100, 0, 0))
			mustNil(t, "an ephemeral user without an expiry a century later", err)
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
			got, err := st.UpsertUser(ctx(t), up)
			mustNil(t, "upsert persistent as ephemeral", err)
			if got.ID != p.ID || got.Ephemeral || !got.ExpiresAt.IsZero() || got.DisplayName != "P" {
				t.Errorf("persistent user became %+v", got)
			}
			exp := t0.Add(time.Hour)
			e := f.ephemeral(t, st, "e", exp)
			up = f.upsert("e")
			up.Persistent, up.EphemeralExpiresAt, up.DisplayName = false, t0.Add(48*time.Hour), ptr("E")
			got, err = st.UpsertUser(ctx(t), up)
			mustNil(t, "upsert ephemeral again", err)
			if got.ID != e.ID || !got.Ephemeral || !got.ExpiresAt.Equal(exp) || got.DisplayName != "E" {
				t.Errorf("ephemeral user became %+v, want expiry kept at %v", got, exp)
			}
		},
	},
	{
		name: "Persistent true converts an ephemeral user and counts it",
		doc:  "A chat-created ephemeral user becomes persistent when generate-session names it; the conversion counts toward MaxUsers and fails with ErrLimit when the account is full, changing nothing of the user (profile, values, groups).",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			as := f.attrs(t, st, f.scope(), "country")
			gs := f.groups(t, st, f.scope(), "sales", "ops")
			e := f.ephemeral(t, st, "e", t0.Add(time.Hour))
			up := f.upsert("e")
			up.MaxUsers = 1
			got, err := st.UpsertUser(ctx(t), up)
			mustNil(t, "convert", err)
			if got.ID != e.ID || got.Ephemeral || !got.ExpiresAt.IsZero() {
				t.Errorf("converted user = %+v", got)
			}
			// The converted user holds the only place: another conversion fails.
			e2 := f.ephemeral(t, st, "e2", t0.Add(time.Hour))
			f.values(t, st, e2, val(as[0].ID, `"DE"`))
			f.member(t, st, e2, f.scope(), gs[0].ID)
			up = f.upsert("e2")
			up.MaxUsers, up.DisplayName = 1, ptr("changed")
			up.Attributes = []store.AttributeValue{val(as[0].ID, `"FR"`)}
			up.SetGroups, up.GroupScope, up.Groups = true, f.scope(), []int64{gs[1].ID}
			_, err = st.UpsertUser(ctx(t), up)
			wantErr(t, "conversion over the limit", err, store.ErrLimit)
			still, err := st.UserByKey(ctx(t), e2.Key(), t0)
			mustNil(t, "UserByKey", err)
			if !still.Ephemeral || still.DisplayName != "" || !still.ExpiresAt.Equal(e2.ExpiresAt) {
				t.Errorf("failed conversion changed the user: %+v", still)
			}
			d := f.data(t, st, e2.ID, f.scope())
			if len(d.Attributes) != 1 || !jsonEqual(d.Attributes[0].Value, json.RawMessage(`"DE"`)) || !slices.Equal(groupNames(d.Groups), []string{"sales"}) {
				t.Errorf("failed conversion changed the user's data: %+v", d)
			}
		},
	},
	{
		name: "persistent user limit is exact and DeleteUser frees a place",
		doc:  "With MaxUsers N, N persistent users can be created and the next is ErrLimit (nothing stored); existing users still upsert at the limit; deleting a persistent user frees its place; limits are per account.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			as := f.attrs(t, st, f.scope(), "country")
			gs := f.groups(t, st, f.scope(), "sales")
			var users []store.User
			for i := range 3 {
				up := f.upsert("u" + string(rune('a'+i)))
				up.MaxUsers = 3
				u, err := st.UpsertUser(ctx(t), up)
				mustNil(t, "create under the limit", err)
				users = append(users, u)
			}
			up := f.upsert("ud")
			up.MaxUsers = 3
			up.Attributes = []store.AttributeValue{val(as[0].ID, `"DE"`)}
			up.SetGroups, up.GroupScope, up.Groups = true, f.scope(), []int64{gs[0].ID}
			_, err := st.UpsertUser(ctx(t), up)
			wantErr(t, "create over the limit", err, store.ErrLimit)
			_, err = st.UserByKey(ctx(t), up.UserKey, t0)
			wantErr(t, "refused user", err, store.ErrNotFound)

			again := f.upsert("ua")
			again.MaxUsers, again.DisplayName = 3, ptr("still here")
			_, err = st.UpsertUser(ctx(t), again)
			mustNil(t, "update at the limit", err)

			mustNil(t, "DeleteUser", st.DeleteUser(ctx(t), users[0].ID))
			u, err := st.UpsertUser(ctx(t), up)
			mustNil(t, "create after a delete", err)
			d := f.data(t, st, u.ID, f.scope())
			if len(d.Attributes) != 1 || len(d.Groups) != 1 {
				t.Errorf("user created with its data has %+v", d)
			}
			full := f.upsert("ue")
			full.MaxUsers = 3
			_, err = st.UpsertUser(ctx(t), full)
			wantErr(t, "full again", err, store.ErrLimit)

			other := newFixture(t, st, "other")
			oup := other.upsert("ua")
			oup.MaxUsers = 1
			_, err = st.UpsertUser(ctx(t), oup)
			mustNil(t, "limits are per account", err)
		},
	},
	{
		name: "MaxUsers of zero means no limit",
		doc:  "UserUpsert.MaxUsers <= 0 disables the limit: persistent users are created (and still counted, so a later positive limit applies to all of them).",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			for i := range 3 {
				up := f.upsert(string(rune('a' + i)))
				up.MaxUsers = 0
				if i == 2 {
					up.MaxUsers = -1
				}
				_, err := st.UpsertUser(ctx(t), up)
				mustNil(t, "create without limit", err)
			}
			up := f.upsert("d")
			up.MaxUsers = 3
			_, err := st.UpsertUser(ctx(t), up)
			wantErr(t, "create with limit 3 after 3 users", err, store.ErrLimit)
		},
	},
	{
		name: "expired ephemeral users are invisible and recreated on upsert",
		doc:  "An ephemeral user is absent from the moment expires_at <= now; an upsert then deletes it with everything it owns (values, groups, sessions, threads) and creates a new user with a new ID.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			exp := t0.Add(time.Hour)
			old := f.ephemeral(t, st, "e", exp)
			as := f.attrs(t, st, f.scope(), "country")
			gs := f.groups(t, st, f.scope(), "sales")
			f.values(t, st, old, val(as[0].ID, `"DE"`))
			f.member(t, st, old, f.scope(), gs[0].ID)
			f.session(t, st, old.ID, "sess-old", exp.Add(time.Hour))
			f.thread(t, st, old.ID, "chat-old")

			_, err := st.UserByKey(ctx(t), old.Key(), exp.Add(-time.Nanosecond))
			mustNil(t, "before expiry", err)
			_, err = st.UserByKey(ctx(t), old.Key(), exp)
			wantErr(t, "UserByKey at expiry", err, store.ErrNotFound)
			_, err = st.UserByID(ctx(t), old.ID, exp)
			wantErr(t, "UserByID at expiry", err, store.ErrNotFound)

			up := f.upsert("e")
			up.Persistent, up.EphemeralExpiresAt, up.Now = false, exp.Add(time.Hour), exp
			nu, err := st.UpsertUser(ctx(t), up)
			mustNil(t, "upsert after expiry", err)
			if nu.ID == old.ID {
				t.Fatal("expired user was reused, want a new user")
			}
			if !nu.Ephemeral || !nu.ExpiresAt.Equal(exp.Add(time.Hour)) || !nu.CreatedAt.Equal(exp) || nu.DisplayName != "" {
				t.Errorf("new user = %+v", nu)
			}
			d := f.data(t, st, nu.ID, f.scope())
			if len(d.Attributes) != 0 || len(d.Groups) != 0 {
				t.Errorf("new user inherited %+v", d)
			}
			d = f.data(t, st, old.ID, f.scope())
			if len(d.Attributes) != 0 || len(d.Groups) != 0 {
				t.Errorf("the replaced user's data survives: %+v", d)
			}
			_, err = st.UserByID(ctx(t), old.ID, t0)
			wantErr(t, "replaced user at an earlier now", err, store.ErrNotFound)
			_, err = st.Thread(ctx(t), f.account.ID, "chat-old")
			wantErr(t, "old user's thread", err, store.ErrNotFound)
			_, err = st.ExchangeSession(ctx(t), []byte("sess-old"), []byte("tok"), exp.Add(24*time.Hour), t0)
			wantErr(t, "old user's session", err, store.ErrNotFound)

			// An expired user replaced by a persistent one takes a place.
			old2 := f.ephemeral(t, st, "e2", exp)
			up = f.upsert("e2")
			up.Now, up.MaxUsers = exp, 1
			p, err := st.UpsertUser(ctx(t), up)
			mustNil(t, "persistent user replacing an expired one", err)
			if p.ID == old2.ID || p.Ephemeral {
				t.Errorf("user replacing an expired one = %+v (old id %d)", p, old2.ID)
			}
			up = f.upsert("third")
			up.Now, up.MaxUsers = exp, 1
			_, err = st.UpsertUser(ctx(t), up)
			wantErr(t, "the place is taken", err, store.ErrLimit)
		},
	},
	{
		name: "internal users are keyed by internal id and never limited",
		doc:  "UpsertUser with an InternalID creates an internal user once (later upserts update it), persistent whatever Persistent says; it counts toward no limit; UserByKey and UserByID find it, and an external key of the same string does not.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			key := store.UserKey{AccountID: f.account.ID, InternalID: "alice@acme.test"}
			// Full of persistent external users and ephemeral creations.
			p := f.upsert("p")
			p.MaxUsers = 1
			_, err := st.UpsertUser(ctx(t), p)
			mustNil(t, "persistent external user", err)
			up := store.UserUpsert{UserKey: key, Persistent: false, MaxUsers: 1, NewEphemeralPerMinute: 1, Now: t0, DisplayName: ptr("Alice")}
			u, err := st.UpsertUser(ctx(t), up)
			mustNil(t, "UpsertUser internal", err)
			if u.ID == 0 || u.InternalID != "alice@acme.test" || u.ExternalID != "" || u.Ephemeral || !u.ExpiresAt.IsZero() || u.DisplayName != "Alice" {
				t.Errorf("internal user = %+v", u)
			}
			up.DisplayName, up.Email = nil, ptr("alice@acme.test")
			u2, err := st.UpsertUser(ctx(t), up)
			mustNil(t, "UpsertUser internal again", err)
			if u2.ID != u.ID || u2.DisplayName != "Alice" || u2.Email != "alice@acme.test" {
				t.Errorf("internal user again = %+v, want %d updated", u2, u.ID)
			}
			other := store.UserUpsert{UserKey: store.UserKey{AccountID: f.account.ID, InternalID: "bob@acme.test"}, Persistent: true, MaxUsers: 1, Now: t0}
			_, err = st.UpsertUser(ctx(t), other)
			mustNil(t, "a second internal user at the limit", err)
			e := f.upsert("e")
			e.Persistent, e.EphemeralExpiresAt, e.NewEphemeralPerMinute = false, t0.Add(time.Hour), 1
			_, err = st.UpsertUser(ctx(t), e)
			mustNil(t, "ephemeral user after internal ones (they took no place of the minute)", err)

			got, err := st.UserByKey(ctx(t), key, t0)
			mustNil(t, "UserByKey", err)
			if got.ID != u.ID {
				t.Errorf("UserByKey ID = %d, want %d", got.ID, u.ID)
			}
			got, err = st.UserByID(ctx(t), u.ID, t0.Add(1000*time.Hour))
			mustNil(t, "UserByID", err)
			if got.InternalID != "alice@acme.test" {
				t.Errorf("UserByID = %+v", got)
			}
			_, err = st.UserByKey(ctx(t), store.UserKey{AccountID: f.account.ID, InternalID: "carol@acme.test"}, t0)
			wantErr(t, "missing internal user", err, store.ErrNotFound)
			_, err = st.UserByKey(ctx(t), store.UserKey{AccountID: f.account.ID, ExternalID: "alice@acme.test"}, t0)
			wantErr(t, "internal user by external id", err, store.ErrNotFound)
			_, err = st.UserByKey(ctx(t), store.UserKey{AccountID: f.account.ID, InternalID: "p"}, t0)
			wantErr(t, "external user by internal id", err, store.ErrNotFound)
		},
	},
	{
		name: "attribute values merge: others are kept, nil clears",
		doc:  "UpsertUser sets the values of the attributes it names (overwriting), clears those with a nil (or empty) Value, and keeps the user's values of every other attribute; UserData returns the values of one scope's attributes, with name and type, ordered by name.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			u := f.user(t, st, "u")
			mustNil(t, "UpsertDefinitions", st.UpsertDefinitions(ctx(t), f.scope(), nil, []store.AttributeDef{
				{Name: "zeta", Type: store.TypeString}, {Name: "alpha", Type: store.TypeStringArray}, {Name: "mid", Type: store.TypeNumber}}))
			as := lookupAttrs(t, st, f.scope(), "zeta", "alpha", "mid")
			id := map[string]int64{}
			for _, a := range as {
				id[a.Name] = a.ID
			}
			scoped := f.tenantScope(t, st, "tenant-one")
			sa := f.attrs(t, st, scoped, "alpha")
			f.values(t, st, u, val(id["zeta"], `"z"`), val(id["alpha"], `["a","b"]`), val(id["mid"], `1.5`), val(sa[0].ID, `"scoped"`))
			vals := f.data(t, st, u.ID, f.scope()).Attributes
			if got := valueNames(vals); !slices.Equal(got, []string{"alpha", "mid", "zeta"}) {
				t.Fatalf("names = %v, want ordered alpha mid zeta", got)
			}
			if !jsonEqual(vals[0].Value, json.RawMessage(`["a","b"]`)) || vals[0].Type != store.TypeStringArray || vals[1].Type != store.TypeNumber {
				t.Errorf("values = %+v", vals)
			}
			// Naming only mid keeps alpha and zeta.
			f.values(t, st, u, val(id["mid"], `2`))
			vals = f.data(t, st, u.ID, f.scope()).Attributes
			if len(vals) != 3 || !jsonEqual(vals[1].Value, json.RawMessage(`2`)) || !jsonEqual(vals[2].Value, json.RawMessage(`"z"`)) {
				t.Errorf("after setting mid = %+v", vals)
			}
			f.values(t, st, u, val(id["zeta"], ""), val(id["alpha"], `["new"]`))
			vals = f.data(t, st, u.ID, f.scope()).Attributes
			if got := valueNames(vals); !slices.Equal(got, []string{"alpha", "mid"}) || !jsonEqual(vals[0].Value, json.RawMessage(`["new"]`)) {
				t.Errorf("after clearing zeta = %+v", vals)
			}
			// Clearing a value the user does not have is fine, also with an
			// empty (not nil) Value.
			f.values(t, st, u, val(id["zeta"], ""))
			f.values(t, st, u, store.AttributeValue{AttributeID: id["zeta"], Value: json.RawMessage{}})
			sv := f.data(t, st, u.ID, scoped).Attributes
			if len(sv) != 1 || sv[0].Name != "alpha" || !jsonEqual(sv[0].Value, json.RawMessage(`"scoped"`)) {
				t.Errorf("scoped values = %+v", sv)
			}
			// An upsert without attributes keeps them all.
			f.update(t, st, u, func(up *store.UserUpsert) { up.DisplayName = ptr("U") })
			if vals := f.data(t, st, u.ID, f.scope()).Attributes; len(vals) != 2 {
				t.Errorf("after a profile update = %+v", vals)
			}
		},
	},
	{
		name: "SetGroups replaces memberships within one scope only",
		doc:  "groups rules: SetGroups with a populated list replaces the memberships of GroupScope exactly, an empty list clears them, other scopes are untouched; SetGroups false keeps every membership; UserData's groups are ordered by name.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			u := f.user(t, st, "u")
			gs := f.groups(t, st, f.scope(), "sales", "marketing", "admins")
			scoped := f.tenantScope(t, st, "tenant-one")
			sg := f.groups(t, st, scoped, "sales")
			f.member(t, st, u, scoped, sg[0].ID)
			f.member(t, st, u, f.scope(), gs[0].ID, gs[1].ID)
			if got := groupNames(f.data(t, st, u.ID, f.scope()).Groups); !slices.Equal(got, []string{"marketing", "sales"}) {
				t.Errorf("memberships = %v, want [marketing sales]", got)
			}
			f.member(t, st, u, f.scope(), gs[2].ID, gs[1].ID)
			if got := groupNames(f.data(t, st, u.ID, f.scope()).Groups); !slices.Equal(got, []string{"admins", "marketing"}) {
				t.Errorf("memberships = %v, want [admins marketing]", got)
			}
			f.update(t, st, u, func(up *store.UserUpsert) { up.GroupScope, up.Groups = f.scope(), []int64{gs[0].ID} })
			if got := groupNames(f.data(t, st, u.ID, f.scope()).Groups); !slices.Equal(got, []string{"admins", "marketing"}) {
				t.Errorf("SetGroups false changed memberships: %v", got)
			}
			f.member(t, st, u, f.scope())
			if ms := f.data(t, st, u.ID, f.scope()).Groups; len(ms) != 0 {
				t.Errorf("after clear: %v", groupNames(ms))
			}
			ms := f.data(t, st, u.ID, scoped).Groups
			if got := groupNames(ms); !slices.Equal(got, []string{"sales"}) || ms[0].ID != sg[0].ID || ms[0].Scope != scoped {
				t.Errorf("scoped memberships = %+v, want the embed tenant's sales", ms)
			}
		},
	},
	{
		name: "a definition deleted since its lookup is ignored",
		doc:  "A caller may name an attribute or group that was looked up and then deleted (a cache, a concurrent admin delete): UpsertUser succeeds, stores nothing that any read returns, and the user's other values and groups are written.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			u := f.user(t, st, "u")
			as := f.attrs(t, st, f.scope(), "country", "gone")
			gs := f.groups(t, st, f.scope(), "sales", "gone")
			mustNil(t, "DeleteAttribute", st.DeleteAttribute(ctx(t), f.scope(), as[1].ID))
			mustNil(t, "DeleteGroup", st.DeleteGroup(ctx(t), f.scope(), gs[1].ID))
			f.values(t, st, u, val(as[0].ID, `"Germany"`), val(as[1].ID, `"x"`))
			f.member(t, st, u, f.scope(), gs[0].ID, gs[1].ID)
			d := f.data(t, st, u.ID, f.scope())
			if got := valueNames(d.Attributes); !slices.Equal(got, []string{"country"}) {
				t.Errorf("values = %+v, want country alone", d.Attributes)
			}
			if got := groupNames(d.Groups); !slices.Equal(got, []string{"sales"}) {
				t.Errorf("groups = %v, want sales alone", got)
			}
			// A definition of the same name made later has no value.
			as2 := f.attrs(t, st, f.scope(), "gone")
			if as2[0].ID == as[1].ID {
				t.Fatalf("a deleted attribute's ID was reused")
			}
			if got := valueNames(f.data(t, st, u.ID, f.scope()).Attributes); !slices.Equal(got, []string{"country"}) {
				t.Errorf("after a new definition of the name: values = %v", got)
			}
		},
	},
	{
		name: "a new user is created with its values and groups",
		doc:  "The first UpsertUser of a key stores the profile, the attribute values and the memberships together, as generate-session provisions a user; UserData of a missing user is empty, not an error.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			as := f.attrs(t, st, f.scope(), "country", "city")
			gs := f.groups(t, st, f.scope(), "sales", "ops")
			for _, persistent := range []bool{true, false} {
				up := f.upsert(map[bool]string{true: "p", false: "e"}[persistent])
				up.Persistent, up.EphemeralExpiresAt = persistent, t0.Add(time.Hour)
				up.Attributes = []store.AttributeValue{val(as[0].ID, `"DE"`), val(as[1].ID, "")}
				up.SetGroups, up.GroupScope, up.Groups = true, f.scope(), []int64{gs[1].ID}
				u, err := st.UpsertUser(ctx(t), up)
				mustNil(t, "UpsertUser", err)
				d := f.data(t, st, u.ID, f.scope())
				if len(d.Attributes) != 1 || d.Attributes[0].Name != "country" || !jsonEqual(d.Attributes[0].Value, json.RawMessage(`"DE"`)) ||
					!slices.Equal(groupNames(d.Groups), []string{"ops"}) {
					t.Errorf("persistent=%v: data = %+v", persistent, d)
				}
			}
			d, err := st.UserData(ctx(t), 987654, f.scope())
			mustNil(t, "UserData of a missing user", err)
			if len(d.Attributes) != 0 || len(d.Groups) != 0 {
				t.Errorf("missing user's data = %+v", d)
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
			for _, x := range []store.User{u, keep} {
				f.values(t, st, x, val(as[0].ID, `"DE"`))
				f.member(t, st, x, f.scope(), gs[0].ID)
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
			_, err = st.UserByKey(ctx(t), u.Key(), t0)
			wantErr(t, "deleted user by key", err, store.ErrNotFound)
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
			if d := f.data(t, st, u.ID, f.scope()); len(d.Attributes) != 0 || len(d.Groups) != 0 {
				t.Errorf("deleted user's data survives: %+v", d)
			}
			// The other user is untouched.
			d := f.data(t, st, keep.ID, f.scope())
			_, err = st.Thread(ctx(t), f.account.ID, "chat-keep")
			if len(d.Attributes) != 1 || len(d.Groups) != 1 || err != nil {
				t.Errorf("other user lost data: %+v, thread err %v", d, err)
			}
			wantErr(t, "DeleteUser again", st.DeleteUser(ctx(t), u.ID), store.ErrNotFound)
			// The key is free: a new user of it starts empty.
			nu := f.user(t, st, "u")
			if nu.ID == u.ID {
				t.Error("a deleted user's ID was reused")
			}
			if d := f.data(t, st, nu.ID, f.scope()); len(d.Attributes) != 0 || len(d.Groups) != 0 {
				t.Errorf("new user of a deleted key inherited %+v", d)
			}
		},
	},
}
