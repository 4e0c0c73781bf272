package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// openConn opens one connection of the driver on a file database of the
// test's own, with a table t of the values 1 to 5.
func openConn(t *testing.T) (*sql.Conn, func() *conn) {
	t.Helper()
	db, err := sql.Open(driverName, "file:"+filepath.Join(t.TempDir(), "d.db")+"?_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	c, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.ExecContext(t.Context(), "CREATE TABLE t (v INTEGER); INSERT INTO t VALUES (1), (2), (3), (4), (5)"); err != nil {
		t.Fatal(err)
	}
	return c, func() *conn {
		var dc *conn
		_ = c.Raw(func(d any) error { dc = d.(*conn); return nil })
		return dc
	}
}

func sum(t *testing.T, r *sql.Rows) (n int) {
	t.Helper()
	for r.Next() {
		var v int
		if err := r.Scan(&v); err != nil {
			t.Fatal(err)
		}
		n += v
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStatementsKept: a text is prepared once per connection, then its
// statement serves each later query and exec of the same text; a text of
// several statements runs them all and is not kept.
func TestStatementsKept(t *testing.T) {
	c, raw := openConn(t)
	ctx := t.Context()
	const q = "SELECT v FROM t WHERE v > ?"
	for range 3 {
		r, err := c.QueryContext(ctx, q, 2)
		if err != nil {
			t.Fatal(err)
		}
		if n := sum(t, r); n != 12 {
			t.Fatalf("sum %d, want 12", n)
		}
	}
	first := raw().stmts[q]
	if first == nil {
		t.Fatal("the query's statement is not kept")
	}
	for i := range 3 {
		if _, err := c.ExecContext(ctx, "UPDATE t SET v = v + ? WHERE v = 0", i); err != nil {
			t.Fatal(err)
		}
	}
	if got := raw().stmts[q]; got != first || len(raw().stmts) != 2 {
		t.Errorf("kept %d statements (the query's the same: %v), want 2", len(raw().stmts), got == first)
	}
	if _, err := c.ExecContext(ctx, "CREATE TABLE u (v); CREATE TABLE w (v)"); err != nil {
		t.Fatal(err)
	}
	var tables int
	if err := c.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE name IN ('u', 'w')").Scan(&tables); err != nil || tables != 2 {
		t.Errorf("%d of the two tables created (%v), want both", tables, err)
	}
	for k := range raw().stmts {
		if strings.Contains(k, ";") {
			t.Errorf("kept %q, a text of several statements", k)
		}
	}
}

// TestStatementInUse runs a text again while rows of its kept statement
// are open, and fills the connection's statements past their bound: the
// open rows read on to their end, unaffected.
func TestStatementInUse(t *testing.T) {
	c, raw := openConn(t)
	ctx := t.Context()
	const q = "SELECT v FROM t ORDER BY v"
	outer, err := c.QueryContext(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for outer.Next() {
		var v int
		if err := outer.Scan(&v); err != nil {
			t.Fatal(err)
		}
		n += v
		inner, err := c.QueryContext(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if got := sum(t, inner); got != 15 {
			t.Fatalf("inner sum %d, want 15", got)
		}
		for i := range maxStmts / 4 {
			var one int
			if err := c.QueryRowContext(ctx, fmt.Sprintf("SELECT %d", v*100+i)).Scan(&one); err != nil {
				t.Fatal(err)
			}
		}
		if k := len(raw().stmts); k > maxStmts {
			t.Fatalf("%d statements kept, want at most %d", k, maxStmts)
		}
	}
	if err := outer.Close(); err != nil || n != 15 {
		t.Fatalf("outer sum %d (%v), want 15", n, err)
	}
	if r, err := c.QueryContext(ctx, q); err != nil || sum(t, r) != 15 {
		t.Fatalf("the text after its rows closed: %v", err)
	}
}

// TestStatementError: a text that does not prepare, or is given more or
// fewer arguments than it has parameters, behaves as go-sqlite3's own
// (an error; the extra ones ignored), and leaves nothing busy.
func TestStatementError(t *testing.T) {
	c, raw := openConn(t)
	ctx := context.Background()
	if _, err := c.QueryContext(ctx, "SELECT nope FROM t"); err == nil || !strings.Contains(err.Error(), "no such column") {
		t.Errorf("got %v, want no such column", err)
	}
	var n int
	const q = "SELECT count(*) FROM t WHERE v = ? OR v = ?"
	for range 2 {
		if err := c.QueryRowContext(ctx, q, 3, 4).Scan(&n); err != nil || n != 2 {
			t.Fatalf("count %d (%v), want 2", n, err)
		}
		if err := c.QueryRowContext(ctx, q, 3).Scan(&n); err == nil || !strings.Contains(err.Error(), "not enough args") {
			t.Errorf("one argument for two parameters: %v, want not enough args", err)
		}
		if err := c.QueryRowContext(ctx, q, 3, 9, 4).Scan(&n); err != nil || n != 1 {
			t.Errorf("three arguments for two parameters: count %d (%v), want 1", n, err)
		}
	}
	for k, s := range raw().stmts {
		if s.busy || strings.Contains(k, "nope") {
			t.Errorf("%q kept (busy %v)", k, s.busy)
		}
	}
}
