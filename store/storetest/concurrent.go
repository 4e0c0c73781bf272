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

// workers is the number of goroutines of the concurrency cases.
const workers = 32

// parallel runs fn(i) for i in [0, n) at once, released together, and
// returns the errors by i.
func parallel(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range n {
		done.Go(func() {
			start.Wait()
			errs[i] = fn(i)
		})
	}
	start.Done()
	done.Wait()
	return errs
}

var concurrentRules = []rule{
	{
		name: "DeleteExpired spares a user converted meanwhile",
		doc:  "Expiry and Users contracts: a DeleteExpired that runs, at a time past an ephemeral user's expiry, while another transaction converts that user to persistent, deletes nothing of the converted user once that transaction commits, and the user keeps its place in the count.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			e := f.ephemeral(t, st, "e", t0.Add(time.Minute))
			var (
				once    sync.Once
				deleted = make(chan error, 1)
			)
			mustNil(t, "InTx", st.InTx(ctx(t), func(tx store.Tx) error {
				up := f.upsert("e")
				up.MaxUsers = 1
				if _, err := tx.UpsertUser(ctx(t), up); err != nil {
					return err
				}
				once.Do(func() {
					go func() {
						_, err := st.DeleteExpired(ctx(t), t0.Add(time.Hour), 100)
						deleted <- err
					}()
				})
				// Give the delete time to reach the database while this
				// transaction is open (the outcome must not depend on it).
				time.Sleep(50 * time.Millisecond)
				return nil
			}))
			mustNil(t, "DeleteExpired", <-deleted)
			u, err := st.UserByID(ctx(t), e.ID, t0.Add(time.Hour))
			mustNil(t, "the converted user", err)
			if u.Ephemeral {
				t.Errorf("converted user = %+v, want persistent", u)
			}
			up := f.upsert("other")
			up.MaxUsers = 1
			_, err = st.UpsertUser(ctx(t), up)
			wantErr(t, "a second persistent user under a limit of 1", err, store.ErrLimit)
		},
	},
	{
		name: "simultaneous first upserts yield one user",
		doc:  "Users contract: simultaneous first calls for one externalId all succeed and return the same user.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			ids := make([]int64, workers)
			errs := parallel(workers, func(i int) error {
				up := f.upsert("same")
				up.MaxUsers = 10
				up.DisplayName = ptr(fmt.Sprint("name-", i))
				u, err := st.UpsertUser(ctx(t), up)
				ids[i] = u.ID
				return err
			})
			for i, err := range errs {
				mustNil(t, fmt.Sprint("upsert ", i), err)
				if ids[i] != ids[0] {
					t.Errorf("upsert %d returned user %d, upsert 0 user %d", i, ids[i], ids[0])
				}
			}
			// One place of the limit is taken, not 32: nine more fit.
			for i := range 9 {
				up := f.upsert(fmt.Sprint("other-", i))
				up.MaxUsers = 10
				_, err := st.UpsertUser(ctx(t), up)
				mustNil(t, "fill the limit", err)
			}
			up := f.upsert("one-too-many")
			up.MaxUsers = 10
			_, err := st.UpsertUser(ctx(t), up)
			wantErr(t, "over the limit", err, store.ErrLimit)
		},
	},
	{
		name: "simultaneous first upserts at a limit of one all succeed",
		doc:  "Users contract: a user holds one place of the limit; simultaneous first calls for one externalId with MaxUsers 1 all succeed (none is refused for a place its own user holds).",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			errs := parallel(workers, func(i int) error {
				return st.InTx(ctx(t), func(tx store.Tx) error {
					up := f.upsert("only")
					up.MaxUsers = 1
					_, err := tx.UpsertUser(ctx(t), up)
					return err
				})
			})
			for i, err := range errs {
				mustNil(t, fmt.Sprint("upsert ", i), err)
			}
			up := f.upsert("second")
			up.MaxUsers = 1
			_, err := st.UpsertUser(ctx(t), up)
			wantErr(t, "a second user", err, store.ErrLimit)
		},
	},
	{
		name: "simultaneous first upserts in transactions yield one user",
		doc:  "The same rule inside InTx with more writes per transaction (as generate-session does): every transaction commits and they share one user.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			gs := f.groups(t, st, f.scope(), "sales")
			ids := make([]int64, workers)
			errs := parallel(workers, func(i int) error {
				return st.InTx(ctx(t), func(tx store.Tx) error {
					up := f.upsert("same")
					up.SetGroups, up.GroupScope, up.Groups = true, f.scope(), []int64{gs[0].ID}
					u, err := tx.UpsertUser(ctx(t), up)
					if err != nil {
						return err
					}
					ids[i] = u.ID
					return tx.CreateSession(ctx(t), fmt.Appendf(nil, "sess-%d", i), store.Session{AccountID: f.account.ID, UserID: u.ID, DeploymentID: 1, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)})
				})
			})
			for i, err := range errs {
				mustNil(t, fmt.Sprint("transaction ", i), err)
				if ids[i] != ids[0] {
					t.Errorf("transaction %d used user %d, transaction 0 user %d", i, ids[i], ids[0])
				}
			}
		},
	},
	{
		name: "persistent user limit is exact under concurrency",
		doc:  "32 goroutines each create a distinct persistent user with MaxUsers 10: exactly 10 succeed and the others fail with ErrLimit.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			const limit = 10
			errs := parallel(workers, func(i int) error {
				up := f.upsert(fmt.Sprint("user-", i))
				up.MaxUsers = limit
				_, err := st.UpsertUser(ctx(t), up)
				return err
			})
			ok, limited := 0, 0
			for _, err := range errs {
				switch {
				case err == nil:
					ok++
				case errors.Is(err, store.ErrLimit):
					limited++
				default:
					t.Errorf("unexpected error: %v", err)
				}
			}
			if ok != limit || limited != workers-limit {
				t.Errorf("%d succeeded and %d hit the limit, want %d and %d", ok, limited, limit, workers-limit)
			}
		},
	},
	{
		name: "a large limit is exact under concurrency",
		doc:  "The limit holds when creations start far from it and reach it under load: 32 goroutines create 2 users each with MaxUsers 40; exactly 40 succeed.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			const limit = 40
			var ok, limited atomic.Int32
			errs := parallel(workers, func(i int) error {
				for j := range 2 {
					up := f.upsert(fmt.Sprintf("user-%d-%d", i, j))
					up.MaxUsers = limit
					_, err := st.UpsertUser(ctx(t), up)
					switch {
					case err == nil:
						ok.Add(1)
					case errors.Is(err, store.ErrLimit):
						limited.Add(1)
					default:
						return err
					}
				}
				return nil
			})
			for _, err := range errs {
				mustNil(t, "upsert", err)
			}
			if ok.Load() != limit || limited.Load() != 2*workers-limit {
				t.Errorf("%d succeeded and %d hit the limit, want %d and %d", ok.Load(), limited.Load(), limit, 2*workers-limit)
			}
		},
	},
	{
		name: "failed transactions among concurrent ones leave nothing behind",
		doc:  "Atomicity under load: of 32 simultaneous transactions, those whose fn fails keep none of their writes and those that succeed keep all of theirs, whatever the adapter batches underneath.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			gs := f.groups(t, st, f.scope(), "sales")
			errs := parallel(workers, func(i int) error {
				return st.InTx(ctx(t), func(tx store.Tx) error {
					up := f.upsert(fmt.Sprint("user-", i))
					up.MaxUsers = workers
					up.SetGroups, up.GroupScope, up.Groups = true, f.scope(), []int64{gs[0].ID}
					u, err := tx.UpsertUser(ctx(t), up)
					if err != nil {
						return err
					}
					if err := tx.CreateSession(ctx(t), fmt.Appendf(nil, "sess-%d", i), store.Session{AccountID: f.account.ID, UserID: u.ID, DeploymentID: 1, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
						return err
					}
					if i%2 == 1 {
						return errBoom
					}
					return nil
				})
			})
			for i, err := range errs {
				if i%2 == 1 {
					if err != errBoom {
						t.Errorf("transaction %d: err = %v, want fn's error", i, err)
					}
					_, err := st.UserByKey(ctx(t), store.UserKey{AccountID: f.account.ID, ExternalID: fmt.Sprint("user-", i)}, t0)
					wantErr(t, "user of a failed transaction", err, store.ErrNotFound)
					_, err = st.ExchangeSession(ctx(t), fmt.Appendf(nil, "sess-%d", i), fmt.Appendf(nil, "tok-%d", i), t0.Add(time.Hour), t0)
					wantErr(t, "session of a failed transaction", err, store.ErrNotFound)
					continue
				}
				mustNil(t, fmt.Sprint("transaction ", i), err)
				u, err := st.UserByKey(ctx(t), store.UserKey{AccountID: f.account.ID, ExternalID: fmt.Sprint("user-", i)}, t0)
				mustNil(t, "user of a committed transaction", err)
				if ms := f.data(t, st, u.ID, f.scope()).Groups; len(ms) != 1 {
					t.Errorf("user %d has memberships %v", i, groupNames(ms))
				}
				_, err = st.ExchangeSession(ctx(t), fmt.Appendf(nil, "sess-%d", i), fmt.Appendf(nil, "tok-%d", i), t0.Add(time.Hour), t0)
				mustNil(t, "session of a committed transaction", err)
			}
			// The failed half gave their places back: 16 more fit under 32.
			for i := range workers / 2 {
				up := f.upsert(fmt.Sprint("more-", i))
				up.MaxUsers = workers
				_, err := st.UpsertUser(ctx(t), up)
				mustNil(t, "fill the limit", err)
			}
			up := f.upsert("one-too-many")
			up.MaxUsers = workers
			_, err := st.UpsertUser(ctx(t), up)
			wantErr(t, "over the limit", err, store.ErrLimit)
		},
	},
	{
		name: "concurrent conversions count a user once",
		doc:  "Many simultaneous upserts that convert one ephemeral user to persistent take one place of the limit, not one each.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			f.ephemeral(t, st, "e", t0.Add(time.Hour))
			errs := parallel(workers, func(int) error {
				up := f.upsert("e")
				up.MaxUsers = 2
				_, err := st.UpsertUser(ctx(t), up)
				return err
			})
			for _, err := range errs {
				mustNil(t, "conversion", err)
			}
			up := f.upsert("second")
			up.MaxUsers = 2
			_, err := st.UpsertUser(ctx(t), up)
			mustNil(t, "second persistent user", err)
			up = f.upsert("third")
			up.MaxUsers = 2
			_, err = st.UpsertUser(ctx(t), up)
			wantErr(t, "third persistent user", err, store.ErrLimit)
		},
	},
	{
		name: "concurrent conversions of distinct users are exact",
		doc:  "32 goroutines each convert a distinct ephemeral user to persistent with MaxUsers 10: exactly 10 succeed, the others fail with ErrLimit and their users stay ephemeral.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			const limit = 10
			for i := range workers {
				f.ephemeral(t, st, fmt.Sprint("e-", i), t0.Add(time.Hour))
			}
			errs := parallel(workers, func(i int) error {
				up := f.upsert(fmt.Sprint("e-", i))
				up.MaxUsers = limit
				_, err := st.UpsertUser(ctx(t), up)
				return err
			})
			ok := 0
			for i, err := range errs {
				u, uerr := st.UserByKey(ctx(t), store.UserKey{AccountID: f.account.ID, ExternalID: fmt.Sprint("e-", i)}, t0)
				mustNil(t, "UserByKey", uerr)
				switch {
				case err == nil:
					ok++
					if u.Ephemeral {
						t.Errorf("user %d converted but still ephemeral", i)
					}
				case errors.Is(err, store.ErrLimit):
					if !u.Ephemeral {
						t.Errorf("user %d refused but persistent", i)
					}
				default:
					t.Errorf("unexpected error: %v", err)
				}
			}
			if ok != limit {
				t.Errorf("%d conversions succeeded, want %d", ok, limit)
			}
		},
	},
	{
		name: "simultaneous upserts replacing an expired user yield one new user",
		doc:  "Users contract: when an ephemeral user has expired, simultaneous upserts of its key all succeed and share one new user, which took one place of the limit.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			exp := t0.Add(time.Minute)
			old := f.ephemeral(t, st, "e", exp)
			f.thread(t, st, old.ID, "chat-old")
			ids := make([]int64, workers)
			errs := parallel(workers, func(i int) error {
				up := f.upsert("e")
				up.Now, up.MaxUsers = exp.Add(time.Second), 1
				return st.InTx(ctx(t), func(tx store.Tx) error {
					u, err := tx.UpsertUser(ctx(t), up)
					ids[i] = u.ID
					return err
				})
			})
			for i, err := range errs {
				mustNil(t, fmt.Sprint("upsert ", i), err)
				if ids[i] != ids[0] || ids[i] == old.ID {
					t.Errorf("upsert %d returned user %d, upsert 0 user %d (expired user %d)", i, ids[i], ids[0], old.ID)
				}
			}
			_, err := st.Thread(ctx(t), f.account.ID, "chat-old")
			wantErr(t, "the expired user's thread", err, store.ErrNotFound)
			up := f.upsert("second")
			up.Now, up.MaxUsers = exp.Add(time.Second), 1
			_, err = st.UpsertUser(ctx(t), up)
			wantErr(t, "a second persistent user", err, store.ErrLimit)
		},
	},
	{
		name: "simultaneous first upserts of an internal user yield one user",
		doc:  "Users contract: simultaneous first calls for one internal id all succeed and return the same user.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			ids := make([]int64, workers)
			errs := parallel(workers, func(i int) error {
				u, err := st.UpsertUser(ctx(t), store.UserUpsert{UserKey: store.UserKey{AccountID: f.account.ID, InternalID: "alice@acme.test"}, Persistent: true, Now: t0})
				ids[i] = u.ID
				return err
			})
			for i, err := range errs {
				mustNil(t, fmt.Sprint("upsert ", i), err)
				if ids[i] != ids[0] || ids[i] == 0 {
					t.Errorf("upsert %d returned user %d, upsert 0 user %d", i, ids[i], ids[0])
				}
			}
		},
	},
	{
		name: "concurrent exchanges of one session id have one winner",
		doc:  "Of concurrent ExchangeSession calls for one session id exactly one succeeds; the others are ErrNotFound and store no token.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			u := f.user(t, st, "u")
			f.session(t, st, u.ID, "sess", t0.Add(time.Hour))
			errs := parallel(workers, func(i int) error {
				_, err := st.ExchangeSession(ctx(t), []byte("sess"), fmt.Appendf(nil, "tok-%d", i), t0.Add(24*time.Hour), t0)
				return err
			})
			winners := 0
			for i, err := range errs {
				_, terr := st.SessionByToken(ctx(t), fmt.Appendf(nil, "tok-%d", i), t0)
				switch {
				case err == nil:
					winners++
					mustNil(t, "winner's token", terr)
				case errors.Is(err, store.ErrNotFound):
					wantErr(t, "loser's token", terr, store.ErrNotFound)
				default:
					t.Errorf("exchange %d: %v", i, err)
				}
			}
			if winners != 1 {
				t.Errorf("%d exchanges succeeded, want exactly 1", winners)
			}
		},
	},
	{
		name: "concurrent exchanges inside transactions have one winner",
		doc:  "The single-use rule holds when ExchangeSession runs inside InTx next to other writes.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			u := f.user(t, st, "u")
			f.session(t, st, u.ID, "sess", t0.Add(time.Hour))
			var winners atomic.Int32
			errs := parallel(workers, func(i int) error {
				return st.InTx(ctx(t), func(tx store.Tx) error {
					if _, err := tx.ExchangeSession(ctx(t), []byte("sess"), fmt.Appendf(nil, "tok-%d", i), t0.Add(24*time.Hour), t0); err != nil {
						return err
					}
					winners.Add(1)
					return nil
				})
			})
			for i, err := range errs {
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					t.Errorf("transaction %d: %v", i, err)
				}
			}
			if winners.Load() != 1 {
				t.Errorf("%d exchanges succeeded, want exactly 1", winners.Load())
			}
		},
	},
	{
		name: "concurrent EnsureEmbedTenant yields one tenant",
		doc:  "Catalog contract: simultaneous EnsureEmbedTenant calls for one name all succeed with the same tenant, even with max 1 (none is refused for the place its own tenant holds).",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			ids := make([]int64, workers)
			errs := parallel(workers, func(i int) error {
				et, err := st.EnsureEmbedTenant(ctx(t), f.account.ID, "tenant-one", 1)
				ids[i] = et.ID
				return err
			})
			for i, err := range errs {
				mustNil(t, "EnsureEmbedTenant", err)
				if ids[i] != ids[0] || ids[i] == 0 {
					t.Errorf("call %d returned tenant %d, call 0 tenant %d", i, ids[i], ids[0])
				}
			}
		},
	},
	{
		name: "concurrent catalog upserts converge",
		doc:  "Simultaneous UpsertDefinitions of the same names (in transactions, as creator-mode bootstraps do) all succeed and leave one row per name.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			errs := parallel(workers, func(i int) error {
				return st.InTx(ctx(t), func(tx store.Tx) error {
					return tx.UpsertDefinitions(ctx(t), f.scope(), []store.GroupDef{{Name: "a"}, {Name: "b", Description: ptr(fmt.Sprint(i))}},
						[]store.AttributeDef{{Name: "x", Type: store.TypeString}, {Name: "y", Type: store.TypeNumber}})
				})
			})
			for _, err := range errs {
				mustNil(t, "upserts", err)
			}
			gs, err := st.ListGroups(ctx(t), f.scope(), 0, 100)
			mustNil(t, "ListGroups", err)
			as, err := st.ListAttributes(ctx(t), f.scope(), 0, 100)
			mustNil(t, "ListAttributes", err)
			if len(gs) != 2 || len(as) != 2 {
				t.Errorf("groups %v attributes %v, want two of each", groupNames(gs), attrNames(as))
			}
		},
	},
	{
		name: "concurrent DeleteExpired delete each user once",
		doc:  "Expiry contract: DeleteExpired is safe from several callers at once; the counts add up to the number of expired users, each deleted with what it owns, and a live user stays.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			const expired = 40
			for i := range expired {
				u := f.ephemeral(t, st, fmt.Sprint("e-", i), t0.Add(3*time.Hour))
				if i%10 == 0 {
					f.thread(t, st, u.ID, fmt.Sprint("chat-", i))
				}
			}
			keep := f.ephemeral(t, st, "keep", t0.Add(10*time.Hour))
			// Whatever else has expired by then (counters of past minutes)
			// goes first, so that the concurrent calls count only users.
			for {
				n, err := st.DeleteExpired(ctx(t), t0.Add(3*time.Hour-time.Minute), 100)
				mustNil(t, "DeleteExpired", err)
				if n == 0 {
					break
				}
			}
			var total atomic.Int64
			errs := parallel(8, func(int) error {
				for {
					n, err := st.DeleteExpired(ctx(t), t0.Add(4*time.Hour), 3)
					if err != nil {
						return err
					}
					if n == 0 {
						return nil
					}
					total.Add(int64(n))
				}
			})
			for _, err := range errs {
				mustNil(t, "DeleteExpired", err)
			}
			if total.Load() != expired {
				t.Errorf("deleted %d rows in total, want %d", total.Load(), expired)
			}
			for i := 0; i < expired; i += 10 {
				_, err := st.Thread(ctx(t), f.account.ID, fmt.Sprint("chat-", i))
				wantErr(t, "an expired user's thread", err, store.ErrNotFound)
			}
			_, err := st.UserByID(ctx(t), keep.ID, t0.Add(4*time.Hour))
			mustNil(t, "unexpired user", err)
		},
	},
	{
		name: "the limit of ephemeral users per minute is exact under concurrency",
		doc:  "32 goroutines each create a distinct ephemeral user in one minute with NewEphemeralPerMinute 10 (half of them inside InTx): exactly 10 succeed and the others fail with ErrLimit, storing nothing.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			const limit = 10
			errs := parallel(workers, func(i int) error {
				up := f.upsert(fmt.Sprint("e-", i))
				up.Persistent, up.EphemeralExpiresAt, up.NewEphemeralPerMinute = false, t0.Add(time.Hour), limit
				up.Now = t0.Add(time.Duration(i) * time.Second)
				if i%2 == 0 {
					_, err := st.UpsertUser(ctx(t), up)
					return err
				}
				return st.InTx(ctx(t), func(tx store.Tx) error {
					_, err := tx.UpsertUser(ctx(t), up)
					return err
				})
			})
			ok := 0
			for i, err := range errs {
				_, uerr := st.UserByKey(ctx(t), store.UserKey{AccountID: f.account.ID, ExternalID: fmt.Sprint("e-", i)}, t0)
				switch {
				case err == nil:
					ok++
					mustNil(t, "created user", uerr)
				case errors.Is(err, store.ErrLimit):
					wantErr(t, "refused user", uerr, store.ErrNotFound)
				default:
					t.Errorf("unexpected error: %v", err)
				}
			}
			if ok != limit {
				t.Errorf("%d succeeded, want %d", ok, limit)
			}
		},
	},
	{
		name: "the limit of embed tenants is exact under concurrency",
		doc:  "32 goroutines each ensure a distinct embed tenant with max 5 (half of them inside InTx): exactly 5 are created and the others fail with ErrLimit.",
		fn: func(t *testing.T, st store.Store) {
			f := newFixture(t, st, "acme")
			const limit = 5
			errs := parallel(workers, func(i int) error {
				name := fmt.Sprint("tenant-", i)
				if i%2 == 0 {
					_, err := st.EnsureEmbedTenant(ctx(t), f.account.ID, name, limit)
					return err
				}
				return st.InTx(ctx(t), func(tx store.Tx) error {
					_, err := tx.EnsureEmbedTenant(ctx(t), f.account.ID, name, limit)
					return err
				})
			})
			ok := 0
			for i, err := range errs {
				_, terr := st.EmbedTenantByName(ctx(t), f.account.ID, fmt.Sprint("tenant-", i))
				switch {
				case err == nil:
					ok++
					mustNil(t, "created tenant", terr)
				case errors.Is(err, store.ErrLimit):
					wantErr(t, "refused tenant", terr, store.ErrNotFound)
				default:
					t.Errorf("unexpected error: %v", err)
				}
			}
			if ok != limit {
				t.Errorf("%d tenants created, want %d", ok, limit)
			}
		},
	},
}
