package gormstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
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
	storesqlite "github.com/embedkit/embedkit/store/gormstore/sqlite"
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

// TestConformanceUnderRepeatableRead runs the conformance suite on a
// PostgreSQL connection whose default isolation is REPEATABLE READ, as a
// host may configure its role or database: the store's transactions use
// READ COMMITTED whatever the default, which its limits and waits rely on.
func TestConformanceUnderRepeatableRead(t *testing.T) {
	testdb.OpenDSN(t, testdb.Postgres) // skips without the DSN variable
	storetest.Run(t, func(t *testing.T) store.Store {
		st, err := testdb.OpenStore(repeatableRead(t, testdb.OpenDSN(t, testdb.Postgres)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	})
}

// repeatableRead returns the PostgreSQL URL dsn with REPEATABLE READ as
// the default isolation of its sessions.
func repeatableRead(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		t.Skipf("not a URL DSN: %v", err)
	}
	q := u.Query()
	q.Set("default_transaction_isolation", "repeatable read")
	u.RawQuery = q.Encode()
	return u.String()
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
	start := time.Now()
	err := st.InTx(ctx, func(store.Tx) error { return nil })
	close(release)
	if !errors.Is(err, store.ErrUnavailable) || time.Since(start) > time.Second {
		t.Errorf("InTx while the write lock is held: err = %v after %v, want ErrUnavailable within the query timeout", err, time.Since(start))
	}
}

// TestEndedContextWhileWriteLockHeld checks that a write waiting for
// SQLite's write lock, which another transaction of the store holds,
// returns once its context ends rather than after SQLite's busy timeout.
func TestEndedContextWhileWriteLockHeld(t *testing.T) {
	st := testdb.Open(t, testdb.SQLite, gormstore.WithQueryTimeout(time.Minute)) // the holder's
	a, err := st.SaveAccount(t.Context(), store.Account{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	release, held, done := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		done <- st.InTx(t.Context(), func(tx store.Tx) error {
			_, err := tx.SaveAccount(t.Context(), store.Account{Name: "acme", MaxExternalUsers: 1})
			close(held)
			<-release
			return err
		})
	}()
	<-held
	for name, call := range map[string]func(ctx context.Context) error{
		"InTx": func(ctx context.Context) error {
			return st.InTx(ctx, func(tx store.Tx) error { _, err := tx.AccountByID(ctx, a.ID); return err })
		},
		"UpsertUser": func(ctx context.Context) error {
			_, err := st.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: "u"}, Persistent: true})
			return err
		},
		"SaveDeployment": func(ctx context.Context) error {
			return st.SaveDeployment(ctx, store.Deployment{AccountID: a.ID, ID: 1})
		},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		start := time.Now()
		err := call(ctx)
		cancel()
		if err == nil || time.Since(start) > time.Second {
			t.Errorf("%s while the write lock is held: err = %v after %v, want a failure once the context ends", name, err, time.Since(start))
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
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

// TestOpenDBRefusesSQLiteWithoutForeignKeys: a host's SQLite handle
// without foreign keys would keep a revoked key's sessions and tokens (and
// a deleted user's threads): OpenDB fails, and creates nothing.
func TestOpenDBRefusesSQLiteWithoutForeignKeys(t *testing.T) {
	path := t.TempDir() + "/nofk.db"
	db, err := gorm.Open(sqlite.Open("file:"+path+"?_txlock=immediate"), &gorm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	defer sqlDB.Close()
	if _, err := gormstore.OpenDB(db); err == nil || !strings.Contains(err.Error(), "foreign keys are off") {
		t.Fatalf("OpenDB without foreign keys: err = %v, want a refusal", err)
	}
	var n int
	if err := db.Raw("SELECT count(*) FROM sqlite_master").Scan(&n).Error; err != nil || n != 0 {
		t.Errorf("OpenDB without foreign keys created %d objects (%v)", n, err)
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
				dialector = sqlite.Open("file:" + dsn + "?_foreign_keys=on")
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
					EphemeralExpiresAt: now.Add(time.Minute), Now: now, NewEphemeralPerMinute: 1000, // counted
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
	if deleted.Load() != 161 {
		t.Errorf("deleted %d rows, want 161: 160 users and the counter of their minute", deleted.Load())
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

// deadlock is a driver error that the store retries, as PostgreSQL's
// deadlock_detected.
type deadlock struct{}

func (deadlock) Error() string    { return "injected deadlock" }
func (deadlock) SQLState() string { return "40P01" }

// TestRetryDoesNotReviveDeletedGroup makes the second statement of an
// UpsertDefinitions fail once with a deadlock while its first statement
// has updated a group that another transaction deletes meanwhile: the
// retry creates the group anew with a new ID, so that the deleted group's
// members do not become members of it.
func TestRetryDoesNotReviveDeletedGroup(t *testing.T) {
	dsn := testdb.OpenDSN(t, testdb.Postgres)
	db := testdb.OpenGormDSN(t, dsn, nil)
	st := openOn(t, db)
	ctx := t.Context()
	a, err := st.SaveAccount(ctx, store.Account{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	s := store.TenantWide(a.ID)
	v1, v2 := "v1", "v2"
	if err := st.UpsertDefinitions(ctx, s, []store.GroupDef{{Name: "sales", Description: &v1}}, nil); err != nil {
		t.Fatal(err)
	}
	res, err := st.Lookup(ctx, store.Lookup{Scope: s, GroupNames: []string{"sales"}})
	if err != nil || len(res.Groups) != 1 {
		t.Fatalf("Lookup: %+v %v", res, err)
	}
	old := res.Groups[0].ID
	u, err := st.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: "u"}, Persistent: true,
		SetGroups: true, GroupScope: s, Groups: []int64{old}})
	if err != nil {
		t.Fatal(err)
	}
	other := testdb.OpenGormDSN(t, dsn, nil)
	var (
		deleted        = make(chan error, 1)
		groupUpserts   atomic.Int32
		failed         atomic.Bool
		deleteErr      error
		deleteFinished bool
	)
	if err := db.Callback().Create().Before("gorm:create").Register("test:deadlock-once", func(d *gorm.DB) {
		switch d.Statement.Table {
		case "embedkit_catalog_groups":
			if groupUpserts.Add(1) == 2 { // the retry, once the delete committed
				deleteErr, deleteFinished = <-deleted, true
			}
		case "embedkit_catalog_attributes":
			if !failed.Swap(true) {
				// The delete waits for this attempt's lock on the group.
				go func() { deleted <- other.Exec("DELETE FROM embedkit_catalog_groups WHERE id = ?", old).Error }()
				d.AddError(deadlock{})
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertDefinitions(ctx, s, []store.GroupDef{{Name: "sales", Description: &v2}},
		[]store.AttributeDef{{Name: "country", Type: store.TypeString}}); err != nil {
		t.Fatal(err)
	}
	if !deleteFinished || deleteErr != nil {
		t.Fatalf("the concurrent delete: finished %v, %v", deleteFinished, deleteErr)
	}
	res, err = st.Lookup(ctx, store.Lookup{Scope: s, GroupNames: []string{"sales"}})
	if err != nil || len(res.Groups) != 1 {
		t.Fatalf("Lookup: %+v %v", res, err)
	}
	if res.Groups[0].ID == old {
		t.Errorf("the group created again has the deleted group's ID %d", old)
	}
	if d, err := st.UserData(ctx, u.ID, s); err != nil || len(d.Groups) != 0 {
		t.Errorf("the deleted group's member's groups = %+v, %v; want none", d.Groups, err)
	}
}

// TestUserDataOneStatement reads a user's attributes and groups of a scope
// in one statement, on both databases, with the values as stored and the
// deleted or other scopes' definitions left out.
func TestUserDataOneStatement(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			db := testdb.OpenGormDSN(t, testdb.OpenDSN(t, backend), nil)
			var stmts atomic.Int64
			if err := testdb.OnStatementDB(db, func(*gorm.DB) { stmts.Add(1) }); err != nil {
				t.Fatal(err)
			}
			st := openOn(t, db)
			ctx := t.Context()
			a, err := st.SaveAccount(ctx, store.Account{Name: "acme"})
			if err != nil {
				t.Fatal(err)
			}
			scope := store.Scope{AccountID: a.ID}
			err = st.UpsertDefinitions(ctx, scope, []store.GroupDef{{Name: "sales"}, {Name: "ops"}, {Name: "gone"}},
				[]store.AttributeDef{{Name: "country", Type: store.TypeString}, {Name: "regions", Type: store.TypeNumberArray}, {Name: "old", Type: store.TypeNumber}})
			if err != nil {
				t.Fatal(err)
			}
			found, err := st.Lookup(ctx, store.Lookup{Scope: scope, GroupNames: []string{"sales", "ops", "gone"}, AttrNames: []string{"country", "regions", "old"}})
			if err != nil {
				t.Fatal(err)
			}
			ids := map[string]int64{}
			for _, g := range found.Groups {
				ids["g:"+g.Name] = g.ID
			}
			var values []store.AttributeValue
			for _, at := range found.Attributes {
				ids["a:"+at.Name] = at.ID
				values = append(values, store.AttributeValue{AttributeID: at.ID, Value: json.RawMessage(map[string]string{
					"country": `"DE"`, "regions": `[1, 2,3]`, "old": `7`}[at.Name])})
			}
			u, err := st.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: "u"}, Persistent: true, Now: time.Now(),
				Attributes: values, SetGroups: true, GroupScope: scope, Groups: []int64{ids["g:sales"], ids["g:ops"], ids["g:gone"]}})
			if err != nil {
				t.Fatal(err)
			}
			if err := errors.Join(st.DeleteGroup(ctx, scope, ids["g:gone"]), st.DeleteAttribute(ctx, scope, ids["a:old"])); err != nil {
				t.Fatal(err)
			}
			stmts.Store(0)
			data, err := st.UserData(ctx, u.ID, scope)
			if err != nil {
				t.Fatal(err)
			}
			if n := stmts.Load(); n != 1 {
				t.Errorf("UserData ran %d statements, want 1", n)
			}
			got, _ := json.Marshal(data.Attributes)
			want, _ := json.Marshal([]store.UserAttribute{{Name: "country", Type: store.TypeString, Value: json.RawMessage(`"DE"`)},
				{Name: "regions", Type: store.TypeNumberArray, Value: json.RawMessage(`[1,2,3]`)}})
			if string(got) != string(want) {
				t.Errorf("attributes = %s, want %s", got, want)
			}
			if len(data.Groups) != 2 || data.Groups[0].Name != "ops" || data.Groups[1].Name != "sales" || data.Groups[1].ID != ids["g:sales"] {
				t.Errorf("groups = %+v, want ops and sales", data.Groups)
			}
			if other, err := st.UserData(ctx, u.ID, store.Scope{AccountID: a.ID, EmbedTenantID: 99}); err != nil || len(other.Attributes)+len(other.Groups) > 0 {
				t.Errorf("another scope: %+v, %v", other, err)
			}
		})
	}
}

// openOn opens a store on db, closed at the test's end.
func openOn(t testing.TB, db *gorm.DB) *gormstore.Store {
	t.Helper()
	st, err := gormstore.OpenDB(db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestSQLiteReadWaitBounded: a read on SQLite, which once it has a
// connection runs without its context's end, waits for that connection
// no longer than the query timeout or its context, and does not start
// under a context that has ended.
func TestSQLiteReadWaitBounded(t *testing.T) {
	db := testdb.OpenGormDSN(t, testdb.OpenDSN(t, testdb.SQLite), nil)
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	sqlDB.SetMaxOpenConns(1)
	st, err := gormstore.OpenDB(db, gormstore.WithQueryTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.SaveAccount(t.Context(), store.Account{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := st.AccountByName(ended, "acme"); err == nil {
		t.Error("a read under an ended context succeeded")
	}
	hold, err := sqlDB.Conn(t.Context()) // the host holds the pool's one connection
	if err != nil {
		t.Fatal(err)
	}
	for name, ctx := range map[string]context.Context{"the query timeout": t.Context(), "the context": ended} {
		start := time.Now()
		_, err := st.AccountByName(ctx, "acme")
		if !errors.Is(err, store.ErrUnavailable) && !errors.Is(err, context.Canceled) || time.Since(start) > 2*time.Second {
			t.Errorf("%s: read without a free connection: err = %v after %v, want a failure within the query timeout", name, err, time.Since(start))
		}
	}
	hold.Close()
	if _, err := st.AccountByName(t.Context(), "acme"); err != nil {
		t.Errorf("read once the connection is free: %v", err)
	}
}

// TestMemoryStoreReadBesideWriter: in an in-memory SQLite store the
// writer and the reads share a connection; a read while the writer holds
// it waits at most the query timeout (a read through the store inside
// InTx's function, which must use its Tx, fails rather than waiting for
// its own transaction for ever).
func TestMemoryStoreReadBesideWriter(t *testing.T) {
	st, err := storesqlite.Open(":memory:", gormstore.WithQueryTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var readErr error
	start := time.Now()
	err = st.InTx(t.Context(), func(tx store.Tx) error {
		_, readErr = st.AccountByName(t.Context(), "acme")
		return nil
	})
	if err != nil || readErr == nil || time.Since(start) > 2*time.Second {
		t.Errorf("InTx = %v, its read through the store = %v after %v, want a failed read within the query timeout", err, readErr, time.Since(start))
	}
}

// TestReapersSkipEachOthersRows: on PostgreSQL a reaper whose batch is
// open holds its rows, and another reaper takes the other expired rows
// at once rather than waiting for it.
func TestReapersSkipEachOthersRows(t *testing.T) {
	st := testdb.Open(t, testdb.Postgres) // skips without EMBEDKIT_TEST_POSTGRES_DSN
	ctx := t.Context()
	a, err := st.SaveAccount(ctx, store.Account{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i := range 6 {
		if _, err := st.UpsertUser(ctx, store.UserUpsert{
			UserKey:            store.UserKey{AccountID: a.ID, ExternalID: fmt.Sprintf("u-%d", i)},
			EphemeralExpiresAt: now.Add(time.Minute), Now: now,
		}); err != nil {
			t.Fatal(err)
		}
	}
	later := now.Add(time.Hour)
	held, release := make(chan int), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- st.InTx(context.WithoutCancel(ctx), func(tx store.Tx) error {
			n, err := tx.DeleteExpired(ctx, later, 3)
			held <- n
			<-release
			return err
		})
	}()
	first := <-held
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	second, err := st.DeleteExpired(wctx, later, 100)
	cancel()
	close(release)
	if err != nil {
		t.Fatalf("the second reaper while the first holds its rows: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the first reaper: %v", err)
	}
	if first != 3 || second != 3 {
		t.Errorf("the reapers deleted %d and %d users, want 3 and 3", first, second)
	}
}
