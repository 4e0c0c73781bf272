package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/embedkit/embedkit/store"
)

var limitRules = []rule{
	{
		name: "an account's limits round-trip",
		doc:  "SaveAccount stores Account.Limits and every read returns them; saving the account again with zero limits clears them.",
		fn: func(t *testing.T, st store.Store) {
			lim := store.Limits{RunningTurns: 7, RunningTurnsPerUser: 2, NewEphemeralUsersPerMinute: 30, EmbedTenants: 4, ThreadTurns: 9, ThreadBytes: 1 << 20}
			a, err := st.SaveAccount(ctx(t), store.Account{Name: "acme", Plan: store.PlanPremium, Limits: lim})
			mustNil(t, "SaveAccount", err)
			if a.Limits != lim {
				t.Errorf("SaveAccount returned limits %+v, want %+v", a.Limits, lim)
			}
			byID, err := st.AccountByID(ctx(t), a.ID)
			mustNil(t, "AccountByID", err)
			byName, err := st.AccountByName(ctx(t), "acme")
			mustNil(t, "AccountByName", err)
			if byID.Limits != lim || byName.Limits != lim {
				t.Errorf("read limits %+v and %+v, want %+v", byID.Limits, byName.Limits, lim)
			}
			_, err = st.SaveAccount(ctx(t), store.Account{Name: "acme", Plan: store.PlanPremium})
			mustNil(t, "SaveAccount without limits", err)
			byID, err = st.AccountByID(ctx(t), a.ID)
			mustNil(t, "AccountByID", err)
			if byID.Limits != (store.Limits{}) {
				t.Errorf("limits after clearing = %+v, want zero", byID.Limits)
			}
		},
	},
	{
		name: "NewEphemeralPerMinute counts the ephemeral users created in the minute",
		doc:  "With NewEphemeralPerMinute N, N ephemeral users can be created in the clock minute of Now and the next is ErrLimit (nothing stored); the next minute starts again; every ephemeral user created under a limit counts, one created without a limit does not; updating an existing ephemeral user, creating a persistent one or converting one creates no ephemeral user and is not refused; accounts count apart.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			other := newFixture(t, st, "other")
			minute := t0.Truncate(time.Minute)
			eph := func(f fixture, ext string, now time.Time) store.UserUpsert {
				up := f.upsert(ext)
				up.Persistent, up.EphemeralExpiresAt, up.Now, up.NewEphemeralPerMinute = false, now.Add(time.Hour), now, 2
				return up
			}
			for i, now := range []time.Time{minute, minute.Add(59 * time.Second)} {
				_, err := st.UpsertUser(ctx(t), eph(f, fmt.Sprint("e", i), now))
				mustNil(t, "ephemeral user under the limit", err)
			}
			_, err := st.UpsertUser(ctx(t), eph(f, "e2", minute.Add(30*time.Second)))
			wantErr(t, "third ephemeral user of the minute", err, store.ErrLimit)
			_, err = st.UserByKey(ctx(t), store.UserKey{AccountID: f.account.ID, ExternalID: "e2"}, minute)
			wantErr(t, "refused user", err, store.ErrNotFound)
			// Existing users, persistent users and conversions are not refused.
			up := eph(f, "e0", minute.Add(40*time.Second))
			up.DisplayName = ptr("again")
			_, err = st.UpsertUser(ctx(t), up)
			mustNil(t, "returning ephemeral user", err)
			up = eph(f, "p", minute.Add(40*time.Second))
			up.Persistent = true
			_, err = st.UpsertUser(ctx(t), up)
			mustNil(t, "persistent user in a full minute", err)
			up = eph(f, "e1", minute.Add(40*time.Second))
			up.Persistent = true
			_, err = st.UpsertUser(ctx(t), up)
			mustNil(t, "conversion in a full minute", err)
			_, err = st.UpsertUser(ctx(t), eph(other, "e2", minute.Add(30*time.Second)))
			mustNil(t, "another account's ephemeral user", err)
			// A higher limit admits more in the same minute; 0 means no limit.
			up = eph(f, "e3", minute.Add(50*time.Second))
			up.NewEphemeralPerMinute = 3
			_, err = st.UpsertUser(ctx(t), up)
			mustNil(t, "a higher limit", err)
			up = eph(f, "e4", minute.Add(50*time.Second))
			up.NewEphemeralPerMinute = 0
			_, err = st.UpsertUser(ctx(t), up)
			mustNil(t, "no limit", err)
			// The user created without a limit does not count: e0, e1 and
			// e3 leave room for one more under a limit of 4, then it is full.
			up = eph(f, "e5", minute.Add(55*time.Second))
			up.NewEphemeralPerMinute = 4
			_, err = st.UpsertUser(ctx(t), up)
			mustNil(t, "a limit of 4 after 3 ephemeral users counted and one created without a limit", err)
			up = eph(f, "e6", minute.Add(56*time.Second))
			up.NewEphemeralPerMinute = 4
			_, err = st.UpsertUser(ctx(t), up)
			wantErr(t, "a limit of 4 after 4 ephemeral users counted", err, store.ErrLimit)
			// The next minute starts from zero.
			for i := range 2 {
				_, err = st.UpsertUser(ctx(t), eph(f, fmt.Sprint("next", i), minute.Add(time.Minute+time.Duration(i)*time.Second)))
				mustNil(t, "next minute", err)
			}
			_, err = st.UpsertUser(ctx(t), eph(f, "next2", minute.Add(time.Minute+10*time.Second)))
			wantErr(t, "next minute full", err, store.ErrLimit)
		},
	},
	{
		name: "DeleteUser gives back a persistent user's place, not an ephemeral creation's",
		doc:  "DeleteUser of a persistent user gives its place in MaxUsers back; DeleteUser of an ephemeral user does not give back its place in its minute's count of NewEphemeralPerMinute (its creation stays counted).",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			minute := t0.Truncate(time.Minute)
			eph := func(ext string) store.UserUpsert {
				up := f.upsert(ext)
				up.Persistent, up.EphemeralExpiresAt, up.Now, up.NewEphemeralPerMinute = false, minute.Add(time.Hour), minute.Add(10*time.Second), 1
				return up
			}
			u, err := st.UpsertUser(ctx(t), eph("e1"))
			mustNil(t, "the minute's only ephemeral user", err)
			mustNil(t, "DeleteUser", st.DeleteUser(ctx(t), u.ID))
			_, err = st.UpsertUser(ctx(t), eph("e2"))
			wantErr(t, "a deleted user's creation still counts", err, store.ErrLimit)
			p := f.upsert("p1")
			p.Persistent, p.MaxUsers, p.Now = true, 1, minute
			pu, err := st.UpsertUser(ctx(t), p)
			mustNil(t, "the only persistent user", err)
			mustNil(t, "DeleteUser", st.DeleteUser(ctx(t), pu.ID))
			p.UserKey.ExternalID = "p2"
			_, err = st.UpsertUser(ctx(t), p)
			mustNil(t, "a persistent user in the place given back", err)
		},
	},
	{
		name: "an expired ephemeral user replaced counts as a new one",
		doc:  "Replacing an expired ephemeral user with a new ephemeral one creates an ephemeral user: it counts toward NewEphemeralPerMinute and is refused with ErrLimit in a full minute, leaving the expired user to its fate and storing nothing.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			exp := t0.Add(time.Minute)
			old := f.ephemeral(t, st, "old", exp)
			now := exp.Add(time.Minute)
			up := f.upsert("fill")
			up.Persistent, up.EphemeralExpiresAt, up.Now, up.NewEphemeralPerMinute = false, now.Add(time.Hour), now, 1
			_, err := st.UpsertUser(ctx(t), up)
			mustNil(t, "the minute's only ephemeral user", err)
			up.UserKey = old.Key()
			_, err = st.UpsertUser(ctx(t), up)
			wantErr(t, "replacement in a full minute", err, store.ErrLimit)
			_, err = st.UserByID(ctx(t), old.ID, t0)
			mustNil(t, "the expired user is still stored (visible at an earlier now)", err)
			up.Now = now.Add(time.Minute)
			nu, err := st.UpsertUser(ctx(t), up)
			mustNil(t, "replacement in the next minute", err)
			if nu.ID == old.ID {
				t.Error("the expired user was reused")
			}
		},
	},
	{
		name: "DeleteExpired deletes what has expired, at most limit of each kind",
		doc:  "The janitor's call: expired and exchanged session ids, expired tokens, past counters and expired ephemeral users (with everything they own) are deleted, at most limit of each kind per call; it returns fewer than limit once nothing expired is left; live rows stay usable.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			u := f.user(t, st, "u")
			f.session(t, st, u.ID, "old", t0.Add(time.Minute))
			f.session(t, st, u.ID, "used", t0.Add(time.Hour))
			f.session(t, st, u.ID, "live", t0.Add(time.Hour))
			f.session(t, st, u.ID, "live2", t0.Add(time.Hour))
			_, err := st.ExchangeSession(ctx(t), []byte("used"), []byte("tok-old"), t0.Add(time.Minute), t0)
			mustNil(t, "ExchangeSession", err)
			_, err = st.ExchangeSession(ctx(t), []byte("live2"), []byte("tok-live"), t0.Add(time.Hour), t0)
			mustNil(t, "ExchangeSession", err)
			var expired []store.User
			for i := range 5 {
				up := f.upsert(fmt.Sprint("old-", i))
				up.Persistent, up.EphemeralExpiresAt, up.NewEphemeralPerMinute = false, t0.Add(time.Duration(i+1)*time.Minute), 100
				e, err := st.UpsertUser(ctx(t), up)
				mustNil(t, "UpsertUser", err)
				expired = append(expired, e)
			}
			f.thread(t, st, expired[0].ID, "chat-old")
			f.session(t, st, expired[1].ID, "sess-of-expired", t0.Add(time.Hour))
			live := f.ephemeral(t, st, "live", t0.Add(time.Hour))
			// The current minute's counter: one of two places is taken.
			now := t0.Add(10 * time.Minute)
			up := f.upsert("this-minute")
			up.Persistent, up.EphemeralExpiresAt, up.Now, up.NewEphemeralPerMinute = false, now.Add(time.Hour), now, 2
			_, err = st.UpsertUser(ctx(t), up)
			mustNil(t, "UpsertUser", err)

			// old, used, live2 (used too), tok-old and 5 users, besides counters.
			n, err := st.DeleteExpired(ctx(t), now, 3)
			mustNil(t, "DeleteExpired", err)
			if n < 3 || n > 4*3 {
				t.Errorf("first call deleted %d, want 3 to 12 (at most 3 of each of four kinds)", n)
			}
			left := 0
			for _, e := range expired {
				if _, err := st.UserByID(ctx(t), e.ID, t0); err == nil {
					left++
				}
			}
			if left < 2 {
				t.Errorf("the first call deleted %d expired users, want at most 3", 5-left)
			}
			total := n
			for range 10 {
				n, err = st.DeleteExpired(ctx(t), now, 3)
				mustNil(t, "DeleteExpired", err)
				total += n
				if n < 3 {
					break
				}
			}
			if n >= 3 {
				t.Fatalf("DeleteExpired(limit 3) still returned %d after 10 calls", n)
			}
			if total < 9 {
				t.Errorf("deleted %d rows in all, want at least 9", total)
			}
			n, err = st.DeleteExpired(ctx(t), now, 3)
			mustNil(t, "DeleteExpired with nothing left", err)
			if n != 0 {
				t.Errorf("DeleteExpired after a short call = %d, want 0", n)
			}
			for _, e := range expired {
				_, err := st.UserByID(ctx(t), e.ID, t0)
				wantErr(t, "expired user (at an earlier now)", err, store.ErrNotFound)
			}
			_, err = st.Thread(ctx(t), f.account.ID, "chat-old")
			wantErr(t, "expired user's thread", err, store.ErrNotFound)
			_, err = st.ExchangeSession(ctx(t), []byte("sess-of-expired"), []byte("tok-x"), t0.Add(time.Hour), t0)
			wantErr(t, "expired user's session id (at an earlier now)", err, store.ErrNotFound)
			_, err = st.ExchangeSession(ctx(t), []byte("used"), []byte("tok-y"), t0.Add(time.Hour), t0)
			wantErr(t, "used session id", err, store.ErrNotFound)

			_, err = st.ExchangeSession(ctx(t), []byte("live"), []byte("tok-new"), t0.Add(time.Hour), now)
			mustNil(t, "a live session id after DeleteExpired", err)
			_, err = st.SessionByToken(ctx(t), []byte("tok-live"), now)
			mustNil(t, "a live token after DeleteExpired", err)
			for _, x := range []store.User{u, live} {
				_, err = st.UserByID(ctx(t), x.ID, now)
				mustNil(t, "a live user after DeleteExpired", err)
			}
			// The current minute keeps its count: one place is left.
			up.UserKey.ExternalID = "this-minute-2"
			_, err = st.UpsertUser(ctx(t), up)
			mustNil(t, "the second place of the minute", err)
			up.UserKey.ExternalID = "this-minute-3"
			_, err = st.UpsertUser(ctx(t), up)
			wantErr(t, "a live counter keeps its count", err, store.ErrLimit)
		},
	},
}
