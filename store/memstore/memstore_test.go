package memstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/memstore"
	"github.com/embedkit/embedkit/store/storetest"
)

func open(tb testing.TB) store.Store {
	st := memstore.New()
	tb.Cleanup(func() { st.Close() })
	return st
}

// TestConformance runs the store contract's conformance suite.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
}

func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) store.Store { return open(b) })
}

// TestNoCgo checks the promise of the package: it builds and vets with
// CGO_ENABLED=0, and none of its dependencies uses cgo or a database driver.
func TestNoCgo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not found:", err)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), gobin, args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("CGO_ENABLED=0 go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("build", ".")
	run("vet", ".")
	cmd := exec.CommandContext(t.Context(), gobin, "list", "-deps", "-f", "{{.ImportPath}} {{len .CgoFiles}}", ".")
	out, err := cmd.Output() // with the default CGO_ENABLED, so cgo files would show
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		path, n, _ := strings.Cut(strings.TrimSpace(line), " ")
		if n != "0" || path == "C" || path == "runtime/cgo" {
			t.Errorf("dependency %s uses cgo", path)
		}
		for _, banned := range []string{"gormstore", "gorm.io", "sqlite", "pgx", "database/sql"} {
			if strings.Contains(path, banned) {
				t.Errorf("dependency %s: memstore must not need a database", path)
			}
		}
	}
}

func TestReturnedValuesAreCopies(t *testing.T) {
	st := memstore.New()
	ctx := t.Context()
	branches := []string{"main"}
	a, err := st.SaveAccount(ctx, store.Account{Name: "acme", Branches: branches})
	if err != nil {
		t.Fatal(err)
	}
	branches[0] = "changed by the caller"
	a.Branches[0] = "changed by the caller"
	if got, _ := st.AccountByID(ctx, a.ID); got.Branches[0] != "main" {
		t.Errorf("branches = %v, want [main]", got.Branches)
	}

	hash := []byte("key")
	st.SaveAPIKey(ctx, store.APIKey{Hash: hash, AccountID: a.ID})
	hash[0] = 'X'
	k, ka, err := st.APIKeyByHash(ctx, []byte("key"))
	if err != nil {
		t.Fatal("API key stored under the caller's mutated slice:", err)
	}
	k.Hash[0] = 'Y'
	ka.Branches[0] = "changed by the caller"
	if _, ka, err := st.APIKeyByHash(ctx, []byte("key")); err != nil || ka.Branches[0] != "main" {
		t.Errorf("returned hash or account aliases the stored one: %v, %v", err, ka.Branches)
	}

	sc := json.RawMessage(`{"a":1}`)
	st.UpsertDefinitions(ctx, store.TenantWide(a.ID), nil, []store.AttributeDef{{Name: "x", Type: store.TypeString}})
	found, _ := st.Lookup(ctx, store.Lookup{Scope: store.TenantWide(a.ID), AttrNames: []string{"x"}})
	val := json.RawMessage(`"v"`)
	u, err := st.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: "u"}, Persistent: true, SecurityContext: sc,
		Attributes: []store.AttributeValue{{AttributeID: found.Attributes[0].ID, Value: val}}})
	if err != nil {
		t.Fatal(err)
	}
	sc[2], u.SecurityContext[2] = 'X', 'Y'
	if got, _ := st.UserByID(ctx, u.ID, time.Time{}); string(got.SecurityContext) != `{"a":1}` {
		t.Errorf("security context = %s", got.SecurityContext)
	}
	val[1] = 'X'
	d, _ := st.UserData(ctx, u.ID, store.TenantWide(a.ID))
	d.Attributes[0].Value[1] = 'Y'
	if d, _ := st.UserData(ctx, u.ID, store.TenantWide(a.ID)); string(d.Attributes[0].Value) != `"v"` {
		t.Errorf("value = %s", d.Attributes[0].Value)
	}

	st.CreateThread(ctx, store.Thread{AccountID: a.ID, ChatID: "c", AgentID: "7", UserID: u.ID})
	body := json.RawMessage(`{"m":1}`)
	st.AppendMessages(ctx, a.ID, "c", 1, []store.ThreadMessage{{ID: "m", Sort: 1, Body: body}})
	body[2] = 'X'
	msgs, _ := st.Messages(ctx, a.ID, "c")
	msgs[0].Body[2] = 'Y'
	if msgs, _ := st.Messages(ctx, a.ID, "c"); string(msgs[0].Body) != `{"m":1}` {
		t.Errorf("body = %s", msgs[0].Body)
	}
}

func TestClose(t *testing.T) {
	st := memstore.New()
	ctx := t.Context()
	if _, err := st.SaveAccount(ctx, store.Account{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, err := st.AccountByName(ctx, "acme"); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("read after Close = %v, want ErrUnavailable", err)
	}
	if _, err := st.SaveAccount(ctx, store.Account{Name: "x"}); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("write after Close = %v, want ErrUnavailable", err)
	}
	if err := st.InTx(ctx, func(store.Tx) error { return nil }); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("InTx after Close = %v, want ErrUnavailable", err)
	}
}

func TestDoneContext(t *testing.T) {
	st := memstore.New()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := st.AccountByName(ctx, "acme"); !errors.Is(err, context.Canceled) {
		t.Errorf("read with a canceled context = %v", err)
	}
	called := false
	if err := st.InTx(ctx, func(store.Tx) error { called = true; return nil }); !errors.Is(err, context.Canceled) || called {
		t.Errorf("InTx with a canceled context = %v (fn called: %v)", err, called)
	}
	dctx, dcancel := context.WithDeadline(t.Context(), time.Unix(0, 0))
	defer dcancel()
	if _, err := st.SaveAccount(dctx, store.Account{Name: "x"}); !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("write past its deadline = %v, want ErrUnavailable and DeadlineExceeded", err)
	}
}

// TestInTxIsIsolated checks that a reader outside a transaction never sees
// its uncommitted writes.
func TestInTxIsIsolated(t *testing.T) {
	st := memstore.New()
	ctx := t.Context()
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- st.InTx(ctx, func(tx store.Tx) error {
			if _, err := tx.SaveAccount(ctx, store.Account{Name: "acme"}); err != nil {
				return err
			}
			close(inside)
			<-release
			return errors.New("roll back")
		})
	}()
	<-inside
	read := make(chan error)
	go func() {
		_, err := st.AccountByName(ctx, "acme")
		read <- err
	}()
	select {
	case err := <-read:
		t.Fatalf("read during a transaction returned (%v) instead of waiting", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	if err := <-done; err == nil {
		t.Fatal("InTx committed")
	}
	if err := <-read; !errors.Is(err, store.ErrNotFound) {
		t.Errorf("reader saw an uncommitted write: %v", err)
	}
}
