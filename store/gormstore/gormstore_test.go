package gormstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"

	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore"
	"github.com/embedkit/embedkit/store/storetest"
)

func TestConformance(t *testing.T) {
	for _, backend := range []string{testdb.SQLite, testdb.Memory, testdb.Postgres} {
		t.Run(backend, func(t *testing.T) {
			if backend == testdb.Postgres {
				testdb.OpenDSN(t, backend) // skips without the DSN variable
			}
			storetest.Run(t, func(t *testing.T) store.Store { return testdb.Open(t, backend) })
		})
	}
}

func BenchmarkStore(b *testing.B) {
	for _, backend := range []string{testdb.SQLite, testdb.Postgres} {
		b.Run(backend, func(b *testing.B) {
			storetest.Bench(b, func(b *testing.B) store.Store { return testdb.Open(b, backend) })
		})
	}
}

// TestRestart checks that a file store keeps users, sessions and tokens
// across close and reopen, and that the migration is idempotent.
func TestRestart(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			dsn := testdb.OpenDSN(t, backend)
			ctx := t.Context()
			now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			st, err := testdb.OpenStore(dsn)
			if err != nil {
				t.Fatal(err)
			}
			a, err := st.SaveAccount(ctx, store.Account{Name: "acme", Plan: store.PlanEnterprise})
			if err != nil {
				t.Fatal(err)
			}
			u, err := st.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: "u"}, Persistent: true, MaxUsers: 1, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			sess := store.Session{AccountID: a.ID, UserID: u.ID, DeploymentID: 1, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
			for _, h := range []string{"s1", "s2"} {
				if err := st.CreateSession(ctx, []byte(h), sess); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := st.ExchangeSession(ctx, []byte("s1"), []byte("t1"), now.Add(24*time.Hour), now); err != nil {
				t.Fatal(err)
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := st.UserByID(ctx, u.ID, now); !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("call after Close: err = %v, want ErrUnavailable", err)
			}

			st, err = testdb.OpenStore(dsn)
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			defer st.Close()
			got, err := st.UserByKey(ctx, store.UserKey{AccountID: a.ID, ExternalID: "u"}, now)
			if err != nil || got.ID != u.ID {
				t.Fatalf("user after reopen = %+v, %v", got, err)
			}
			if _, err := st.SessionByToken(ctx, []byte("t1"), now); err != nil {
				t.Errorf("token after reopen: %v", err)
			}
			if _, err := st.ExchangeSession(ctx, []byte("s2"), []byte("t2"), now.Add(24*time.Hour), now); err != nil {
				t.Errorf("session after reopen: %v", err)
			}
			if _, err := st.ExchangeSession(ctx, []byte("s1"), []byte("t3"), now.Add(24*time.Hour), now); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("used session after reopen: err = %v, want ErrNotFound", err)
			}
			// The persistent-user count survived too.
			_, err = st.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: "v"}, Persistent: true, MaxUsers: 1, Now: now})
			if !errors.Is(err, store.ErrLimit) {
				t.Errorf("limit after reopen: err = %v, want ErrLimit", err)
			}
		})
	}
}

// TestStatementCallback checks that a host's GORM logger sees every
// statement and that a generate-session (the API key, then in one
// transaction the Lookup, the user's upsert with 3 attributes and 2 groups,
// the session) stays within its statement count: 4 for a returning user, 6
// for a new one.
func TestStatementCallback(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			var count atomic.Int64
			var last atomic.Value
			st := testdb.OpenWithHook(t, backend, func(_ context.Context, sql string) {
				count.Add(1)
				last.Store(sql)
			})
			ctx := t.Context()
			a, err := st.SaveAccount(ctx, store.Account{Name: "acme"})
			if err != nil {
				t.Fatal(err)
			}
			count.Store(0)
			if _, err := st.AccountByID(ctx, a.ID); err != nil {
				t.Fatal(err)
			}
			if n := count.Load(); n != 1 {
				t.Errorf("AccountByID ran %d statements, want 1", n)
			}
			if s, _ := last.Load().(string); !strings.Contains(s, "embedkit_accounts") {
				t.Errorf("hook saw %q", s)
			}
			key := []byte("key-hash")
			if err := st.SaveAPIKey(ctx, store.APIKey{Hash: key, AccountID: a.ID}); err != nil {
				t.Fatal(err)
			}
			if err := st.SaveDeployment(ctx, store.Deployment{AccountID: a.ID, ID: 1, Name: "d"}); err != nil {
				t.Fatal(err)
			}
			s := store.TenantWide(a.ID)
			if err := st.UpsertDefinitions(ctx, s, []store.GroupDef{{Name: "a"}, {Name: "b"}},
				[]store.AttributeDef{{Name: "x", Type: store.TypeString}, {Name: "y", Type: store.TypeString}, {Name: "z", Type: store.TypeNumber}}); err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			calls := 0
			generate := func(externalID string) int64 {
				calls++
				count.Store(0)
				if _, _, err := st.APIKeyByHash(ctx, key); err != nil {
					t.Fatal(err)
				}
				err := st.InTx(ctx, func(tx store.Tx) error {
					l, err := tx.Lookup(ctx, store.Lookup{Scope: s, DeploymentID: 1, AttrNames: []string{"x", "y", "z"}, GroupNames: []string{"a", "b"}})
					if err != nil {
						return err
					}
					if !l.DeploymentFound || len(l.Attributes) != 3 || len(l.Groups) != 2 {
						t.Fatalf("lookup = %+v", l)
					}
					u := store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: externalID}, DisplayName: new("N"),
						SetGroups: true, GroupScope: s, Groups: []int64{l.Groups[0].ID, l.Groups[1].ID}, Persistent: true, MaxUsers: 100, Now: now}
					for _, at := range l.Attributes {
						u.Attributes = append(u.Attributes, store.AttributeValue{AttributeID: at.ID, Value: json.RawMessage(`"v"`)})
					}
					user, err := tx.UpsertUser(ctx, u)
					if err != nil {
						return err
					}
					return tx.CreateSession(ctx, fmt.Appendf(nil, "s-%s-%d", externalID, calls),
						store.Session{AccountID: a.ID, UserID: user.ID, DeploymentID: 1, CreatedAt: now, ExpiresAt: now.Add(time.Minute), KeyHash: key})
				})
				if err != nil {
					t.Fatal(err)
				}
				return count.Load()
			}
			if n := generate("new"); n > 6 {
				t.Errorf("generate-session of a new user ran %d statements, want at most 6", n)
			} else {
				t.Logf("generate-session of a new user: %d statements", n)
			}
			if n := generate("new"); n > 4 {
				t.Errorf("generate-session of a returning user ran %d statements, want at most 4", n)
			} else {
				t.Logf("generate-session of a returning user: %d statements", n)
			}
			u, err := st.UserByKey(ctx, store.UserKey{AccountID: a.ID, ExternalID: "new"}, now)
			if err != nil {
				t.Fatal(err)
			}
			d, err := st.UserData(ctx, u.ID, s)
			if err != nil || len(d.Attributes) != 3 || len(d.Groups) != 2 {
				t.Errorf("user data = %+v, %v", d, err)
			}
		})
	}
}

func TestQueryTimeoutIsUnavailable(t *testing.T) {
	st := testdb.Open(t, testdb.SQLite, gormstore.WithQueryTimeout(50*time.Millisecond))
	ctx := t.Context()
	// Hold the write lock so that a second transaction cannot begin in time.
	release := make(chan struct{})
	held := make(chan struct{})
	go func() {
		_ = st.InTx(ctx, func(store.Tx) error {
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	err := st.InTx(ctx, func(store.Tx) error { return nil })
	close(release)
	if !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("InTx while the write lock is held: err = %v, want ErrUnavailable", err)
	}
}

// TestPanicInTx checks that a panic in fn reaches the caller of InTx and
// rolls back its writes without disturbing concurrent transactions.
func TestPanicInTx(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			st := testdb.Open(t, backend)
			ctx := t.Context()
			a, err := st.SaveAccount(ctx, store.Account{Name: "acme"})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			panics := make([]any, 16)
			for i := range 16 {
				wg.Go(func() {
					defer func() { panics[i] = recover() }()
					_ = st.InTx(ctx, func(tx store.Tx) error {
						if _, err := tx.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: fmt.Sprint("u", i)}, Persistent: true, Now: time.Now()}); err != nil {
							return err
						}
						if i%2 == 1 {
							panic(fmt.Sprint("boom ", i))
						}
						return nil
					})
				})
			}
			wg.Wait()
			for i := range 16 {
				_, err := st.UserByKey(ctx, store.UserKey{AccountID: a.ID, ExternalID: fmt.Sprint("u", i)}, time.Now())
				if i%2 == 1 {
					if panics[i] != fmt.Sprint("boom ", i) {
						t.Errorf("InTx %d recovered %v, want its panic", i, panics[i])
					}
					if !errors.Is(err, store.ErrNotFound) {
						t.Errorf("user of a panicking fn: err = %v, want ErrNotFound", err)
					}
				} else if err != nil || panics[i] != nil {
					t.Errorf("InTx %d: panic %v, user err %v", i, panics[i], err)
				}
			}
		})
	}
}

// TestMemoryStoresAreSeparate checks that two in-memory stores of one
// process do not share data.
func TestMemoryStoresAreSeparate(t *testing.T) {
	a := testdb.Open(t, testdb.Memory)
	b := testdb.Open(t, testdb.Memory)
	if _, err := a.SaveAccount(t.Context(), store.Account{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AccountByName(t.Context(), "acme"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second in-memory store sees the first's account: err = %v", err)
	}
}

// TestUnavailable checks that an unreachable PostgreSQL server is reported
// as ErrUnavailable.
func TestUnavailable(t *testing.T) {
	_, err := testdb.OpenStore("postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2", gormstore.WithQueryTimeout(2*time.Second))
	if !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Open of an unreachable server: err = %v, want ErrUnavailable", err)
	}
}

// TestOpenDB checks that a host's GORM handle can back the store and stays
// open after Close.
func TestOpenDB(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			dsn := testdb.OpenDSN(t, backend)
			var dialector gorm.Dialector
			if backend == testdb.Postgres {
				dialector = postgres.Open(dsn)
			} else {
				dialector = sqlite.Open(dsn)
			}
			db, err := gorm.Open(dialector, &gorm.Config{})
			if err != nil {
				t.Fatal(err)
			}
			sqlDB, _ := db.DB()
			defer sqlDB.Close()
			if backend == testdb.SQLite {
				sqlDB.SetMaxOpenConns(2)
			}
			st, err := gormstore.OpenDB(db)
			if err != nil {
				t.Fatal(err)
			}
			a, err := st.SaveAccount(t.Context(), store.Account{Name: "acme"})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			var name string
			if err := sqlDB.QueryRow("SELECT name FROM embedkit_accounts WHERE id = " + fmt.Sprint(a.ID)).Scan(&name); err != nil || name != "acme" {
				t.Errorf("host handle after Close: %q, %v", name, err)
			}
		})
	}
}

// TestTwoStoresOneFile checks that two stores on one SQLite file (as two
// processes would have) write concurrently without surfacing busy errors,
// and that their reapers delete each expired user once.
func TestTwoStoresOneFile(t *testing.T) {
	dsn := testdb.OpenDSN(t, testdb.SQLite)
	ctx := t.Context()
	var stores [2]*gormstore.Store
	for i := range stores {
		st, err := testdb.OpenStore(dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		stores[i] = st
	}
	a, err := stores[0].SaveAccount(ctx, store.Account{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 16 {
		wg.Go(func() {
			st := stores[g%2]
			for i := range 10 {
				_, err := st.UpsertUser(ctx, store.UserUpsert{
					UserKey:            store.UserKey{AccountID: a.ID, ExternalID: fmt.Sprintf("u-%d-%d", g, i)},
					EphemeralExpiresAt: now.Add(time.Minute), Now: now,
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent write: %v", err)
	}
	var deleted atomic.Int64
	for g := range 4 {
		wg.Go(func() {
			for {
				n, err := stores[g%2].DeleteExpired(ctx, now.Add(time.Hour), 7)
				if err != nil {
					t.Errorf("DeleteExpired: %v", err)
					return
				}
				if n == 0 {
					return
				}
				deleted.Add(int64(n))
			}
		})
	}
	wg.Wait()
	if deleted.Load() != 160 {
		t.Errorf("deleted %d users, want 160", deleted.Load())
	}
}

// TestIgnoredStatementError pins down what happens when fn ignores the
// error of a failed statement and returns nil: on both databases InTx
// reports it and nothing is kept.
func TestIgnoredStatementError(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			st := testdb.Open(t, backend)
			ctx := t.Context()
			a, err := st.SaveAccount(ctx, store.Account{Name: "acme"})
			if err != nil {
				t.Fatal(err)
			}
			u, err := st.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: "u"}, Persistent: true, Now: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			th := store.Thread{AccountID: a.ID, ChatID: "c", AgentID: "7", UserID: u.ID}
			err = st.InTx(ctx, func(tx store.Tx) error {
				if err := tx.CreateThread(ctx, th); err != nil {
					return err
				}
				if err := tx.CreateThread(ctx, th); !errors.Is(err, store.ErrConflict) {
					t.Errorf("duplicate CreateThread: err = %v, want ErrConflict", err)
				}
				return nil // ignores the conflict
			})
			_, terr := st.Thread(ctx, a.ID, "c")
			if !errors.Is(err, store.ErrConflict) || !errors.Is(terr, store.ErrNotFound) {
				t.Errorf("InTx err = %v, thread err = %v; want ErrConflict and no thread", err, terr)
			}
		})
	}
}

// TestUnchangedDefinitionsDoNotLock checks, on PostgreSQL, that resending
// unchanged definitions does not wait for another open transaction that
// resent them too (creator-mode requests are idempotent and concurrent).
func TestUnchangedDefinitionsDoNotLock(t *testing.T) {
	st := testdb.Open(t, testdb.Postgres)
	ctx := t.Context()
	a, err := st.SaveAccount(ctx, store.Account{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	s := store.TenantWide(a.ID)
	groups := []store.GroupDef{{Name: "sales", Description: new("Sales")}, {Name: "ops"}}
	attrs := []store.AttributeDef{{Name: "country", Type: store.TypeString, DisplayName: new("Country")}}
	if err := st.UpsertDefinitions(ctx, s, groups, attrs); err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- st.InTx(ctx, func(tx store.Tx) error {
			if err := tx.UpsertDefinitions(ctx, s, groups, attrs); err != nil {
				return err
			}
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	quick, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err = st.InTx(quick, func(tx store.Tx) error {
		return tx.UpsertDefinitions(quick, s, groups, attrs)
	})
	close(release)
	if err != nil {
		t.Errorf("second upsert while the first transaction is open: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestGoexitInTx checks that a fn that never returns because it calls
// runtime.Goexit (as t.Fatal does) rolls back its writes and does not stall
// concurrent transactions.
func TestGoexitInTx(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			st := testdb.Open(t, backend)
			ctx := t.Context()
			a, err := st.SaveAccount(ctx, store.Account{Name: "acme"})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make([]error, 16)
			for i := range 16 {
				wg.Go(func() {
					errs[i] = st.InTx(ctx, func(tx store.Tx) error {
						if _, err := tx.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: fmt.Sprint("u", i)}, Persistent: true, Now: time.Now()}); err != nil {
							return err
						}
						if i%4 == 1 {
							runtime.Goexit()
						}
						return nil
					})
				})
			}
			wg.Wait()
			for i := range 16 {
				_, err := st.UserByKey(ctx, store.UserKey{AccountID: a.ID, ExternalID: fmt.Sprint("u", i)}, time.Now())
				if i%4 == 1 {
					if !errors.Is(err, store.ErrNotFound) {
						t.Errorf("user of a fn that exited: err = %v, want ErrNotFound", err)
					}
				} else if err != nil || errs[i] != nil {
					t.Errorf("InTx %d: %v, user: %v", i, errs[i], err)
				}
			}
		})
	}
}
