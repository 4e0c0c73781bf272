package storetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/embedkit/embedkit/store"
)

var quotaRules = []rule{
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
		name: "TakeQuota counts up to max per account and key",
		doc:  "The last use below max succeeds, the next is ErrLimit; other keys and other accounts count apart; a use inside a rolled-back transaction is undone.",
		fn: func(t *testing.T, st store.Store) {
			a := newFixture(t, st, "acme").account
			b := newFixture(t, st, "other").account
			exp := t0.Add(time.Minute)
			for i := range 3 {
				mustNil(t, fmt.Sprintf("use %d", i+1), st.TakeQuota(ctx(t), a.ID, "k", exp, 3))
			}
			wantErr(t, "use 4 of 3", st.TakeQuota(ctx(t), a.ID, "k", exp, 3), store.ErrLimit)
			mustNil(t, "a higher max", st.TakeQuota(ctx(t), a.ID, "k", exp, 4))
			mustNil(t, "another key", st.TakeQuota(ctx(t), a.ID, "k2", exp, 1))
			mustNil(t, "another account", st.TakeQuota(ctx(t), b.ID, "k", exp, 1))
			errBoom := errors.New("boom")
			err := st.InTx(ctx(t), func(tx store.Tx) error {
				if err := tx.TakeQuota(ctx(t), b.ID, "r", exp, 1); err != nil {
					return err
				}
				return errBoom
			})
			wantErr(t, "rolled back transaction", err, errBoom)
			mustNil(t, "use after rollback", st.TakeQuota(ctx(t), b.ID, "r", exp, 1))
			wantErr(t, "second use", st.TakeQuota(ctx(t), b.ID, "r", exp, 1), store.ErrLimit)
		},
	},
	{
		name: "TakeQuota is exact under concurrency",
		doc:  "64 concurrent transactions taking a counter of max 10 succeed exactly 10 times.",
		fn: func(t *testing.T, st store.Store) {
			a := newFixture(t, st, "acme").account
			var ok, limited atomic.Int64
			var wg sync.WaitGroup
			for range 64 {
				wg.Go(func() {
					err := st.InTx(ctx(t), func(tx store.Tx) error {
						return tx.TakeQuota(ctx(t), a.ID, "k", t0.Add(time.Minute), 10)
					})
					switch {
					case err == nil:
						ok.Add(1)
					case errors.Is(err, store.ErrLimit):
						limited.Add(1)
					default:
						t.Errorf("TakeQuota: %v", err)
					}
				})
			}
			wg.Wait()
			if ok.Load() != 10 || limited.Load() != 54 {
				t.Errorf("%d succeeded and %d were ErrLimit, want 10 and 54", ok.Load(), limited.Load())
			}
		},
	},
	{
		name: "CountEmbedTenants counts the account's tenants",
		doc:  "The count covers the account's embed tenants only, inside and outside a transaction.",
		fn: func(t *testing.T, st store.Store) {
			a := newFixture(t, st, "acme").account
			b := newFixture(t, st, "other").account
			for _, n := range []string{"t1", "t2", "t3"} {
				_, err := st.EnsureEmbedTenant(ctx(t), a.ID, n)
				mustNil(t, "EnsureEmbedTenant", err)
			}
			_, err := st.EnsureEmbedTenant(ctx(t), b.ID, "t1")
			mustNil(t, "EnsureEmbedTenant", err)
			n, err := st.CountEmbedTenants(ctx(t), a.ID)
			mustNil(t, "CountEmbedTenants", err)
			if n != 3 {
				t.Errorf("CountEmbedTenants = %d, want 3", n)
			}
			mustNil(t, "InTx", st.InTx(ctx(t), func(tx store.Tx) error {
				n, err := tx.CountEmbedTenants(ctx(t), b.ID)
				if err == nil && n != 1 {
					t.Errorf("CountEmbedTenants in a transaction = %d, want 1", n)
				}
				return err
			}))
		},
	},
	{
		name: "DeleteExpired deletes expired and used session ids, expired tokens and counters",
		doc:  "The janitor's call: rows expired at now (and exchanged session ids) are deleted, at most limit per call, and live ones stay usable.",
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
			mustNil(t, "TakeQuota", st.TakeQuota(ctx(t), f.account.ID, "old", t0.Add(time.Minute), 1))
			mustNil(t, "TakeQuota", st.TakeQuota(ctx(t), f.account.ID, "live", t0.Add(time.Hour), 1))

			now := t0.Add(2 * time.Minute)
			// "live2" is used too: old, used, live2, tok-old and the old counter.
			total := 0
			for range 10 {
				n, err := st.DeleteExpired(ctx(t), now, 2)
				mustNil(t, "DeleteExpired", err)
				if n > 2 {
					t.Fatalf("DeleteExpired(limit 2) = %d", n)
				}
				total += n
				if n == 0 {
					break
				}
			}
			if total != 5 {
				t.Errorf("deleted %d rows in all, want 5", total)
			}
			_, err = st.ExchangeSession(ctx(t), []byte("live"), []byte("tok-new"), t0.Add(time.Hour), now)
			mustNil(t, "a live session id after DeleteExpired", err)
			_, err = st.SessionByToken(ctx(t), []byte("tok-live"), now)
			mustNil(t, "a live token after DeleteExpired", err)
			mustNil(t, "an expired counter starts again", st.TakeQuota(ctx(t), f.account.ID, "old", t0.Add(time.Hour), 1))
			wantErr(t, "a live counter keeps its count", st.TakeQuota(ctx(t), f.account.ID, "live", t0.Add(time.Hour), 1), store.ErrLimit)
		},
	},
}
