package memstore

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/embedkit/embedkit/store"
)

// checkInvariants verifies that the indexes agree with the tables and that
// no row references a deleted one (what foreign keys with ON DELETE CASCADE
// guarantee in the GORM adapter).
func checkInvariants(t *testing.T, d *db) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("invariant: "+format, args...)
	}
	for name, id := range d.accountByName {
		if d.accounts[id].Name != name {
			fail("accountByName[%q] = %d", name, id)
		}
	}
	if len(d.accountByName) != len(d.accounts) {
		fail("%d accounts, %d names", len(d.accounts), len(d.accountByName))
	}
	persistent := map[int64]int{}
	indexed := 0
	for id, u := range d.users {
		if _, ok := d.accounts[u.AccountID]; !ok {
			fail("user %d of a missing account", id)
		}
		switch {
		case u.ExternalID != "":
			indexed++
			if d.userByExt[nameKey{u.AccountID, u.ExternalID}] != id {
				fail("user %d not indexed by external id", id)
			}
			if _, eph := d.ephemerals[id]; eph != u.Ephemeral {
				fail("user %d ephemeral=%v, in ephemerals=%v", id, u.Ephemeral, eph)
			}
			if !u.Ephemeral {
				persistent[u.AccountID]++
			}
		case u.InternalID != "":
			indexed++
			if d.userByInt[nameKey{u.AccountID, u.InternalID}] != id {
				fail("user %d not indexed by internal id", id)
			}
		}
	}
	if indexed != len(d.userByExt)+len(d.userByInt) {
		fail("%d users, %d index entries", indexed, len(d.userByExt)+len(d.userByInt))
	}
	for id := range d.ephemerals {
		if !d.users[id].Ephemeral {
			fail("ephemerals holds %d", id)
		}
	}
	for acc, n := range d.persistent {
		if persistent[acc] != n {
			fail("account %d counts %d persistent users, has %d", acc, n, persistent[acc])
		}
	}
	for acc, n := range persistent {
		if d.persistent[acc] != n {
			fail("account %d counts %d persistent users, has %d", acc, d.persistent[acc], n)
		}
	}
	for k, n := range d.ephemeralCounts {
		if _, ok := d.accounts[k.accountID]; !ok || n <= 0 || !k.minute.Equal(k.minute.Truncate(time.Minute)) {
			fail("ephemeral counter %+v = %d", k, n)
		}
	}
	checkCatalog := func(kind string, ids map[store.Scope][]int64, scopeOf func(int64) (store.Scope, string, bool), byName map[scopeKey]int64, total int) {
		n := 0
		for s, list := range ids {
			if len(list) == 0 || !slices.IsSorted(list) {
				fail("%s ids of %+v = %v", kind, s, list)
			}
			for _, id := range list {
				sc, name, ok := scopeOf(id)
				if !ok || sc != s || byName[scopeKey{s, name}] != id {
					fail("%s %d listed in %+v", kind, id, s)
				}
			}
			n += len(list)
		}
		if n != total || len(byName) != total {
			fail("%d %ss, %d listed, %d named", total, kind, n, len(byName))
		}
	}
	checkCatalog("group", d.groupIDs, func(id int64) (store.Scope, string, bool) {
		g, ok := d.groups[id]
		return g.Scope, g.Name, ok
	}, d.groupByName, len(d.groups))
	checkCatalog("attribute", d.attributeIDs, func(id int64) (store.Scope, string, bool) {
		a, ok := d.attributes[id]
		return a.Scope, a.Name, ok
	}, d.attributeByKey, len(d.attributes))

	pairs := func(kind string, fwd, rev map[int64]map[int64]struct{}, left, right func(int64) bool) {
		count := 0
		for a, in := range fwd {
			if len(in) == 0 || !left(a) {
				fail("%s: dangling or empty entry %d", kind, a)
			}
			for b := range in {
				if _, ok := rev[b][a]; !ok || !right(b) {
					fail("%s: %d-%d not mirrored", kind, a, b)
				}
				count++
			}
		}
		for _, in := range rev {
			count -= len(in)
		}
		if count != 0 {
			fail("%s: sides differ by %d", kind, count)
		}
	}
	isUser := func(id int64) bool { _, ok := d.users[id]; return ok }
	isGroup := func(id int64) bool { _, ok := d.groups[id]; return ok }
	isAttr := func(id int64) bool { _, ok := d.attributes[id]; return ok }
	pairs("members", d.members, d.groupUsers, isUser, isGroup)
	valueKeys := map[int64]map[int64]struct{}{}
	for u, in := range d.values {
		valueKeys[u] = map[int64]struct{}{}
		for a := range in {
			valueKeys[u][a] = struct{}{}
		}
	}
	pairs("values", valueKeys, d.valueUsers, isUser, isAttr)

	grants := func(kind string, byUser map[int64]map[string]struct{}, userOf func(string) (int64, bool), total int) {
		n := 0
		for u, in := range byUser {
			if len(in) == 0 || !isUser(u) {
				fail("%s of missing user %d", kind, u)
			}
			for h := range in {
				if owner, ok := userOf(h); !ok || owner != u {
					fail("%s %q indexed under user %d", kind, h, u)
				}
			}
			n += len(in)
		}
		if n != total {
			fail("%d %ss, %d indexed", total, kind, n)
		}
	}
	grants("session", d.userSess, func(h string) (int64, bool) { s, ok := d.sessions[h]; return s.grant.UserID, ok }, len(d.sessions))
	grants("token", d.userTokens, func(h string) (int64, bool) { g, ok := d.tokens[h]; return g.UserID, ok }, len(d.tokens))

	n := 0
	for u, in := range d.userThreads {
		if len(in) == 0 || !isUser(u) {
			fail("threads of missing user %d", u)
		}
		for k := range in {
			if d.threads[k].UserID != u {
				fail("thread %+v indexed under user %d", k, u)
			}
		}
		n += len(in)
	}
	if n != len(d.threads) {
		fail("%d threads, %d indexed", len(d.threads), n)
	}
	for k, in := range d.messages {
		if _, ok := d.threads[k]; !ok || len(in) == 0 {
			fail("messages of missing thread %+v", k)
		}
		for id, m := range in {
			if m.ID != id {
				fail("message %q stored as %q", m.ID, id)
			}
		}
	}
}

// TestInvariantsHold runs random transactions, some committed and some
// rolled back, and checks the indexes after each.
func TestInvariantsHold(t *testing.T) {
	for round := range 50 {
		st := New(WithClock(fixedClock))
		seed(t, st)
		checkInvariants(t, st.d)
		r := rand.New(rand.NewPCG(uint64(round), 2))
		for range 30 {
			fail := r.IntN(3) == 0
			st.InTx(t.Context(), func(tx store.Tx) error {
				for range 1 + r.IntN(10) {
					randomOp(t.Context(), r, tx)
				}
				if fail {
					return errBoom
				}
				return nil
			})
			checkInvariants(t, st.d)
		}
	}
}
