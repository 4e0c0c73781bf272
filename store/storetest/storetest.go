// Package storetest is the conformance suite of the [store] contract. An
// adapter runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store {
//			st, err := mystore.Open(...) // empty and migrated
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { st.Close() })
//			return st
//		})
//	}
//
// Every case opens its own store, explains the rule it checks, passes time
// explicitly (no sleeping for expiry) and asserts sentinels with errors.Is.
package storetest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/embedkit/embedkit/store"
)

// rule is one case of the suite: a name, the rule in prose, and the check.
type rule struct {
	name string
	doc  string
	fn   func(t *testing.T, st store.Store)
}

// Run runs every rule of the contract against stores returned by open, one
// subtest per rule. open is called once per subtest and must return an
// empty, migrated store that it closes in t.Cleanup. Subtests run in
// parallel.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	all := slices.Concat(accountRules, userRules, catalogRules, lookupRules, sessionRules, threadRules, txRules, concurrentRules, limitRules)
	for _, r := range all {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			t.Log(r.doc)
			r.fn(t, open(t))
		})
	}
}

// t0 is the suite's clock origin; cases pass times derived from it.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

func ptr[T any](v T) *T { return &v }

func mustNil(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: err = %v, want errors.Is(err, %v)", what, err, target)
	}
}

// fixture is an account with a deployment, the starting point of most cases.
type fixture struct {
	account store.Account
	deploy  store.Deployment
}

func newFixture(t *testing.T, st store.Store, name string) fixture {
	t.Helper()
	ctx := t.Context()
	a, err := st.SaveAccount(ctx, store.Account{Name: name, Plan: store.PlanEnterprise, UseCreatorMode: true, MaxExternalUsers: 100})
	mustNil(t, "SaveAccount", err)
	d := store.Deployment{AccountID: a.ID, ID: 1, Name: "production"}
	mustNil(t, "SaveDeployment", st.SaveDeployment(ctx, d))
	return fixture{account: a, deploy: d}
}

func (f fixture) upsert(externalID string) store.UserUpsert {
	return store.UserUpsert{
		UserKey:    store.UserKey{AccountID: f.account.ID, ExternalID: externalID},
		Persistent: true,
		MaxUsers:   100,
		Now:        t0,
	}
}

func (f fixture) user(t *testing.T, st store.Store, externalID string) store.User {
	t.Helper()
	u, err := st.UpsertUser(t.Context(), f.upsert(externalID))
	mustNil(t, "UpsertUser", err)
	return u
}

func (f fixture) ephemeral(t *testing.T, st store.Store, externalID string, expires time.Time) store.User {
	t.Helper()
	up := f.upsert(externalID)
	up.Persistent = false
	up.EphemeralExpiresAt = expires
	u, err := st.UpsertUser(t.Context(), up)
	mustNil(t, "UpsertUser (ephemeral)", err)
	return u
}

// update upserts the existing user u at t0, changing only what edit sets:
// the upsert leaves u persistent or ephemeral as it is.
func (f fixture) update(t *testing.T, st store.Store, u store.User, edit func(up *store.UserUpsert)) store.User {
	t.Helper()
	up := store.UserUpsert{UserKey: u.Key(), Now: t0}
	edit(&up)
	got, err := st.UpsertUser(t.Context(), up)
	mustNil(t, "UpsertUser (update)", err)
	if got.ID != u.ID {
		t.Fatalf("update of user %d returned user %d", u.ID, got.ID)
	}
	return got
}

// values sets attribute values of u, keeping its others.
func (f fixture) values(t *testing.T, st store.Store, u store.User, vals ...store.AttributeValue) {
	t.Helper()
	f.update(t, st, u, func(up *store.UserUpsert) { up.Attributes = vals })
}

// member makes groups exactly u's groups within s.
func (f fixture) member(t *testing.T, st store.Store, u store.User, s store.Scope, groups ...int64) {
	t.Helper()
	f.update(t, st, u, func(up *store.UserUpsert) { up.SetGroups, up.GroupScope, up.Groups = true, s, groups })
}

func (f fixture) data(t *testing.T, st store.Store, userID int64, s store.Scope) store.UserData {
	t.Helper()
	d, err := st.UserData(t.Context(), userID, s)
	mustNil(t, "UserData", err)
	return d
}

func (f fixture) scope() store.Scope { return store.TenantWide(f.account.ID) }

func (f fixture) tenantScope(t *testing.T, st store.Store, name string) store.Scope {
	t.Helper()
	et, err := st.EnsureEmbedTenant(t.Context(), f.account.ID, name, 0)
	mustNil(t, "EnsureEmbedTenant", err)
	return store.Scope{AccountID: f.account.ID, EmbedTenantID: et.ID}
}

func (f fixture) groups(t *testing.T, st store.Store, s store.Scope, names ...string) []store.Group {
	t.Helper()
	defs := make([]store.GroupDef, len(names))
	for i, n := range names {
		defs[i] = store.GroupDef{Name: n}
	}
	mustNil(t, "UpsertDefinitions", st.UpsertDefinitions(t.Context(), s, defs, nil))
	res, err := st.Lookup(t.Context(), store.Lookup{Scope: s, GroupNames: names})
	mustNil(t, "Lookup", err)
	gs := res.Groups
	if len(gs) != len(names) {
		t.Fatalf("Lookup returned %d groups, want %d", len(gs), len(names))
	}
	slices.SortFunc(gs, func(a, b store.Group) int { return cmp.Compare(a.ID, b.ID) })
	return gs
}

func (f fixture) attrs(t *testing.T, st store.Store, s store.Scope, names ...string) []store.Attribute {
	t.Helper()
	defs := make([]store.AttributeDef, len(names))
	for i, n := range names {
		defs[i] = store.AttributeDef{Name: n, Type: store.TypeString}
	}
	mustNil(t, "UpsertDefinitions", st.UpsertDefinitions(t.Context(), s, nil, defs))
	res, err := st.Lookup(t.Context(), store.Lookup{Scope: s, AttrNames: names})
	mustNil(t, "Lookup", err)
	as := res.Attributes
	if len(as) != len(names) {
		t.Fatalf("Lookup returned %d attributes, want %d", len(as), len(names))
	}
	slices.SortFunc(as, func(a, b store.Attribute) int { return cmp.Compare(a.ID, b.ID) })
	return as
}

// lookupGroups and lookupAttrs return the definitions of s with these
// names, as Lookup finds them.
func lookupGroups(t *testing.T, st store.Store, s store.Scope, names ...string) []store.Group {
	t.Helper()
	res, err := st.Lookup(t.Context(), store.Lookup{Scope: s, GroupNames: names})
	mustNil(t, "Lookup", err)
	return res.Groups
}

func lookupAttrs(t *testing.T, st store.Store, s store.Scope, names ...string) []store.Attribute {
	t.Helper()
	res, err := st.Lookup(t.Context(), store.Lookup{Scope: s, AttrNames: names})
	mustNil(t, "Lookup", err)
	return res.Attributes
}

func val(attributeID int64, v string) store.AttributeValue {
	var raw json.RawMessage
	if v != "" {
		raw = json.RawMessage(v)
	}
	return store.AttributeValue{AttributeID: attributeID, Value: raw}
}

func (f fixture) session(t *testing.T, st store.Store, userID int64, hash string, expires time.Time) {
	t.Helper()
	mustNil(t, "CreateSession", st.CreateSession(t.Context(), []byte(hash), store.Session{
		AccountID: f.account.ID, UserID: userID, DeploymentID: f.deploy.ID, CreatedAt: t0, ExpiresAt: expires,
	}))
}

func (f fixture) thread(t *testing.T, st store.Store, userID int64, chatID string) {
	t.Helper()
	mustNil(t, "CreateThread", st.CreateThread(t.Context(), store.Thread{
		AccountID: f.account.ID, ChatID: chatID, AgentID: "7", UserID: userID, CreatedAt: t0, UpdatedAt: t0,
	}))
	mustNil(t, "AppendMessages", st.AppendMessages(t.Context(), f.account.ID, chatID, 3, []store.ThreadMessage{
		{ID: "m1", Sort: 1, Body: json.RawMessage(`{"role":"user"}`)},
	}))
}

func names[T any](items []T, name func(T) string) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = name(it)
	}
	return out
}

func groupNames(gs []store.Group) []string {
	return names(gs, func(g store.Group) string { return g.Name })
}

func attrNames(as []store.Attribute) []string {
	return names(as, func(a store.Attribute) string { return a.Name })
}

func valueNames(vs []store.UserAttribute) []string {
	return names(vs, func(v store.UserAttribute) string { return v.Name })
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}

var errBoom = errors.New("storetest: boom")

// ctx returns the test's context; a helper so cases read uniformly.
func ctx(t *testing.T) context.Context { return t.Context() }
