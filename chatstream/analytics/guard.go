//go:build cgo

package analytics

/*
#include <stdlib.h>
#include "guard.h"
*/
import "C"

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"runtime/cgo"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"
	"weak"

	"github.com/mattn/go-sqlite3"
)

// SQLite authorizer action codes and results (sqlite3.h), and result codes.
const (
	authOK   = 0
	authDeny = 1

	opPragma    = 19
	opRead      = 20
	opSelect    = 21
	opFunction  = 31
	opRecursive = 33

	sqliteRow  = 100
	sqliteDone = 101
)

// sqliteViews names the views the tool creates on each connection. Every
// view of the model is three temporary views:
//
//   - the source view, with a secret name, holds the host's SQL;
//   - the filter view, with a secret name, reads the source view and
//     applies the row filters;
//   - the model's view, with the model's name, reads the filter view.
//
// SQLite tells the authorizer which view a read comes from by the name
// the FROM clause uses, and a query can give a common table expression
// any name, so no name a query can write is trusted: a table is read only
// from inside a secret view (whose name the query cannot know), and only
// the tables that view read when the tool set it up.
type sqliteViews struct {
	visible map[string]bool // the model's view names, lower case
	secret  map[string]int  // secret view name → index of the model view
	source  []string        // source view name of each model view
	filter  []string        // filter view name of each model view
	list    string          // the model's view names, for messages
}

func newSQLiteViews(m *Model) *sqliteViews {
	tag := strings.ToLower(rand.Text()[:16])
	v := &sqliteViews{visible: map[string]bool{}, secret: map[string]int{}}
	var names []string
	for i, mv := range m.Views {
		v.visible[strings.ToLower(mv.Name)] = true
		names = append(names, mv.Name)
		src, flt := fmt.Sprintf("embedkit_%s_source_%d", tag, i), fmt.Sprintf("embedkit_%s_filter_%d", tag, i)
		v.source, v.filter = append(v.source, src), append(v.filter, flt)
		v.secret[src], v.secret[flt] = i, i
	}
	v.list = strings.Join(names, ", ")
	return v
}

// setup returns the statements that create the views of m.
func (v *sqliteViews) setup(m *Model) []string {
	var out []string
	for i, mv := range m.Views {
		out = append(out, fmt.Sprintf("CREATE TEMP VIEW %q AS %s", v.source[i], mv.SQL))
		var b strings.Builder
		fmt.Fprintf(&b, "CREATE TEMP VIEW %q AS SELECT * FROM temp.%q", v.filter[i], v.source[i])
		for j, f := range mv.Filters {
			if j == 0 {
				b.WriteString("\nWHERE ")
			} else {
				b.WriteString("\n  AND ")
			}
			fmt.Fprintf(&b, "((SELECT %sall()) OR (%s) IN (SELECT value FROM json_each(%svalues('%s'))))",
				rlsPrefix, f.Column, rlsPrefix, strings.ReplaceAll(filterKey(i, j, f), "'", "''"))
		}
		// OFFSET keeps SQLite from flattening the filter view into the
		// query that reads it, so that what it reads is checked in its
		// own context.
		b.WriteString("\nLIMIT -1 OFFSET 0")
		out = append(out, b.String())
		out = append(out, fmt.Sprintf("CREATE TEMP VIEW %q AS SELECT * FROM temp.%q", mv.Name, v.filter[i]))
	}
	return out
}

// maxFunctionCalls bounds the function calls a query compiles (each place
// the query calls a function, in every copy of a common table expression;
// the host's SQL of the model's views does not count).
// SQLite computes a row's expressions without a jump, where its progress
// handler and interrupts are checked, and a call of a built-in function
// over a 1 MiB value is a millisecond or two that nothing charges or
// stops: a row of 1,800 calls (the most 16 KiB of SQL holds) ran 2 to 3 s
// past a 100 ms timeout. With this bound such a row is at most a fraction
// of a second; queries a model writes call far fewer.
const maxFunctionCalls = 256

// functions are the SQL functions a query may call: SQLite's built-in
// functions whose work is proportional to the size of their arguments
// (instr, replace, the trims, LIKE and GLOB are guard.c's, which charge
// their work). Any other function, such as load_extension or json_patch,
// is refused.
var functions = map[string]bool{}

func init() {
	for _, f := range strings.Fields(`
		abs char coalesce concat concat_ws format glob hex ifnull iif instr length like likelihood likely
		lower ltrim max min nullif octet_length printf quote random randomblob replace round rtrim sign
		soundex substr substring trim typeof unhex unicode unlikely upper zeroblob
		date time datetime julianday unixepoch strftime timediff current_date current_time current_timestamp
		acos acosh asin asinh atan atan2 atanh ceil ceiling cos cosh degrees exp floor ln log log10 log2
		mod pi pow power radians sin sinh sqrt tan tanh trunc
		avg count group_concat string_agg sum total
		row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value nth_value
		json jsonb json_array jsonb_array json_array_length json_extract jsonb_extract -> ->> json_insert
		jsonb_insert json_object jsonb_object json_quote json_remove jsonb_remove json_replace jsonb_replace
		json_set jsonb_set json_type json_valid json_group_array jsonb_group_array json_group_object
		jsonb_group_object json_error_position`) {
		functions[f] = true
	}
}

// guard is the per-connection state of the hooks installed on one SQLite
// connection: the authorizer (in Go, through analyticsAuthorize) and the
// progress handler and string functions (in C, counting down budget). It
// is used by one query at a time: the connection is held exclusively
// (database/sql's *sql.Conn) while active is true.
type guard struct {
	db     *C.sqlite3
	budget *C.struct_analytics_budget // C memory: the hooks read it
	handle cgo.Handle
	views  *sqliteViews
	reads  []map[[2]string]bool // per model view: the (database, table) its secret views read
	tables map[string]bool      // names of the schema objects, lower case

	// recording is set while the tool compiles its views on a new
	// connection: reads inside the secret views are recorded, not checked;
	// any other read of a table makes setup fail.
	recording bool

	// Set for the duration of one query.
	active bool
	access Access
	denied string // why the authorizer denied something, safe to show
	calls  int    // the query's function calls compiled (maxFunctionCalls)

	// stopped is set when the query is interrupted (timeout, cancellation).
	// sqlite3_interrupt does not reach the compiler, whose work can grow
	// exponentially with the query's size (common table expressions that
	// each read the previous one twice); the authorizer, which the
	// compiler calls for every SELECT and every column it resolves,
	// refuses everything once it is set, which ends the compilation.
	stopped atomic.Bool
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

// release frees the guard's C memory and handle. The connection must be
// closed already (its hooks refer to both).
func (g *guard) release() {
	g.handle.Delete()
	C.free(unsafe.Pointer(g.budget))
}

// begin activates the guard for one query of a user with access a, allowing
// at most steps thousand virtual machine instructions.
func (g *guard) begin(a Access, steps int64) {
	g.access, g.denied, g.active, g.calls = a, "", true, 0
	g.stopped.Store(false)
	g.budget.remaining = C.long(min(steps, maxCLong))
	g.budget.mem0 = C.analytics_memory_used()
	g.budget.over_memory = 0
	g.budget.carry = 0
	g.budget.active = 1
}

// end deactivates the guard.
func (g *guard) end() {
	g.active = false
	g.budget.active = 0
	g.access = Access{}
}

// maxCLong is the largest C long.
const maxCLong = 1<<(8*unsafe.Sizeof(C.long(0))-1) - 1

// exhausted reports whether the last query ran out of its step budget.
func (g *guard) exhausted() bool { return g.budget.remaining <= 0 }

// overMemory reports whether the last query was stopped for the memory it
// used (ANALYTICS_MAX_MEMORY_BYTES).
func (g *guard) overMemory() bool { return g.budget.over_memory != 0 }

//export analyticsAuthorize
func analyticsAuthorize(h C.uintptr_t, op C.int, a1, a2, a3, a4 *C.char) C.int {
	g := cgo.Handle(h).Value().(*guard)
	if !g.active {
		return authOK
	}
	if g.stopped.Load() {
		return authDeny
	}
	str := func(p *C.char) string {
		if p == nil {
			return ""
		}
		return strings.ToLower(C.GoString(p))
	}
	context := str(a4)
	switch op {
	case opSelect, opRecursive:
		return authOK
	case opRead:
		return g.read(str(a3), str(a1), context)
	case opFunction:
		name := str(a2)
		if strings.HasPrefix(name, rlsPrefix) {
			if _, ok := g.views.secret[context]; ok {
				return authOK
			}
		} else if functions[name] {
			if _, host := g.views.secret[context]; host {
				return authOK // the host's SQL of a view, not the model's
			}
			if g.calls++; g.calls > maxFunctionCalls {
				return g.deny(fmt.Sprintf("the query calls functions in more than %d places; compute less in one query", maxFunctionCalls))
			}
			return authOK
		}
		return g.deny(fmt.Sprintf("the function %s is not available", name))
	case opPragma:
		return g.deny("PRAGMA statements are not allowed; only a single SELECT statement is")
	}
	return g.deny("only a single read-only SELECT statement is allowed")
}

// read decides whether a query may read table of database db from inside
// the FROM item named context.
func (g *guard) read(db, table, context string) C.int {
	switch {
	case db == "":
		// A common table expression or a subquery: what it reads is
		// checked where it reads it.
		return authOK
	case db == "temp" && g.views.visible[table]:
		return authOK
	case db == "temp" && isSecret(g.views, table):
		// Only the tool's views can name a secret view.
		return authOK
	case db == "main" && (table == "json_each" || table == "json_tree") && !g.tables[table]:
		// SQLite's JSON table-valued functions read no stored data.
		return authOK
	}
	if i, ok := g.views.secret[context]; ok {
		if g.recording {
			g.reads[i][[2]string{db, table}] = true
			return authOK
		}
		if g.reads[i][[2]string{db, table}] {
			return authOK
		}
	}
	return g.deny(fmt.Sprintf("the query may read only the views of the data model (%s)", g.views.list))
}

func isSecret(v *sqliteViews, name string) bool {
	_, ok := v.secret[name]
	return ok
}

func (g *guard) deny(why string) C.int {
	if g.denied == "" {
		g.denied = why
	}
	return authDeny
}

// sqliteConn takes a connection of the tool's pool for one query,
// preparing it on first use: the views, query_only and the guard's hooks.
func (t *SQLTool) sqliteConn(ctx context.Context) (*sql.Conn, *guard, error) {
	conn, err := t.db.Conn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("analytics: connect: %w", err)
	}
	var g *guard
	err = conn.Raw(func(dc any) error {
		if u, ok := dc.(interface{ Unwrap() *sqlite3.SQLiteConn }); ok {
			dc = u.Unwrap() // a wrapping driver's, such as the store's sqlite.Dialector
		}
		sc, ok := dc.(*sqlite3.SQLiteConn)
		if !ok {
			return fmt.Errorf("analytics: NewSQLTool supports SQLite through github.com/mattn/go-sqlite3 only (NewPostgresSQLTool is for PostgreSQL), not %T", dc)
		}
		key := weak.Make(sc)
		t.guardMu.Lock()
		g = t.guards[key]
		t.guardMu.Unlock()
		if g != nil {
			return nil
		}
		ng, err := t.prepareSQLite(sc)
		if err != nil {
			// The connection may hold part of the setup: drop it.
			return fmt.Errorf("%w (%w)", err, driver.ErrBadConn)
		}
		t.guardMu.Lock()
		t.guards[key] = ng
		t.guardMu.Unlock()
		runtime.AddCleanup(sc, func(ng *guard) {
			t.guardMu.Lock()
			delete(t.guards, key)
			t.guardMu.Unlock()
			ng.release()
		}, ng)
		g = ng
		return nil
	})
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, g, nil
}

// capCache lowers the connection's page cache of its database to
// ANALYTICS_MAX_CACHE_KIB when the host's is larger: the memory bound of a
// query counts SQLite's memory, which a scan of a large database with a
// large cache would fill without the query holding anything.
func capCache(sc *sqlite3.SQLiteConn) error {
	pragma := func(q string) (int64, error) {
		rows, err := sc.Query(q, nil)
		if err != nil {
			return 0, err
		}
		defer rows.Close()
		v := make([]driver.Value, 1)
		if err := rows.Next(v); err != nil {
			return 0, err
		}
		n, _ := v[0].(int64)
		return n, nil
	}
	size, err := pragma("PRAGMA main.cache_size")
	if err == nil && size > 0 { // pages, not KiB
		var page int64
		if page, err = pragma("PRAGMA main.page_size"); err == nil {
			size = -size * page / 1024
		}
	}
	if err == nil && -size > C.ANALYTICS_MAX_CACHE_KIB {
		_, err = sc.Exec(fmt.Sprintf("PRAGMA main.cache_size = -%d", C.ANALYTICS_MAX_CACHE_KIB), nil)
	}
	if err != nil {
		return fmt.Errorf("analytics: cap the page cache: %w", err)
	}
	return nil
}

// prepareSQLite installs the views, query_only and the hooks on a new
// connection, and records which tables each view reads.
func (t *SQLTool) prepareSQLite(sc *sqlite3.SQLiteConn) (*guard, error) {
	v := t.sqlite
	g := &guard{views: v, tables: map[string]bool{}}
	if err := sc.RegisterFunc(rlsPrefix+"all", func() int64 {
		if g.active && g.access.all {
			return 1
		}
		return 0
	}, false); err != nil {
		return nil, fmt.Errorf("analytics: register row filter: %w", err)
	}
	if err := sc.RegisterFunc(rlsPrefix+"values", func(key string) string {
		if !g.active || g.access.all {
			return "[]"
		}
		b, err := json.Marshal(g.access.values[key])
		if err != nil || len(g.access.values[key]) == 0 {
			return "[]"
		}
		return string(b)
	}, false); err != nil {
		return nil, fmt.Errorf("analytics: register row filter: %w", err)
	}
	// Before any temporary view: changing temp_store drops them. Sorts,
	// DISTINCT sets and temporary tables then stay in memory, which the
	// progress handler bounds (ANALYTICS_MAX_MEMORY_BYTES); SQLite's
	// temporary files it could not.
	if _, err := sc.Exec("PRAGMA temp_store = MEMORY", nil); err != nil {
		return nil, fmt.Errorf("analytics: set temp_store: %w", err)
	}
	if err := capCache(sc); err != nil {
		return nil, err
	}
	if C.analytics_memory_used() <= 0 {
		return nil, errors.New("analytics: SQLite counts no memory (compiled with SQLITE_DEFAULT_MEMSTATUS=0?): the tool cannot bound a query's memory")
	}
	for i, s := range v.setup(t.model) {
		if _, err := sc.Exec(s, nil); err != nil {
			return nil, fmt.Errorf("analytics: create view %q: %w", t.model.Views[i/3].Name, err)
		}
	}
	rows, err := sc.Query("SELECT lower(name) FROM sqlite_schema UNION ALL SELECT lower(name) FROM temp.sqlite_schema", nil)
	if err != nil {
		return nil, fmt.Errorf("analytics: read the schema: %w", err)
	}
	val := make([]driver.Value, 1)
	for rows.Next(val) == nil {
		if s, ok := val[0].(string); ok {
			g.tables[s] = true
		}
	}
	rows.Close()
	if _, err := sc.Exec("PRAGMA query_only = 1", nil); err != nil {
		return nil, fmt.Errorf("analytics: set query_only: %w", err)
	}
	db, err := handleOf(sc)
	if err != nil {
		return nil, err
	}
	g.db = db
	g.budget = (*C.struct_analytics_budget)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_analytics_budget{}))))
	g.handle = cgo.NewHandle(g)
	if C.analytics_install(db, C.uintptr_t(g.handle), g.budget) != 0 {
		g.release()
		return nil, fmt.Errorf("analytics: install the guard: %s", C.GoString(C.analytics_errmsg(db)))
	}

	// Compile each view with the guard recording what the secret views
	// read: a read anywhere else is a view the guard cannot vouch for.
	g.reads = make([]map[[2]string]bool, len(t.model.Views))
	for i := range g.reads {
		g.reads[i] = map[[2]string]bool{}
	}
	if err := t.openChecker(g); err != nil {
		g.release()
		return nil, err
	}

	g.recording = true
	defer func() { g.recording = false }()
	for _, mv := range t.model.Views {
		for _, q := range []string{"SELECT * FROM temp.%q", "SELECT count(*) FROM temp.%q"} {
			g.begin(Access{all: true}, 1)
			st, _, _, err := g.compile(fmt.Sprintf(q, mv.Name))
			g.end()
			if st != nil {
				C.analytics_finalize(st)
			}
			if err != nil {
				if g.denied != "" {
					return nil, fmt.Errorf("analytics: view %q must read the host's tables directly, not through a common table expression, a view of the database or a subquery without columns", mv.Name)
				}
				return nil, fmt.Errorf("analytics: view %q does not compile: %w", mv.Name, err)
			}
		}
	}
	return g, nil
}

// checker is an in-memory database that holds, in its temp schema, an
// empty table named and shaped as each of the model's views, and nothing
// else: the database as the model describes it. Each query is compiled
// there before the tool's connection compiles it, to see whether it
// writes or reads the database by itself (see analytics_opens_database),
// so that what the model is told of a refused query depends on the model
// alone, never on what the tool's database holds beside it: no error
// tells a table outside the model from a missing one.
type checker struct {
	sem  chan struct{} // held while a query compiles on db
	db   *C.sqlite3
	stop *C.int // set when the query being compiled is interrupted: analytics_checker_open
}

// openChecker builds the tool's checker, once; g is a guard of the tool's
// database, on which it reads the views' columns.
func (t *SQLTool) openChecker(g *guard) error {
	t.checkMu.Lock()
	defer t.checkMu.Unlock()
	if t.checker != nil {
		return nil
	}
	var db *C.sqlite3
	stop := (*C.int)(C.calloc(1, C.size_t(unsafe.Sizeof(C.int(0)))))
	if rc := C.analytics_checker_open(&db, stop); rc != 0 {
		C.free(unsafe.Pointer(stop))
		if db != nil {
			C.analytics_close(db)
		}
		return errors.New("analytics: open an in-memory SQLite database")
	}
	exec := func(q string) error {
		cs := C.CString(q)
		defer C.free(unsafe.Pointer(cs))
		if C.analytics_exec(db, cs) != 0 {
			return errors.New(C.GoString(C.analytics_errmsg(db)))
		}
		return nil
	}
	for _, mv := range t.model.Views {
		st, _, _, err := g.compile(fmt.Sprintf("SELECT * FROM temp.%q", mv.Name))
		if err != nil {
			C.analytics_close(db)
			return fmt.Errorf("analytics: view %q does not compile: %w", mv.Name, err)
		}
		var cols []string
		for i := range int(C.analytics_column_count(st)) {
			cols = append(cols, quoteIdent(C.GoString(C.analytics_column_name(st, C.int(i)))))
		}
		C.analytics_finalize(st)
		if err := exec(fmt.Sprintf("CREATE TEMP TABLE %s (%s)", quoteIdent(mv.Name), strings.Join(cols, ", "))); err != nil {
			C.analytics_close(db)
			return fmt.Errorf("analytics: set up the checker: %w", err)
		}
	}
	exec("PRAGMA query_only = 1")
	C.analytics_checker_limit(db) // after the stand-ins, which may be wider
	c := &checker{sem: make(chan struct{}, 1), db: db, stop: stop}
	t.checker = c
	runtime.AddCleanup(t, func(c *checker) {
		C.analytics_close(c.db)
		C.free(unsafe.Pointer(c.stop))
	}, c)
	return nil
}

// What the checker finds of a query (analytics_opens_database).
const (
	checkReads     = iota // it reads the views alone
	checkOpens            // it reads the database by itself (or ctx ended first)
	checkNotSelect        // it writes, or returns no columns
	checkExplain          // EXPLAIN
)

// check compiles q over the stand-ins of the views. It returns SQLite's
// message when q does not compile there (with checkOpens), and otherwise
// what q is.
func (c *checker) check(ctx context.Context, q string) (invalid string, found int) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return "", checkOpens
	}
	defer func() { <-c.sem }()
	cs := C.CString(q)
	defer C.free(unsafe.Pointer(cs))
	C.analytics_checker_stop(c.stop, 0)
	defer context.AfterFunc(ctx, func() { C.analytics_checker_stop(c.stop, 1) })()
	switch rc := C.analytics_opens_database(c.db, cs, C.int(len(q))); rc {
	case 0:
		return "", checkReads
	case 1:
		return "", checkOpens
	case 2:
		return "", checkNotSelect
	case 3:
		return "", checkExplain
	}
	return C.GoString(C.analytics_errmsg(c.db)), checkOpens
}

// compile prepares the first statement of sql. It returns the statement
// (nil when sql holds none), the text it was compiled from, and the
// analytics_prepare flags.
func (g *guard) compile(sql string) (*C.sqlite3_stmt, string, int, error) {
	cs := C.CString(sql)
	defer C.free(unsafe.Pointer(cs))
	var st *C.sqlite3_stmt
	var used, flags C.int
	if rc := C.analytics_prepare(g.db, cs, C.int(len(sql)), &st, &used, &flags); rc != 0 {
		return nil, "", 0, &sqliteError{code: int(rc), msg: C.GoString(C.analytics_errmsg(g.db))}
	}
	return st, sql[:int(used)], int(flags), nil
}

// sqliteError is an error of SQLite with its result code.
type sqliteError struct {
	code int
	msg  string
}

func (e *sqliteError) Error() string { return e.msg }

// databaseFault reports whether err is a fault of the database rather than
// of the query: it is locked or busy, cannot be read, or is damaged. The
// data query API answers it 503, not 400 with the database's text.
func databaseFault(err error) bool {
	e, ok := errors.AsType[*sqliteError](err)
	if !ok {
		return false
	}
	switch e.code & 0xff {
	case 5, 6, 10, 11, 14, 15, 26: // BUSY, LOCKED, IOERR, CORRUPT, CANTOPEN, PROTOCOL, NOTADB
		return true
	}
	return false
}

// openSQLite compiles q on a guarded connection and returns its cursor.
// ctx carries the statement timeout; cancel is called when the cursor
// closes.
func (t *SQLTool) openSQLite(ctx context.Context, cancel context.CancelFunc, timeout time.Duration, steps int64, q string, access Access) (cursor, error) {
	if ctes, views := compileCopies(q, t.sqlite.visible); ctes > maxCTECopies || views > maxViewCopies {
		return nil, toolErr("the query is too complex: it reads its common table expressions or the views too many times over; read each one fewer times")
	}
	conn, g, err := t.sqliteConn(ctx)
	if err != nil {
		return nil, t.ctxOr(ctx, err)
	}
	c := &sqliteCursor{t: t, conn: conn, g: g, ctx: ctx, cancel: cancel, timeout: timeout}
	g.begin(access, steps)
	// Cancellation and the timeout interrupt the statement at once, even
	// inside one instruction (guard.c's functions check for it) or while
	// it compiles (see guard.stopped).
	c.closing.stop = context.AfterFunc(ctx, c.interrupt)
	// First over the views alone (see checker): what the model is told of
	// a query that does not compile there, writes, or reads the database
	// by itself depends on the model alone, never on what the database
	// holds beside it.
	invalid, found := t.checker.check(ctx, q)
	refusal := func(msg string, args ...any) error {
		err := toolErr(msg, args...)
		if ctx.Err() != nil {
			err = t.failure(ctx, g, timeout, ctx.Err().Error())
		}
		c.close() // it cancels ctx
		return err
	}
	switch {
	case invalid != "" && !strings.HasPrefix(invalid, "no such table"):
		return nil, refusal("the query is not valid SQL: %s", invalid)
	case found == checkExplain:
		return nil, refusal("EXPLAIN is not allowed; send a single SELECT")
	case found == checkNotSelect:
		return nil, refusal("only a single read-only SELECT statement is allowed")
	case found == checkOpens:
		// A name outside the model, whether the database has it or not.
		return nil, refusal("the query may read only the views of the data model (%s)", t.sqlite.list)
	}
	st, first, flags, err := g.compile(q)
	c.st = st
	switch {
	case err != nil && g.stopped.Load():
		err = t.failure(ctx, g, timeout, err.Error())
	case err != nil && g.denied != "":
		err = toolErr("%s", g.denied)
	case err != nil && strings.HasPrefix(err.Error(), "cannot modify"):
		err = toolErr("only a single read-only SELECT statement is allowed")
	case err != nil && databaseFault(err):
		err = fmt.Errorf("analytics: SQLite: %w", err)
	case err != nil:
		err = toolErr("the query is not valid SQL: %s", err)
	case st == nil || strings.TrimSpace(first) == "":
		err = toolErr("sqlQuery holds no statement")
	case flags&C.ANALYTICS_MORE != 0:
		err = toolErr("sqlQuery holds more than one statement; send a single SELECT")
	case flags&C.ANALYTICS_EXPLAIN != 0:
		err = toolErr("EXPLAIN is not allowed; send a single SELECT")
	case flags&C.ANALYTICS_READONLY == 0 || C.analytics_column_count(st) == 0:
		err = toolErr("only a single read-only SELECT statement is allowed")
	case flags&C.ANALYTICS_PARAMS != 0:
		err = toolErr("the query has parameters; write the values into it")
	}
	if err != nil {
		c.close()
		return nil, err
	}
	n := int(C.analytics_column_count(st))
	c.cols, c.decl = make([]string, n), make([]string, n)
	for i := range c.cols {
		c.cols[i] = C.GoString(C.analytics_column_name(st, C.int(i)))
		if d := C.analytics_column_decltype(st, C.int(i)); d != nil { // nil for an expression
			c.decl[i] = declaredType(C.GoString(d))
		}
	}
	c.vals = make([]any, n)
	if n > 0 {
		c.cells = (*C.struct_analytics_cell)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.struct_analytics_cell{}))))
	}
	return c, nil
}

// sqliteCursor is a running query on a guarded SQLite connection.
type sqliteCursor struct {
	t       *SQLTool
	conn    *sql.Conn
	g       *guard
	st      *C.sqlite3_stmt
	cells   *C.struct_analytics_cell
	cols    []string
	decl    []string // the types the columns' definitions declare ("" for none)
	vals    []any
	ctx     context.Context
	cancel  context.CancelFunc
	timeout time.Duration
	closing closeGuard
	err     error
	bytes   int64 // an estimate of the current row's size
}

func (c *sqliteCursor) columns() []string  { return c.cols }
func (c *sqliteCursor) types() []string    { return nil }
func (c *sqliteCursor) declared() []string { return c.decl }
func (c *sqliteCursor) values() []any      { return c.vals }
func (c *sqliteCursor) failure() error     { return c.err }

// next steps to the next row. With read, the row's values are copied into
// values, unless the row is larger than limit bytes (then next fails with
// errTooLarge, and nothing is copied).
func (c *sqliteCursor) next(read bool, limit int64) bool {
	if c.err != nil || c.closing.closed {
		return false
	}
	ncol := C.int(0)
	if read {
		ncol = C.int(len(c.cols))
	}
	var bytes C.longlong
	rc := C.analytics_step(c.st, ncol, c.cells, &bytes)
	switch rc {
	case sqliteRow:
	case sqliteDone:
		return false
	default:
		e := &sqliteError{code: int(rc), msg: C.GoString(C.analytics_errmsg(c.g.db))}
		if c.ctx.Err() == nil && databaseFault(e) {
			c.err = fmt.Errorf("analytics: SQLite: %w", e)
		} else {
			c.err = c.t.failure(c.ctx, c.g, c.timeout, e.msg)
		}
		return false
	}
	c.bytes = int64(bytes)
	if !read {
		return true
	}
	if c.bytes > limit {
		c.err = errTooLarge
		return false
	}
	cells := unsafe.Slice(c.cells, len(c.cols))
	for i := range cells {
		cell := &cells[i]
		switch cell._type {
		case 1:
			c.vals[i] = int64(cell.i)
		case 2:
			c.vals[i] = float64(cell.f)
		case 3:
			c.vals[i] = C.GoStringN((*C.char)(cell.p), cell.n)
		case 4:
			// A blob is text in JSON and CSV: its bytes in hex after \x,
			// as PostgreSQL writes a bytea, so that nothing is lost and
			// both databases give the same text.
			c.vals[i] = `\x` + hex.EncodeToString(unsafe.Slice((*byte)(cell.p), int(cell.n)))
		default:
			c.vals[i] = nil
		}
	}
	return true
}

func (c *sqliteCursor) interrupt() {
	c.closing.ifOpen(func() {
		c.g.stopped.Store(true)
		C.analytics_interrupt(c.g.db)
	})
}

// close finalizes the statement and gives the connection back. It is
// safe to call more than once.
func (c *sqliteCursor) close() {
	if !c.closing.markClosed() {
		return
	}
	if c.st != nil {
		C.analytics_finalize(c.st)
	}
	if c.cells != nil {
		C.free(unsafe.Pointer(c.cells))
	}
	c.g.end()
	c.conn.Close()
	c.cancel()
}
