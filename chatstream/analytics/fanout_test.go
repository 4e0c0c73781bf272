package analytics

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

func TestCompileCopies(t *testing.T) {
	views := map[string]bool{"customers": true, "orders": true}
	for _, tt := range []struct {
		q           string
		ctes, views float64
	}{
		{"SELECT count(*) FROM customers", 1, 1},
		{"WITH de AS (SELECT * FROM customers) SELECT count(*) FROM de", 1, 1},
		{"WITH m AS (SELECT * FROM orders) SELECT * FROM m a JOIN m b ON a.id = b.id", 2, 2},
		{"WITH a AS (SELECT 1), b AS (SELECT * FROM a, a, a) SELECT * FROM b, b", 6, 0},
		{`WITH "a b"(x) AS MATERIALIZED (SELECT 1), 'c' AS NOT MATERIALIZED (SELECT * FROM "A B", [a b]) SELECT * FROM c, ` + "`C`", 4, 0},
		// Comments and strings neither hide nor invent references.
		{"WITH a AS (SELECT 1) SELECT * FROM a /* a a a */, a -- a a\n", 2, 0},
		{"WITH a AS (SELECT 'a a a') SELECT * FROM a", 1, 0},
		{"SELECT count(*) OVER w FROM customers WINDOW w AS (ORDER BY id)", 1, 1},
		// A name defined again in a nested WITH multiplies again.
		{"WITH a AS (SELECT 1) SELECT * FROM (WITH a AS (SELECT * FROM a x, a y) SELECT * FROM a x, a y)", 25, 0},
	} {
		c, v := compileCopies(tt.q, views)
		if c != tt.ctes || v != tt.views {
			t.Errorf("%s: %v, %v; want %v, %v", tt.q, c, v, tt.ctes, tt.views)
		}
	}
	var b strings.Builder
	b.WriteString("WITH a0 AS (SELECT 1)")
	for i := 1; i <= 19; i++ {
		b.WriteString(strings.NewReplacer("N", strconv.Itoa(i), "P", strconv.Itoa(i-1)).Replace(", aN AS (SELECT * FROM aP x, aP y)"))
	}
	if c, _ := compileCopies(b.String(), views); c <= maxCTECopies {
		t.Errorf("a chain of 19 doubling links: %v copies", c)
	}
	// Columns named as parentheses, in every quoting, hide no link.
	for _, col := range []string{`")"`, `[)]`, `')'`, "`)`", `"("`, `"(x"`} {
		b.Reset()
		b.WriteString("WITH a0(" + col + ") AS (SELECT 1)")
		for i := 1; i <= 19; i++ {
			b.WriteString(strings.NewReplacer("{n}", strconv.Itoa(i), "{p}", strconv.Itoa(i-1), "{c}", col).Replace(", a{n}({c}) AS NOT MATERIALIZED (SELECT x.{c} FROM a{p} x, a{p} y)"))
		}
		if c, _ := compileCopies(b.String(), views); c <= maxCTECopies {
			t.Errorf("a chain of 19 doubling links with columns named %s: %v copies", col, c)
		}
	}
	// Two names defined again and again in nested WITHs, each level
	// reading the one before three times: 3^8 copies of the first.
	if c, _ := compileCopies(nestedRedefinitions(8), views); c < 6561 {
		t.Errorf("8 nested redefinitions of two names: %v copies, want at least 6561", c)
	}
}

// nestedRedefinitions is a query of levels nested WITHs that define a and
// b in turn, each reading the previous level's three times.
func nestedRedefinitions(levels int) string {
	q := "WITH a AS (SELECT 1 AS x) SELECT count(*) FROM ("
	prev, closes := "a", ")"
	for i := 1; i <= levels; i++ {
		nm := []string{"a", "b"}[i%2]
		q += "WITH " + nm + " AS NOT MATERIALIZED (SELECT t0.* FROM " + prev + " t0, " + prev + " t1, " + prev + " t2) SELECT * FROM ("
		prev, closes = nm, closes+")"
	}
	return q + "SELECT * FROM " + prev + closes
}

func FuzzCompileCopies(f *testing.F) {
	f.Add("WITH a AS (SELECT 1) SELECT * FROM a, a")
	f.Add("SELECT '\"[`/*--")
	f.Add("WITH x(")
	f.Fuzz(func(t *testing.T, q string) {
		c, v := compileCopies(q, map[string]bool{"x": true})
		if c < 1 || v < 0 {
			t.Fatalf("%q: %v %v", q, c, v)
		}
	})
}

// FuzzCompileCopiesChain: a chain of 10 common table expressions, each
// read twice by the next, counts at least 2^10 copies whatever its
// columns are named and however the name is quoted.
func FuzzCompileCopiesChain(f *testing.F) {
	for _, col := range []string{"x", ")", "(", "as", "a0", "-- x", "/*", "'", `"`, "`", "]"} {
		for style := range uint8(4) {
			f.Add(col, style)
		}
	}
	f.Fuzz(func(t *testing.T, col string, style uint8) {
		var q string
		switch style % 4 {
		case 0:
			q = `"` + strings.ReplaceAll(col, `"`, `""`) + `"`
		case 1:
			q = "'" + strings.ReplaceAll(col, "'", "''") + "'"
		case 2:
			q = "`" + strings.ReplaceAll(col, "`", "``") + "`"
		case 3:
			q = "[" + strings.ReplaceAll(col, "]", "") + "]"
		}
		var b strings.Builder
		b.WriteString("WITH a0(" + q + ") AS (SELECT 1)")
		for i := 1; i <= 10; i++ {
			fmt.Fprintf(&b, ", a%d(%s) AS NOT MATERIALIZED (SELECT x.%s FROM a%d x, a%d y)", i, q, q, i-1, i-1)
		}
		b.WriteString(" SELECT count(*) FROM a10")
		if c, _ := compileCopies(b.String(), map[string]bool{}); c < 1024 {
			t.Fatalf("%s: %v copies, want at least 1024", b.String(), c)
		}
	})
}

// FuzzJSONSize: jsonSize never counts a row smaller than encoding/json
// writes it (the tool's 4 MiB cap holds), whatever bytes its strings hold.
func FuzzJSONSize(f *testing.F) {
	for _, s := range []string{"", "a", "<&>\"\\\n", "\u2028\u2029", "\xff\xfe", "é€😀", "\xed\xa0\x80"} {
		f.Add(s, int64(7))
	}
	f.Fuzz(func(t *testing.T, s string, n int64) {
		row := []any{s, n, nil, float64(n) / 3, true, json.Number("12.5")}
		b, err := json.Marshal(row)
		if err != nil {
			t.Fatal(err)
		}
		if got := jsonSize(row); got < int64(len(b)) {
			t.Errorf("jsonSize(%q) = %d, encoded in %d bytes", s, got, len(b))
		}
	})
}
