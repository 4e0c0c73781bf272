package memstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/embedkit/embedkit/store"
)

var (
	t0      = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	errBoom = errors.New("boom")
)

func fixedClock() time.Time { return t0 }

// seed fills st with a little of everything. It is deterministic, so two
// stores seeded alike hold equal data.
func seed(t *testing.T, st *Store) {
	t.Helper()
	ctx := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for a := range 2 {
		acc, err := st.SaveAccount(ctx, store.Account{Name: fmt.Sprint("acc-", a), Branches: []string{"main"}})
		must(err)
		must(st.SaveAPIKey(ctx, store.APIKey{Hash: []byte(fmt.Sprint("key-", a)), AccountID: acc.ID}))
		must(st.SaveDeployment(ctx, store.Deployment{AccountID: acc.ID, ID: 1, Name: "prod"}))
		must(st.SaveAgent(ctx, store.Agent{AccountID: acc.ID, ID: "7", DeploymentID: 1}))
		et, err := st.EnsureEmbedTenant(ctx, acc.ID, "tenant", 0)
		must(err)
		for _, s := range []store.Scope{store.TenantWide(acc.ID), {AccountID: acc.ID, EmbedTenantID: et.ID}} {
			must(st.UpsertDefinitions(ctx, s, []store.GroupDef{{Name: "g1"}, {Name: "g2"}, {Name: "g3"}},
				[]store.AttributeDef{{Name: "a1", Type: store.TypeString}, {Name: "a2", Type: store.TypeNumber}}))
		}
		_, err = st.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: acc.ID, InternalID: "alice@x.test"}, Now: t0.Add(-time.Hour)})
		must(err)
		s := store.TenantWide(acc.ID)
		found, err := st.Lookup(ctx, store.Lookup{Scope: s, AttrNames: []string{"a1", "a2"}, GroupNames: []string{"g1", "g2"}})
		must(err)
		for u := range 6 {
			up := store.UserUpsert{UserKey: store.UserKey{AccountID: acc.ID, ExternalID: fmt.Sprint("u", u)}, Persistent: u%2 == 0,
				EphemeralExpiresAt: t0.Add(time.Duration(u-2) * time.Minute), Now: t0.Add(-time.Hour),
				SecurityContext: json.RawMessage(`{"u":1}`),
				Attributes: []store.AttributeValue{
					{AttributeID: found.Attributes[0].ID, Value: json.RawMessage(`"x"`)}, {AttributeID: found.Attributes[1].ID, Value: json.RawMessage(`1`)}},
				SetGroups: true, GroupScope: s, Groups: []int64{found.Groups[0].ID, found.Groups[1].ID}}
			user, err := st.UpsertUser(ctx, up)
			must(err)
			sh := fmt.Sprintf("s-%d-%d", a, u)
			must(st.CreateSession(ctx, []byte(sh), store.Session{AccountID: acc.ID, UserID: user.ID, DeploymentID: 1, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}))
			must(st.CreateSession(ctx, []byte(sh+"-b"), store.Session{AccountID: acc.ID, UserID: user.ID, DeploymentID: 1, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}))
			_, err = st.ExchangeSession(ctx, []byte(sh), []byte("t"+sh), t0.Add(2*time.Hour), t0.Add(-time.Hour))
			must(err)
			chat := fmt.Sprintf("c-%d", u)
			must(st.CreateThread(ctx, store.Thread{AccountID: acc.ID, ChatID: chat, AgentID: "7", UserID: user.ID, CreatedAt: t0}))
			must(st.AppendMessages(ctx, acc.ID, chat, 5, []store.ThreadMessage{{ID: "m1", Sort: 1, Body: json.RawMessage(`{}`)}, {ID: "m2", Sort: 2, Body: json.RawMessage(`{}`)}}))
		}
	}
}

// snapshot returns the data of st in a form reflect.DeepEqual compares: the
// clock and the ID counters (never rolled back) are left out.
func snapshot(st *Store) db {
	st.mu.RLock()
	defer st.mu.RUnlock()
	d := *st.d
	d.clock, d.undo = nil, nil
	d.lastAccountID, d.lastUserID, d.lastTenantID, d.lastGroupID, d.lastAttributeID = 0, 0, 0, 0, 0
	return d
}

// randomOp makes one write through tx, chosen by r among every kind of
// write of the contract, with arguments drawn from the seeded data. Errors
// are ignored: a failed call must undo itself.
func randomOp(ctx context.Context, r *rand.Rand, tx store.Tx) {
	acc := int64(r.IntN(2) + 1)
	s := store.Scope{AccountID: acc, EmbedTenantID: int64(r.IntN(3))}
	id := int64(r.IntN(30) + 1)
	name := fmt.Sprint("n", r.IntN(4))
	now := t0.Add(time.Duration(r.IntN(240)-120) * time.Minute)
	switch r.IntN(22) {
	case 0:
		tx.SaveAccount(ctx, store.Account{Name: fmt.Sprint("acc-", r.IntN(3)), Branches: []string{name}})
	case 1:
		tx.SaveAPIKey(ctx, store.APIKey{Hash: []byte(fmt.Sprint("key-", r.IntN(3))), AccountID: acc, Admin: true})
	case 2:
		tx.SaveDeployment(ctx, store.Deployment{AccountID: int64(r.IntN(3) + 1), ID: id, Name: name})
	case 3:
		tx.SaveAgent(ctx, store.Agent{AccountID: acc, ID: name, DeploymentID: id})
	case 4:
		tx.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: acc, ExternalID: fmt.Sprint("u", r.IntN(8))},
			Persistent: r.IntN(2) == 0, EphemeralExpiresAt: now.Add(time.Hour), MaxUsers: r.IntN(5), NewEphemeralPerMinute: r.IntN(3),
			Now: now, DisplayName: &name})
	case 5:
		tx.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: acc, InternalID: name}, Now: now, Email: &name})
	case 6:
		tx.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: acc, ExternalID: fmt.Sprint("u", r.IntN(8))}, Now: now,
			Attributes: []store.AttributeValue{{AttributeID: int64(r.IntN(16) + 1), Value: json.RawMessage(`"v"`)}, {AttributeID: int64(r.IntN(20) + 1)}}})
	case 7:
		tx.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: acc, ExternalID: fmt.Sprint("u", r.IntN(8))}, Now: now,
			SetGroups: true, GroupScope: s, Groups: []int64{int64(r.IntN(20) + 1), int64(r.IntN(20) + 1)}})
	case 8:
		tx.DeleteUser(ctx, id)
	case 9:
		tx.DeleteExpired(ctx, now, r.IntN(4))
	case 10:
		tx.EnsureEmbedTenant(ctx, acc, name, r.IntN(4))
	case 11:
		desc := fmt.Sprint("d", r.IntN(3))
		tx.UpsertDefinitions(ctx, s, []store.GroupDef{{Name: name, Description: &desc}, {Name: "g1"}}, nil)
	case 12:
		tx.UpsertDefinitions(ctx, s, nil, []store.AttributeDef{{Name: name, Type: store.TypeString, DisplayName: &name}})
	case 13:
		tx.DeleteGroup(ctx, s, int64(r.IntN(20)+1))
	case 14:
		tx.DeleteAttribute(ctx, s, int64(r.IntN(20)+1))
	case 15:
		tx.CreateSession(ctx, []byte(fmt.Sprint("new-", r.IntN(4))), store.Session{AccountID: acc, UserID: id, ExpiresAt: now.Add(time.Hour)})
	case 16:
		tx.ExchangeSession(ctx, []byte(fmt.Sprintf("s-%d-%d-b", r.IntN(2), r.IntN(6))), []byte(fmt.Sprint("tok-", r.IntN(4))), now.Add(time.Hour), now)
	case 17:
		tx.RevokeUserSessions(ctx, id)
	case 18:
		tx.CreateThread(ctx, store.Thread{AccountID: acc, ChatID: fmt.Sprint("c-", r.IntN(8)), AgentID: "7", UserID: id})
	case 19:
		tx.AppendMessages(ctx, acc, fmt.Sprint("c-", r.IntN(8)), int64(r.IntN(10)), []store.ThreadMessage{{ID: fmt.Sprint("m", r.IntN(4)), Sort: int64(r.IntN(9)), Body: json.RawMessage(`{"x":1}`)}})
	case 20:
		tx.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: 9, ExternalID: "nobody"}, Persistent: true})
	case 21:
		tx.DeleteUser(ctx, id+100)
	}
}

// TestRollbackRestoresEverything checks the undo log: random writes of every
// kind inside a failing InTx leave the data exactly as before.
func TestRollbackRestoresEverything(t *testing.T) {
	for round := range 200 {
		want, got := New(WithClock(fixedClock)), New(WithClock(fixedClock))
		seed(t, want)
		seed(t, got)
		r := rand.New(rand.NewPCG(uint64(round), 1))
		n := 1 + r.IntN(40)
		err := got.InTx(t.Context(), func(tx store.Tx) error {
			for range n {
				randomOp(t.Context(), r, tx)
			}
			return errBoom
		})
		if err != errBoom {
			t.Fatalf("InTx = %v, want fn's error", err)
		}
		if !reflect.DeepEqual(snapshot(want), snapshot(got)) {
			t.Fatalf("round %d: %d writes in a failed transaction left traces", round, n)
		}
	}
}

// TestFailedCallUndoesItself checks that a failing Tx method undoes its own
// partial writes, while the transaction keeps what fn did before it (as a
// failed statement inside an SQL transaction).
func TestFailedCallUndoesItself(t *testing.T) {
	st := New()
	ctx := t.Context()
	a, _ := st.SaveAccount(ctx, store.Account{Name: "acme"})
	s := store.TenantWide(a.ID)
	if err := st.UpsertDefinitions(ctx, s, nil, []store.AttributeDef{{Name: "x", Type: store.TypeString}}); err != nil {
		t.Fatal(err)
	}
	found, _ := st.Lookup(ctx, store.Lookup{Scope: s, AttrNames: []string{"x"}})
	key := store.UserKey{AccountID: a.ID, ExternalID: "u"}
	err := st.InTx(ctx, func(tx store.Tx) error {
		if _, err := tx.UpsertUser(ctx, store.UserUpsert{UserKey: key, Persistent: true, DisplayName: ptr("kept")}); err != nil {
			return err
		}
		// The profile and the value are written before the session, whose
		// API key does not exist.
		_, err := tx.UpsertUser(ctx, store.UserUpsert{UserKey: key, DisplayName: ptr("undone"), Attributes: []store.AttributeValue{
			{AttributeID: found.Attributes[0].ID, Value: json.RawMessage(`"DE"`)},
		}, Session: &store.NewSession{Hash: []byte("h"), Session: store.Session{AccountID: a.ID, KeyHash: []byte("no such key"), ExpiresAt: t0.Add(time.Minute)}}})
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("UpsertUser = %v, want ErrNotFound", err)
		}
		return nil // commit the rest
	})
	if err != nil {
		t.Fatal(err)
	}
	u, err := st.UserByKey(ctx, key, t0)
	if err != nil {
		t.Fatalf("user of the committed transaction: %v", err)
	}
	if u.DisplayName != "kept" {
		t.Errorf("profile of a failed call was kept: %q", u.DisplayName)
	}
	if d, _ := st.UserData(ctx, u.ID, s); len(d.Attributes) != 0 {
		t.Errorf("values of a failed call were kept: %+v", d.Attributes)
	}
}

func ptr[T any](v T) *T { return &v }

func TestTxFailsAfterInTx(t *testing.T) {
	st := New()
	ctx := t.Context()
	var leaked store.Tx
	if err := st.InTx(ctx, func(tx store.Tx) error { leaked = tx; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := leaked.SaveAccount(ctx, store.Account{Name: "late"}); !errors.Is(err, errTxDone) {
		t.Errorf("write through an ended Tx = %v, want errTxDone", err)
	}
	if _, err := leaked.AccountByName(ctx, "late"); !errors.Is(err, errTxDone) {
		t.Errorf("read through an ended Tx = %v, want errTxDone", err)
	}
	if _, err := st.AccountByName(ctx, "late"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("write through an ended Tx was stored: %v", err)
	}
}

func TestPanicInTxRollsBack(t *testing.T) {
	st := New()
	ctx := t.Context()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("panic did not propagate")
			}
		}()
		st.InTx(ctx, func(tx store.Tx) error {
			tx.SaveAccount(ctx, store.Account{Name: "acme"})
			panic("boom")
		})
	}()
	// The lock was released and nothing was kept.
	if _, err := st.AccountByName(ctx, "acme"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("account of a panicking transaction: %v", err)
	}
	if _, err := st.SaveAccount(ctx, store.Account{Name: "next"}); err != nil {
		t.Errorf("store unusable after a panic: %v", err)
	}
}

func TestTxIsSafeForConcurrentUse(t *testing.T) {
	st := New()
	ctx := t.Context()
	a, _ := st.SaveAccount(ctx, store.Account{Name: "acme"})
	err := st.InTx(ctx, func(tx store.Tx) error {
		errs := make(chan error, 8)
		for i := range 8 {
			go func() {
				_, err := tx.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: fmt.Sprint("u", i)}, Persistent: true})
				errs <- err
			}()
		}
		var all error
		for range 8 {
			all = errors.Join(all, <-errs)
		}
		return all
	})
	if err != nil {
		t.Fatal(err)
	}
}
