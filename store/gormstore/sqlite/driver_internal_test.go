package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore"
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

// twoConns opens two connections of the driver on a file database of the
// test's own, with a table t (a, b, c) of one row.
func twoConns(t *testing.T) (*sql.DB, *sql.Conn, *sql.Conn) {
	t.Helper()
	db, err := sql.Open(driverName, "file:"+filepath.Join(t.TempDir(), "r.db")+"?_journal_mode=WAL&_busy_timeout=200&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (a INTEGER, b TEXT, c TEXT); INSERT INTO t VALUES (1, 'bee', 'sea')"); err != nil {
		t.Fatal(err)
	}
	var cs [2]*sql.Conn
	for i := range cs {
		if cs[i], err = db.Conn(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs[i].Close() })
	}
	return db, cs[0], cs[1]
}

// TestExecOfRows: a statement that returns rows, run as an exec (INSERT
// ... RETURNING, a SELECT), ends as with go-sqlite3's own: its write
// commits, a transaction around it commits, and the connection's snapshot
// is not pinned.
func TestExecOfRows(t *testing.T) {
	db, c1, c2 := twoConns(t)
	ctx := t.Context()
	count := func(c *sql.Conn) (n int) {
		t.Helper()
		if err := c.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i := range 2 { // the second time on a kept statement, were it kept
		if _, err := c1.ExecContext(ctx, "INSERT INTO t (a) VALUES (?) RETURNING a", 2); err != nil {
			t.Fatal(err)
		}
		if n := count(c2); n != 2+i {
			t.Fatalf("the other connection sees %d rows, want %d: the insert did not commit", n, 2+i)
		}
	}
	if _, err := c2.ExecContext(ctx, "INSERT INTO t (a) VALUES (3)"); err != nil {
		t.Fatalf("the other connection's write: %v", err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO t (a) VALUES (?) RETURNING a", 4); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit after an exec of INSERT ... RETURNING: %v", err)
	}
	if _, err := c1.ExecContext(ctx, "SELECT a FROM t"); err != nil {
		t.Fatal(err)
	}
	before := count(c1)
	if _, err := c2.ExecContext(ctx, "INSERT INTO t (a) VALUES (5)"); err != nil {
		t.Fatal(err)
	}
	if n := count(c1); n != before+1 {
		t.Errorf("after an exec of a SELECT the connection sees %d rows, want %d", n, before+1)
	}
}

// TestSchemaChange: a query whose columns a schema change could change
// (SELECT *) is not kept, and names the table's columns after they
// changed, as go-sqlite3's own does (at once on the same connection, from
// the second run after another connection changed them); one that names
// its columns is kept and reads them as before.
func TestSchemaChange(t *testing.T) {
	_, c1, c2 := twoConns(t)
	ctx := t.Context()
	read := func(q string) string {
		t.Helper()
		r, err := c1.QueryContext(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		cs, _ := r.Columns()
		vals := make([]any, len(cs))
		ptrs := make([]any, len(cs))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if !r.Next() {
			t.Fatal("no row", r.Err())
		}
		if err := r.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(cs, vals)
	}
	const all, named = "SELECT * FROM t LIMIT 1", "SELECT a, c FROM t LIMIT 1"
	read(all)
	read(named)
	for _, step := range []struct {
		on   *sql.Conn
		ddl  string
		want string
	}{
		{c1, "ALTER TABLE t DROP COLUMN b", "[a c] [1 sea]"},
		{c2, "ALTER TABLE t ADD COLUMN d TEXT DEFAULT 'dee'", "[a c d] [1 sea dee]"},
		{c2, "CREATE TEMP VIEW t AS SELECT 7 AS a, 'z' AS c", "[a c d] [1 sea dee]"}, // another connection's temp view
		{c1, "CREATE TEMP VIEW t AS SELECT 7 AS a, 'z' AS c", "[a c] [7 z]"},
	} {
		if _, err := step.on.ExecContext(ctx, step.ddl); err != nil {
			t.Fatal(err)
		}
		if step.on == c2 {
			read(all) // go-sqlite3's own connection names the old columns once after another changed them
		}
		if got := read(all); got != step.want {
			t.Errorf("after %q: %s, want %s", step.ddl, got, step.want)
		}
	}
	if got := read(named); got != "[a c] [7 z]" {
		t.Errorf("the named columns: %s, want [a c] [7 z]", got)
	}
	var dc *conn
	_ = c1.Raw(func(d any) error { dc = d.(*conn); return nil })
	if _, ok := dc.stmts[all]; ok {
		t.Error("SELECT * kept")
	}
	if _, ok := dc.stmts[named]; !ok {
		t.Error("the named columns' query not kept")
	}
	if _, ok := dc.stmts["SELECT count(*) FROM t"]; ok {
		t.Error("count(*) kept before it ran")
	}
	var n int
	if err := c1.QueryRowContext(ctx, "SELECT count( * ) FROM t").Scan(&n); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	if _, ok := dc.stmts["SELECT count( * ) FROM t"]; !ok {
		t.Error("count( * ) not kept")
	}
}

// TestLargeArgumentsNotKept: a statement run with large text or blob
// arguments is not kept, so SQLite does not hold their copies after it.
func TestLargeArgumentsNotKept(t *testing.T) {
	c, raw := openConn(t)
	ctx := t.Context()
	const q = "SELECT length(?)"
	for _, size := range []int{maxKeptArgs + 1, 10} {
		var n int
		if err := c.QueryRowContext(ctx, q, make([]byte, size)).Scan(&n); err != nil || n != size {
			t.Fatalf("length %d (%v), want %d", n, err, size)
		}
		if _, kept := raw().stmts[q]; kept != (size == 10) {
			t.Errorf("%d bytes bound: kept %v", size, kept)
		}
	}
}

// TestStoreStatementsKept: the store's reads name their columns, so the
// connections keep them: after a read of a user, a connection holds its
// statement, and no kept text has a '*' but count(*)'s.
func TestStoreStatementsKept(t *testing.T) {
	db, err := gorm.Open(Dialector(filepath.Join(t.TempDir(), "s.db")), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	sqlDB.SetMaxOpenConns(1) // every statement on one connection
	st, err := gormstore.OpenDB(db, gormstore.WithCloseDB())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx := t.Context()
	for range 2 {
		if _, err := st.UserByKey(ctx, store.UserKey{AccountID: 1, ExternalID: "nobody"}, time.Now()); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("UserByKey: %v, want not found", err)
		}
	}
	c, err := sqlDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var texts []string
	_ = c.Raw(func(d any) error {
		for q := range d.(*conn).stmts {
			texts = append(texts, q)
		}
		return nil
	})
	users := 0
	for _, q := range texts {
		if star(q) {
			t.Errorf("kept %q", q)
		}
		if strings.HasPrefix(q, "SELECT") && strings.Contains(q, "FROM `embedkit_users`") {
			users++
		}
	}
	if users == 0 {
		t.Errorf("no statement of the users' table kept among %q", texts)
	}
}
