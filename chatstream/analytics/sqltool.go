package analytics

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
	"weak"

	"github.com/mattn/go-sqlite3"

	"github.com/embedkit/embedkit/chatstream"
)

// Tool names, as they appear in toolCall.name.
const (
	MetaToolName = "svcMeta"
	SQLToolName  = "svcSqlApi"
)

// rlsPrefix starts the names of the SQL functions through which the
// filtered views read the user's row access. Only the views may call them.
const rlsPrefix = "embedkit_rls_"

// Defaults of the [SQLTool] options.
const (
	DefaultRowLimit = 100
	DefaultTimeout  = 5 * time.Second
	// DefaultMaxSteps is the work budget of one query in thousands of
	// SQLite virtual machine instructions (about a second of CPU).
	DefaultMaxSteps = 200_000
	// MaxSQLBytes bounds the length of sqlQuery.
	MaxSQLBytes = 16 << 10
)

// ToolError is a tool error result: the call failed for a reason that is
// safe to show to the user and to a language model. An agent reports it as
// the tool call's {"error": ...} result.
type ToolError struct{ Msg string }

func (e *ToolError) Error() string { return e.Msg }

func toolErr(format string, args ...any) error { return &ToolError{Msg: fmt.Sprintf(format, args...)} }

// SQLInput is the input of the svcSqlApi tool.
type SQLInput struct {
	SQLQuery    string `json:"sqlQuery"`
	QueryTitle  string `json:"queryTitle"`
	Description string `json:"description"`
	UserRequest string `json:"userRequest"`
	// MemoryID refers to an earlier result of the thread this query
	// follows up on ("" when there is none).
	MemoryID string `json:"memoryId"`
	// VegaSpec is a Vega-Lite v5 spec without data, encoded as JSON; empty
	// when no chart is wanted.
	VegaSpec string `json:"vegaSpec,omitempty"`
}

// SQLResult is the result of the svcSqlApi tool.
type SQLResult struct {
	SQLQuery    string   `json:"sqlQuery"`
	QueryTitle  string   `json:"queryTitle"`
	Description string   `json:"description"`
	UserRequest string   `json:"userRequest"`
	Schema      []Column `json:"schema"`
	// Data holds at most the row limit of rows, each a slice of values in
	// Schema order: string, int64, float64, json.Number (PostgreSQL's
	// numeric, exact), bool or nil; a number that is not finite is the
	// string "NaN", "Infinity" or "-Infinity". Treat it as read-only:
	// cached results share it.
	Data [][]any `json:"data"`
	// TotalRows is how many rows the query yields, before the row limit.
	TotalRows int `json:"totalRows"`
	// UUID identifies this result. It is derived from the query and the
	// user's row access with a secret of the tool (random, per process), so
	// the same query by the same user gets the same id from the same tool,
	// and the id tells nothing of the access.
	UUID     string `json:"uuid"`
	VegaSpec string `json:"vegaSpec,omitempty"`
}

// Column describes one column of [SQLResult.Data].
type Column struct {
	Name string `json:"name"`
	// ColumnType is string, number, time or boolean.
	ColumnType string `json:"column_type"`
}

// SQLOption configures an [SQLTool] at [NewSQLTool]. An invalid value
// (see each option) panics when its With function is called, so a
// misconfigured tool fails at start-up with a message naming the option.
//
// How to add an option: write a With function that checks its argument
// first and panics with "analytics: WithX: <what is wrong>, got <value>"
// when it is invalid, then returns an SQLOption setting a field of
// SQLTool. Its doc comment states the default and the valid range; add a
// row to TestInvalidOptionsPanic.
type SQLOption func(*SQLTool)

// WithRowLimit sets how many rows a result holds at most in its data;
// totalRows still counts them all. Default: [DefaultRowLimit] (100). n
// must be positive; WithRowLimit panics otherwise.
func WithRowLimit(n int) SQLOption {
	if n < 1 {
		panic(fmt.Sprintf("analytics: WithRowLimit: count must be positive, got %d", n))
	}
	return func(t *SQLTool) { t.rowLimit = n }
}

// WithTimeout sets the statement timeout: a query still running after d is
// interrupted and the call fails. Default: [DefaultTimeout] (5s). d must
// be positive; WithTimeout panics otherwise.
func WithTimeout(d time.Duration) SQLOption {
	if d <= 0 {
		panic(fmt.Sprintf("analytics: WithTimeout: duration must be positive, got %v", d))
	}
	return func(t *SQLTool) { t.timeout = d }
}

// WithMaxSteps sets the work budget of one query in thousands of SQLite
// virtual machine instructions; a query that uses it up is interrupted
// and the call fails, whatever the clock says. Default:
// [DefaultMaxSteps] (200,000). n must be positive; WithMaxSteps panics
// otherwise.
func WithMaxSteps(n int64) SQLOption {
	if n < 1 {
		panic(fmt.Sprintf("analytics: WithMaxSteps: count must be positive, got %d", n))
	}
	return func(t *SQLTool) { t.maxSteps = n }
}

// WithResultCache keeps up to n results, by query text and row access, and
// answers a repeated query from them without running it. Use it only when
// the data does not change while the tool is in use (a fixed demo data
// set, a read-only snapshot). Default: no cache (leave the option out). n
// must be positive; WithResultCache panics otherwise.
func WithResultCache(n int) SQLOption {
	if n < 1 {
		panic(fmt.Sprintf("analytics: WithResultCache: count must be positive, got %d (leave the option out for no cache)", n))
	}
	return func(t *SQLTool) { t.cacheSize = n }
}

// SQLTool is the svcSqlApi executor: it runs one read-only SELECT of the
// caller's over the filtered views of a [Model], on a SQLite database
// ([NewSQLTool], described here) or a PostgreSQL one
// ([NewPostgresSQLTool]).
//
// Row-level security does not depend on the SQL being well-meant. Each
// connection the tool uses gets, once, temporary views per model view: one
// with the view's name (shadowing the table of the same name) over one
// that applies the row filters to the asking user's access, over one that
// holds the view's SQL; the last two have secret names, never shown. The
// connection is set to query_only. While a query runs, an authorizer
// allows only SELECT: a table is read only from inside a secret view, and
// only the tables that view read when the tool set it up, so no name a
// query gives a common table expression, alias or subquery widens what it
// reads; PRAGMA, ATTACH, writes, transactions, schema changes and
// functions outside a fixed list of SQLite's built-ins are denied. A
// progress handler counts the query's work and interrupts it past
// [WithMaxSteps]; the timeout and the caller's cancellation interrupt it at
// once. A query that reads no table, such as SELECT 1, runs as usual.
//
// Give the tool a *sql.DB of its own (for example a second handle opened
// read-only on the same file, mode=ro), not the pool the host writes
// through: its connections keep the temporary views, query_only and lower
// limits. A *gorm.DB's pool is reached with its DB method. Only SQLite
// through github.com/mattn/go-sqlite3 is supported; [NewSQLTool] refuses
// any other driver.
//
// SQLTool is safe for concurrent use.
type SQLTool struct {
	db    *sql.DB
	model *Model

	rowLimit  int
	timeout   time.Duration
	maxSteps  int64
	cacheSize int

	pg      *postgres // set on PostgreSQL
	sqlite  *sqliteViews
	checkMu sync.Mutex
	checker *checker
	guardMu sync.Mutex
	guards  map[weak.Pointer[sqlite3.SQLiteConn]]*guard

	cacheMu sync.Mutex
	cache   map[string]*SQLResult

	idKey [32]byte // keys the results' ids (SQLResult.UUID)
}

// NewSQLTool returns the svcSqlApi executor over db and the views of m.
//
// db and m are configuration: a nil db or an invalid model (see
// [Model.Validate]; a host that loads its model from a file checks it
// with Validate first) panics, as http.ServeMux.Handle does for a bad
// pattern. NewSQLTool then opens a connection of db to check that it is a
// SQLite database of github.com/mattn/go-sqlite3 and that the views
// compile against it; it returns an error when the database fails these
// checks (another driver, a view over a missing table or column, a view
// that reads a table through a common table expression or a view of the
// database, a connection that fails), the one thing it cannot know before
// it opens a connection.
func NewSQLTool(db *sql.DB, m *Model, opts ...SQLOption) (*SQLTool, error) {
	if db == nil {
		panic("analytics: NewSQLTool: db must not be nil, got nil")
	}
	if msg := m.check(); msg != "" {
		panic("analytics: NewSQLTool: invalid model: " + msg)
	}
	t := newTool(db, m, opts)
	t.sqlite = newSQLiteViews(m)
	// Compile the views now, so that a broken model fails here.
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	conn, _, err := t.sqliteConn(ctx)
	if err != nil {
		return nil, err
	}
	conn.Close()
	return t, nil
}

func newTool(db *sql.DB, m *Model, opts []SQLOption) *SQLTool {
	t := &SQLTool{
		db: db, model: m,
		rowLimit: DefaultRowLimit, timeout: DefaultTimeout, maxSteps: DefaultMaxSteps,
		guards: map[weak.Pointer[sqlite3.SQLiteConn]]*guard{},
		cache:  map[string]*SQLResult{},
	}
	for _, o := range opts {
		o(t)
	}
	rand.Read(t.idKey[:]) // never fails (crypto/rand)
	return t
}

// modelViews lists the model's view names, for messages.
func (t *SQLTool) modelViews() string {
	names := make([]string, len(t.model.Views))
	for i, v := range t.model.Views {
		names[i] = v.Name
	}
	return strings.Join(names, ", ")
}

// Run runs in.SQLQuery for the user of turn tu and returns the result. A
// failure the caller may show (not a single read-only SELECT, denied by
// row security, a syntax error, over the timeout or the work budget, a
// result over 100 columns or 4 MiB, an unknown branch) is a *[ToolError];
// when ctx ends, Run returns ctx.Err().
func (t *SQLTool) Run(ctx context.Context, tu chatstream.Turn, in SQLInput) (*SQLResult, error) {
	q, err := checkQuery(tu, in.SQLQuery)
	if err != nil {
		return nil, err
	}
	if in.VegaSpec != "" {
		var spec map[string]any
		if err := json.Unmarshal([]byte(in.VegaSpec), &spec); err != nil {
			return nil, toolErr("vegaSpec is not a JSON object")
		}
	}
	access := AccessOf(t.model, tu.User)
	key := q + "\x00" + access.key()

	res := t.cached(key)
	if res == nil {
		if res, err = t.query(ctx, q, access); err != nil {
			return nil, err
		}
		t.store(key, res)
	}
	out := *res
	out.QueryTitle, out.Description, out.UserRequest, out.VegaSpec = in.QueryTitle, in.Description, in.UserRequest, in.VegaSpec
	return &out, nil
}

// checkQuery checks the branch of tu and the text of a query, and returns
// the text trimmed.
func checkQuery(tu chatstream.Turn, sqlQuery string) (string, error) {
	if b := tu.ActiveBranchName; b != "" && !slices.Contains(tu.Branches, b) {
		return "", toolErr("branch %q not found", b)
	}
	q := strings.TrimSpace(sqlQuery)
	switch {
	case q == "":
		return "", toolErr("sqlQuery is empty")
	case len(q) > MaxSQLBytes:
		return "", toolErr("sqlQuery is longer than %d bytes", MaxSQLBytes)
	case !utf8.ValidString(q) || strings.ContainsRune(q, 0):
		return "", toolErr("sqlQuery is not valid text")
	}
	return q, nil
}

func (t *SQLTool) cached(key string) *SQLResult {
	if t.cacheSize == 0 {
		return nil
	}
	t.cacheMu.Lock()
	defer t.cacheMu.Unlock()
	return t.cache[key]
}

func (t *SQLTool) store(key string, r *SQLResult) {
	if t.cacheSize == 0 {
		return
	}
	t.cacheMu.Lock()
	defer t.cacheMu.Unlock()
	if len(t.cache) >= t.cacheSize {
		for k := range t.cache { // evict one entry, any
			delete(t.cache, k)
			break
		}
	}
	t.cache[key] = r
}

// setupTimeout bounds the checks of the constructors (not a query).
const setupTimeout = 30 * time.Second

// The bounds of a tool result.
const (
	maxResultBytes   = 4 << 20
	maxResultColumns = 100
)

var errTooLarge = toolErr("result too large: a result holds at most %d columns and %d MiB of JSON; select fewer columns or aggregate more", maxResultColumns, maxResultBytes>>20)

// cursor is a query running on the tool's executor.
type cursor interface {
	columns() []string
	// types names the columns' types where the database knows them (nil
	// or "" where it does not).
	types() []string
	// declared names the types the columns' definitions declare where
	// the values may be of another (SQLite): they name a column that has
	// no value to go by (no rows, or null in every one). nil or "" where
	// there is none.
	declared() []string
	// next advances to the next row; with read it copies the row's values
	// (see values), unless the row is larger than limit bytes: then it
	// fails with errTooLarge before copying anything.
	next(read bool, limit int64) bool
	// values returns the current row, valid until the next call of next.
	values() []any
	// failure is the error that ended the rows: a *ToolError, the
	// caller's ctx.Err(), or another error.
	failure() error
	// interrupt stops the running query at once; it may be called from
	// any goroutine, and does nothing once the cursor is closed.
	interrupt()
	// close ends the query and releases its connection; it is safe to
	// call more than once.
	close()
}

// closeGuard is the closing state of a cursor. A cursor is read and closed
// by one goroutine, but interrupted from others (the caller's
// cancellation, Close of the data rows): the interruption must not reach a
// closed cursor's connection, which may already serve another query.
type closeGuard struct {
	mu     sync.Mutex
	closed bool
	stop   func() bool // stops the AfterFunc that interrupts on cancellation
}

// ifOpen runs f unless the cursor is closed.
func (g *closeGuard) ifOpen(f func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		f()
	}
}

// markClosed reports whether this call closed the cursor; from then on,
// ifOpen runs nothing.
func (g *closeGuard) markClosed() bool {
	g.mu.Lock()
	first := !g.closed
	g.closed = true
	g.mu.Unlock()
	if first && g.stop != nil {
		g.stop()
	}
	return first
}

// open runs q for a user with access a within timeout and, on SQLite,
// steps thousand instructions: every query, of the tool and of the data
// query API, goes through it.
func (t *SQLTool) open(ctx context.Context, q string, a Access, timeout time.Duration, steps int64) (cursor, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	open := t.openSQLite
	if t.pg != nil {
		open = t.openPostgres
	}
	c, err := open(ctx, cancel, timeout, steps, q, a)
	if err != nil {
		cancel()
		return nil, err
	}
	return c, nil
}

// query runs q and collects the tool's result: the first rowLimit rows,
// and the count of all of them.
func (t *SQLTool) query(ctx context.Context, q string, access Access) (*SQLResult, error) {
	c, err := t.open(ctx, q, access, t.timeout, t.maxSteps)
	if err != nil {
		return nil, err
	}
	defer c.close()
	cols := c.columns()
	if len(cols) > maxResultColumns {
		return nil, errTooLarge
	}
	res := &SQLResult{SQLQuery: q, Data: [][]any{}}
	size := int64(len(cols)) * 64 // names and schema
	for c.next(len(res.Data) < t.rowLimit, maxResultBytes-size) {
		res.TotalRows++
		if len(res.Data) >= t.rowLimit {
			continue
		}
		row := slices.Clone(c.values())
		size += jsonSize(row)
		if size > maxResultBytes {
			return nil, errTooLarge
		}
		res.Data = append(res.Data, row)
	}
	if err := c.failure(); err != nil {
		return nil, err
	}
	res.Schema = t.schema(cols, c.types(), c.declared(), res.Data)
	// JSON has no numbers that are not finite: the model and the chat read
	// them as PostgreSQL's to_json writes them (after the schema, which
	// on SQLite is read off the values: the column stays a number).
	for _, row := range res.Data {
		for i, v := range row {
			if f, ok := v.(float64); ok && (math.IsInf(f, 0) || math.IsNaN(f)) {
				row[i] = nonFiniteName(f)
			}
		}
	}

	// Keyed with the tool's secret: an id of the query and the access
	// alone would let whoever reads it (the model) try the values a user
	// may have until one matches.
	h := hmac.New(sha256.New, t.idKey[:])
	h.Write([]byte(q))
	h.Write([]byte{0})
	h.Write([]byte(access.key()))
	fmt.Fprintf(h, "\x00%d", t.rowLimit)
	res.UUID = uuidFrom(h.Sum(nil))
	return res, nil
}

// jsonStringSize is the size of s's characters in a JSON string, at most.
func jsonStringSize(s string) int64 {
	var n int64
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			n++
			if c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				n += 5
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029':
			n += 6
		default:
			n += int64(size)
		}
		i += size
	}
	return n
}

// jsonSize is the size of row encoded as a JSON array, at most: a string
// counts six bytes for each character that encoding/json may escape
// (\u2028, \u2029, \u003c) and for each byte that is not UTF-8 (\ufffd).
func jsonSize(row []any) int64 {
	n := int64(2 + len(row))
	for _, v := range row {
		switch v := v.(type) {
		case string:
			n += 2 + jsonStringSize(v)
		case json.Number: // PostgreSQL's numeric: as many digits as it has
			n += int64(len(v))
		case nil:
			n += 4
		default:
			n += 24
		}
	}
	return n
}

// failure turns the error message of a failed query into what the caller
// sees.
func (t *SQLTool) failure(ctx context.Context, g *guard, timeout time.Duration, msg string) error {
	switch {
	case g.denied != "":
		return toolErr("%s", g.denied)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return toolErr("the query ran longer than %s and was stopped", timeout)
	case ctx.Err() != nil:
		return ctx.Err()
	case g.exhausted():
		return toolErr("the query did too much work and was stopped; aggregate more or filter more")
	case g.overMemory():
		return toolErr("the query used too much memory and was stopped; aggregate more or filter more")
	}
	return toolErr("the query failed: %s", msg)
}

// ctxOr returns ctx's error when ctx ended, else err.
func (t *SQLTool) ctxOr(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ctx.Err()
	}
	return err
}

// schema names the columns and their types: time for a member of type time
// of the model with that name, else the database's type (types), else
// from the first non-null value, else the declared type, else string.
func (t *SQLTool) schema(cols, types, declared []string, data [][]any) []Column {
	out := make([]Column, len(cols))
	for i, c := range cols {
		typ := ""
		if i < len(types) {
			typ = types[i]
		}
		for _, v := range t.model.Views {
			for _, m := range v.Members {
				if m.Type == "time" && strings.EqualFold(m.Name[strings.IndexByte(m.Name, '.')+1:], c) {
					typ = "time"
				}
			}
		}
		for _, row := range data {
			if typ != "" {
				break
			}
			switch row[i].(type) {
			case int64, float64, json.Number:
				typ = "number"
			case string:
				typ = "string"
			case bool:
				typ = "boolean"
			}
		}
		if typ == "" && i < len(declared) {
			typ = declared[i]
		}
		if typ == "" {
			typ = "string"
		}
		out[i] = Column{Name: c, ColumnType: typ}
	}
	return out
}

// uuidFrom formats the first 16 bytes of sum as a version 8 UUID.
func uuidFrom(sum []byte) string {
	var u [16]byte
	copy(u[:], sum)
	u[6] = u[6]&0x0f | 0x80
	u[8] = u[8]&0x3f | 0x80
	s := hex.EncodeToString(u[:])
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}

// dialect names the database's SQL dialect.
func (t *SQLTool) dialect() string {
	if t.pg != nil {
		return "PostgreSQL"
	}
	return "SQLite"
}

// Name returns "svcSqlApi".
func (t *SQLTool) Name() string { return SQLToolName }

// Description tells a language model what the tool does.
func (t *SQLTool) Description() string {
	return "Runs one read-only SQL SELECT (" + t.dialect() + " dialect) over the views of the data model and returns at most " +
		fmt.Sprint(t.rowLimit) + " rows with totalRows counting all of them. Only the model's views can be read; " +
		"the user's row-level security is applied by the database whatever the query says. " +
		"Aggregate in SQL rather than fetching raw rows. Give a short queryTitle, a one-sentence description, " +
		"the user's request, and optionally a Vega-Lite v5 spec without data as vegaSpec."
}

// Parameters returns the JSON Schema of the tool's input.
func (t *SQLTool) Parameters() map[string]any {
	str := func(d string) map[string]any { return map[string]any{"type": "string", "description": d} }
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"sqlQuery":    str("One " + t.dialect() + " SELECT statement over the data model's views."),
			"queryTitle":  str("A short title of the result."),
			"description": str("One sentence saying what the query computes."),
			"userRequest": str("The user's original request."),
			"memoryId":    str("The uuid of an earlier result this query follows up on, or empty."),
			"vegaSpec":    str("Optional Vega-Lite v5 spec as a JSON string, without data; fields name result columns."),
		},
		"required":             []string{"sqlQuery", "queryTitle", "description", "userRequest"},
		"additionalProperties": false,
	}
}

// Call decodes args as [SQLInput] and runs it (see [SQLTool.Run]). A
// query text under "query" is accepted when sqlQuery is empty. Its error
// goes to the model and the user: a failure of the database that is not a
// [*ToolError] (its message may name a host, a role, a database) reads
// "the query could not be run", with the cause for [errors.Unwrap].
func (t *SQLTool) Call(ctx context.Context, tu chatstream.Turn, args json.RawMessage) (any, error) {
	var in struct {
		SQLInput
		Query string `json:"query"`
	}
	if err := json.Unmarshal(args, &in); err != nil {
		return nil, toolErr("the arguments are not a valid JSON object for svcSqlApi")
	}
	if in.SQLQuery == "" {
		in.SQLQuery = in.Query
	}
	res, err := t.Run(ctx, tu, in.SQLInput)
	if _, ok := errors.AsType[*ToolError](err); err != nil && !ok && ctx.Err() == nil {
		return nil, sourceError{err}
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// sourceError is a failure of the data source, told to the model and the
// user without its details.
type sourceError struct{ cause error }

func (e sourceError) Error() string { return "the query could not be run" }
func (e sourceError) Unwrap() error { return e.cause }

// MetaTool is the svcMeta executor: it searches a [Model].
type MetaTool struct{ model *Model }

// MetaInput is the input of the svcMeta tool.
type MetaInput struct {
	SearchQuery string `json:"searchQuery"`
}

// NewMetaTool returns the svcMeta executor over m. An invalid model (see
// [Model.Validate]) panics, as http.ServeMux.Handle does for a bad
// pattern: a host that loads its model from a file checks it with
// Validate first.
func NewMetaTool(m *Model) *MetaTool {
	if msg := m.check(); msg != "" {
		panic("analytics: NewMetaTool: invalid model: " + msg)
	}
	return &MetaTool{model: m}
}

// Name returns "svcMeta".
func (t *MetaTool) Name() string { return MetaToolName }

// Description tells a language model what the tool does.
func (t *MetaTool) Description() string {
	return "Searches the data model: returns the views (cubes) and members (measures and dimensions) whose names, " +
		"titles or descriptions match the search words, or every view when nothing matches."
}

// Parameters returns the JSON Schema of the tool's input.
func (t *MetaTool) Parameters() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"searchQuery": map[string]any{"type": "string", "description": "Search words, such as \"revenue country\"."},
		},
		"required":             []string{"searchQuery"},
		"additionalProperties": false,
	}
}

// Call decodes args as [MetaInput] and searches the model. It returns a
// [MetaResult].
func (t *MetaTool) Call(ctx context.Context, _ chatstream.Turn, args json.RawMessage) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var in MetaInput
	if err := json.Unmarshal(args, &in); err != nil {
		return nil, toolErr("the arguments are not a valid JSON object for svcMeta")
	}
	return t.model.Search(in.SearchQuery), nil
}

// nonFiniteName names a NaN or an infinity.
func nonFiniteName(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case f > 0:
		return "Infinity"
	}
	return "-Infinity"
}

// declaredType names the column type that the values of a column SQLite
// declares as decl would give, where its rules of type affinity
// (https://sqlite.org/datatype3.html, 3.1) tell: number for INTEGER and
// REAL affinity, and for NUMERIC, DECIMAL and BOOLEAN, which SQLite stores
// as numbers; string for TEXT affinity. Other declarations of NUMERIC
// affinity (DATE, DATETIME, JSON, UUID) usually hold text that SQLite
// leaves text, and BLOB says nothing of the values: "".
func declaredType(decl string) string {
	d := strings.ToUpper(decl)
	has := func(s ...string) bool {
		return slices.ContainsFunc(s, func(s string) bool { return strings.Contains(d, s) })
	}
	switch {
	case has("INT"):
		return "number"
	case has("CHAR", "CLOB", "TEXT"):
		return "string"
	case d == "" || has("BLOB"):
		return ""
	case has("REAL", "FLOA", "DOUB", "NUM", "DEC", "BOOL"):
		return "number"
	}
	return ""
}
