//go:build cgo

package analytics

/*
#include <stdlib.h>
#include "guard.h"
*/
import "C"

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime/cgo"
	"sort"
	"strings"
	"unsafe"

	"github.com/mattn/go-sqlite3"
)

// SQLite authorizer action codes and results (sqlite3.h).
const (
	authOK   = 0
	authDeny = 1

	opPragma    = 19
	opRead      = 20
	opSelect    = 21
	opFunction  = 31
	opRecursive = 33
)

// guard is the per-connection state of the hooks installed on one SQLite
// connection: the authorizer (in Go, through analyticsAuthorize) and the
// progress handler (in C, counting down budget). It is used by one query at
// a time: the connection is held exclusively (database/sql's *sql.Conn)
// while active is true.
type guard struct {
	db     *C.sqlite3
	budget *C.struct_analytics_budget // C memory: the progress handler reads it
	handle cgo.Handle

	views map[string]bool // the filtered views (temp schema)

	// Set for the duration of one query.
	active bool
	access Access
	denied string // why the authorizer denied something, safe to show
}

// handleOf returns the sqlite3* of a go-sqlite3 connection. The driver does
// not export it; the field is read by reflection (go-sqlite3 v1.14.x keeps
// it in SQLiteConn.db), and a test fails if that ever changes.
func handleOf(c *sqlite3.SQLiteConn) (*C.sqlite3, error) {
	f := reflect.ValueOf(c).Elem().FieldByName("db")
	if !f.IsValid() || f.Kind() != reflect.Pointer || f.IsNil() {
		return nil, fmt.Errorf("analytics: unsupported go-sqlite3 version: no connection handle")
	}
	return (*C.sqlite3)(unsafe.Pointer(f.Pointer())), nil
}

// install puts the authorizer and the progress handler on c. Both stay
// inactive (allowing everything) until a query calls begin.
func (g *guard) install(c *sqlite3.SQLiteConn, views []string) error {
	db, err := handleOf(c)
	if err != nil {
		return err
	}
	g.db = db
	g.views = make(map[string]bool, len(views))
	for _, v := range views {
		g.views[strings.ToLower(v)] = true
	}
	g.budget = (*C.struct_analytics_budget)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_analytics_budget{}))))
	g.handle = cgo.NewHandle(g)
	C.analytics_install(db, C.uintptr_t(g.handle), g.budget)
	return nil
}

// release frees the guard's C memory and handle. The connection must be
// closed already (its hooks refer to both).
func (g *guard) release() {
	g.handle.Delete()
	C.free(unsafe.Pointer(g.budget))
}

// begin activates the guard for one query of a user with access a, allowing
// at most steps thousand virtual machine instructions.
func (g *guard) begin(a Access, steps int64) {
	g.access, g.denied, g.active = a, "", true
	g.budget.remaining = C.long(steps)
	g.budget.active = 1
}

// end deactivates the guard.
func (g *guard) end() {
	g.active = false
	g.budget.active = 0
	g.access = Access{}
}

// exhausted reports whether the last query ran out of its step budget.
func (g *guard) exhausted() bool { return g.budget.remaining <= 0 }

// check compiles sql without running it. It returns the text of its first
// statement ("" when sql holds none) and whether that statement is
// read-only, is an EXPLAIN, is followed by another statement, and has
// parameters.
func (g *guard) check(sql string) (first string, readonly, explain, more, params bool, err error) {
	cs := C.CString(sql)
	defer C.free(unsafe.Pointer(cs))
	var used, ro, ex, mo, none, pa C.int
	rc := C.analytics_check(g.db, cs, C.int(len(sql)), &used, &ro, &ex, &mo, &none, &pa)
	if rc != 0 {
		return "", false, false, false, false, fmt.Errorf("%s", C.GoString(C.analytics_errmsg(g.db)))
	}
	if none != 0 {
		return "", false, false, false, false, nil
	}
	return sql[:int(used)], ro != 0, ex != 0, mo != 0, pa != 0, nil
}

//export analyticsAuthorize
func analyticsAuthorize(h C.uintptr_t, op C.int, a1, a2, a3, a4 *C.char) C.int {
	g := cgo.Handle(h).Value().(*guard)
	if !g.active {
		return authOK
	}
	view := ""
	if a4 != nil {
		view = strings.ToLower(C.GoString(a4))
	}
	switch op {
	case opSelect, opRecursive:
		return authOK
	case opRead:
		// Base tables are read only from inside the filtered views. A
		// common table expression (no database name) and the JSON
		// table-valued functions read no stored data.
		if view != "" && g.views[view] || a3 == nil || *a3 == 0 {
			return authOK
		}
		// A column of a filtered view itself (they live in temp, where
		// queries cannot create anything).
		if C.GoString(a3) == "temp" && g.views[strings.ToLower(C.GoString(a1))] {
			return authOK
		}
		if t := strings.ToLower(C.GoString(a1)); t == "json_each" || t == "json_tree" {
			return authOK
		}
		return g.deny(fmt.Sprintf("the query may read only the views of the data model (%s), not the table %q", g.viewList(), C.GoString(a1)))
	case opFunction:
		name := strings.ToLower(C.GoString(a2))
		if strings.HasPrefix(name, rlsPrefix) && !g.views[view] {
			return g.deny(fmt.Sprintf("the function %s is not available", name))
		}
		if name == "load_extension" {
			return g.deny("the function load_extension is not available")
		}
		return authOK
	case opPragma:
		return g.deny("PRAGMA statements are not allowed; only a single SELECT statement is")
	}
	return g.deny("only a single read-only SELECT statement is allowed")
}

func (g *guard) deny(why string) C.int {
	if g.denied == "" {
		g.denied = why
	}
	return authDeny
}

func (g *guard) viewList() string {
	names := make([]string, 0, len(g.views))
	for v := range g.views {
		names = append(names, v)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// prepare installs the views, query_only and the hooks on a new
// connection.
func (t *SQLTool) prepare(sc *sqlite3.SQLiteConn) (*guard, error) {
	g := &guard{}
	if err := sc.RegisterFunc(rlsPrefix+"all", func() int64 {
		if g.active && g.access.all {
			return 1
		}
		return 0
	}, false); err != nil {
		return nil, fmt.Errorf("analytics: register row filter: %w", err)
	}
	if err := sc.RegisterFunc(rlsPrefix+"values", func(attr string) string {
		if !g.active || g.access.all {
			return "[]"
		}
		b, err := json.Marshal(g.access.values[attr])
		if err != nil || len(g.access.values[attr]) == 0 {
			return "[]"
		}
		return string(b)
	}, false); err != nil {
		return nil, fmt.Errorf("analytics: register row filter: %w", err)
	}
	for i, s := range t.setup {
		if _, err := sc.Exec(s, nil); err != nil {
			return nil, fmt.Errorf("analytics: create view %q: %w", t.views[i], err)
		}
	}
	for i, v := range t.views {
		rows, err := sc.Query(fmt.Sprintf("SELECT * FROM temp.%q LIMIT 0", v), nil)
		if err != nil {
			return nil, fmt.Errorf("analytics: view %q does not compile: %w", t.views[i], err)
		}
		rows.Close()
	}
	if _, err := sc.Exec("PRAGMA query_only = 1", nil); err != nil {
		return nil, fmt.Errorf("analytics: set query_only: %w", err)
	}
	if err := g.install(sc, t.views); err != nil {
		return nil, err
	}
	return g, nil
}

// sqliteMessage returns the message of a SQLite error.
func sqliteMessage(err error) (string, bool) {
	var se sqlite3.Error
	if errors.As(err, &se) {
		return se.Error(), true
	}
	return "", false
}
