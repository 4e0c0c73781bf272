package analytics

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
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
	// Schema order: string, int64, float64 or nil. Treat it as read-only:
	// cached results share it.
	Data [][]any `json:"data"`
	// TotalRows is how many rows the query yields, before the row limit.
	TotalRows int `json:"totalRows"`
	// UUID identifies this result. It is derived from the query and the
	// user's row access, so the same query by the same user gets the same
	// id.
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
// caller's over the filtered views of a [Model], on a SQLite database.
//
// Row-level security does not depend on the SQL being well-meant. Each
// connection the tool uses gets, once, a temporary view per model view
// (shadowing the table of the same name) that applies the view's row
// filters to the asking user's access, and is set to query_only. While a
// query runs, an authorizer allows only SELECT: reading a table is allowed
// only from inside one of those views, and PRAGMA, ATTACH, writes,
// transactions and schema changes are denied. A progress handler counts
// the query's work and interrupts it past [WithMaxSteps]; the timeout
// interrupts it past [WithTimeout]. A query that reads no table, such as
// SELECT 1, runs as usual.
//
// Give the tool a *sql.DB of its own (for example a second handle opened
// read-only on the same file, mode=ro), not the pool the host writes
// through: its connections keep the temporary views and query_only. A
// *gorm.DB's pool is reached with its DB method. Only SQLite through
// github.com/mattn/go-sqlite3 is supported; [NewSQLTool] refuses any other
// driver.
//
// SQLTool is safe for concurrent use.
type SQLTool struct {
	db    *sql.DB
	model *Model

	rowLimit  int
	timeout   time.Duration
	maxSteps  int64
	cacheSize int

	views   []string // names of the views
	setup   []string // statements creating the temporary views
	guardMu sync.Mutex
	guards  map[weak.Pointer[sqlite3.SQLiteConn]]*guard

	cacheMu sync.Mutex
	cache   map[string]*SQLResult
}

// NewSQLTool returns the svcSqlApi executor over db and the views of m.
//
// db and m are configuration: a nil db or an invalid model (see
// [Model.Validate]; a host that loads its model from a file checks it
// with Validate first) panics, as http.ServeMux.Handle does for a bad
// pattern. NewSQLTool then opens a connection of db to check that it is a
// SQLite database of github.com/mattn/go-sqlite3 and that the views
// compile against it; it returns an error when the database fails these
// checks (another driver, a view over a missing table or column, a
// connection that fails), the one thing it cannot know before it opens a
// connection.
func NewSQLTool(db *sql.DB, m *Model, opts ...SQLOption) (*SQLTool, error) {
	if db == nil {
		panic("analytics: NewSQLTool: db must not be nil, got nil")
	}
	if msg := m.check(); msg != "" {
		panic("analytics: NewSQLTool: invalid model: " + msg)
	}
	t := &SQLTool{
		db: db, model: m,
		rowLimit: DefaultRowLimit, timeout: DefaultTimeout, maxSteps: DefaultMaxSteps,
		guards: map[weak.Pointer[sqlite3.SQLiteConn]]*guard{},
		cache:  map[string]*SQLResult{},
	}
	for _, o := range opts {
		o(t)
	}
	for _, v := range m.Views {
		t.views = append(t.views, v.Name)
		t.setup = append(t.setup, viewSQL(v))
	}
	// Compile the views now, so that a broken model fails here.
	ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
	defer cancel()
	conn, _, err := t.conn(ctx)
	if err != nil {
		return nil, err
	}
	conn.Close()
	return t, nil
}

// viewSQL creates the temporary view of v with its row filters.
func viewSQL(v View) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TEMP VIEW %q AS SELECT * FROM (\n%s\n)", v.Name, v.SQL)
	for i, f := range v.Filters {
		if i == 0 {
			b.WriteString("\nWHERE ")
		} else {
			b.WriteString("\n  AND ")
		}
		fmt.Fprintf(&b, "((SELECT %sall()) OR (%s) IN (SELECT value FROM json_each(%svalues('%s'))))",
			rlsPrefix, f.Column, rlsPrefix, strings.ReplaceAll(f.Attribute, "'", "''"))
	}
	// OFFSET keeps SQLite from flattening the view into the query that
	// reads it, so every table the view reads is checked in the view's
	// context, even one the query extracts no column from.
	b.WriteString("\nLIMIT -1 OFFSET 0")
	return b.String()
}

// conn takes a connection of the pool for one query, preparing it on first
// use: the temporary views, query_only and the guard's hooks.
func (t *SQLTool) conn(ctx context.Context) (*sql.Conn, *guard, error) {
	conn, err := t.db.Conn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("analytics: connect: %w", err)
	}
	var g *guard
	err = conn.Raw(func(dc any) error {
		sc, ok := dc.(*sqlite3.SQLiteConn)
		if !ok {
			return fmt.Errorf("analytics: svcSqlApi supports SQLite through github.com/mattn/go-sqlite3 only, not %T", dc)
		}
		key := weak.Make(sc)
		t.guardMu.Lock()
		g = t.guards[key]
		t.guardMu.Unlock()
		if g != nil {
			return nil
		}
		ng, err := t.prepare(sc)
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

// Run runs in.SQLQuery for the user of turn tu and returns the result. A
// failure the caller may show (not a single read-only SELECT, denied by
// row security, a syntax error, over the timeout or the work budget, an
// unknown branch) is a *[ToolError]; when ctx ends, Run returns ctx.Err().
func (t *SQLTool) Run(ctx context.Context, tu chatstream.Turn, in SQLInput) (*SQLResult, error) {
	if b := tu.ActiveBranchName; b != "" && !slices.Contains(tu.Branches, b) {
		return nil, toolErr("branch %q not found", b)
	}
	q := strings.TrimSpace(in.SQLQuery)
	switch {
	case q == "":
		return nil, toolErr("sqlQuery is empty")
	case len(q) > MaxSQLBytes:
		return nil, toolErr("sqlQuery is longer than %d bytes", MaxSQLBytes)
	case !utf8.ValidString(q) || strings.ContainsRune(q, 0):
		return nil, toolErr("sqlQuery is not valid text")
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
		var err error
		if res, err = t.query(ctx, q, access); err != nil {
			return nil, err
		}
		t.store(key, res)
	}
	out := *res
	out.QueryTitle, out.Description, out.UserRequest, out.VegaSpec = in.QueryTitle, in.Description, in.UserRequest, in.VegaSpec
	return &out, nil
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

// query runs q on a guarded connection.
func (t *SQLTool) query(ctx context.Context, q string, access Access) (*SQLResult, error) {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	conn, g, err := t.conn(ctx)
	if err != nil {
		return nil, t.ctxOr(ctx, err)
	}
	defer conn.Close()
	g.begin(access, t.maxSteps)
	defer g.end()

	if name := cteNamedLike(q, g.views); name != "" {
		return nil, toolErr("a common table expression may not be named like the view %q of the data model", name)
	}
	first, readonly, explain, more, params, err := g.check(q)
	switch {
	case err != nil && g.denied != "":
		return nil, toolErr("%s", g.denied)
	case err != nil && strings.HasPrefix(err.Error(), "cannot modify"):
		return nil, toolErr("only a single read-only SELECT statement is allowed")
	case err != nil:
		return nil, toolErr("the query is not valid SQL: %s", err)
	case strings.TrimSpace(first) == "":
		return nil, toolErr("sqlQuery holds no statement")
	case more:
		return nil, toolErr("sqlQuery holds more than one statement; send a single SELECT")
	case explain:
		return nil, toolErr("EXPLAIN is not allowed; send a single SELECT")
	case !readonly:
		return nil, toolErr("only a single read-only SELECT statement is allowed")
	case params:
		return nil, toolErr("the query has parameters; write the values into it")
	}

	rows, err := conn.QueryContext(ctx, first)
	if err != nil {
		return nil, t.failure(ctx, g, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, t.failure(ctx, g, err)
	}
	res := &SQLResult{SQLQuery: q, Data: [][]any{}}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		res.TotalRows++
		if len(res.Data) >= t.rowLimit {
			continue
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, t.failure(ctx, g, err)
		}
		row := make([]any, len(cols))
		for i, v := range vals {
			switch v := v.(type) {
			case []byte:
				row[i] = string(v)
			case time.Time:
				row[i] = v.UTC().Format(time.RFC3339)
			case bool:
				row[i] = v
			default:
				row[i] = v
			}
		}
		res.Data = append(res.Data, row)
	}
	if err := rows.Err(); err != nil {
		return nil, t.failure(ctx, g, err)
	}
	res.Schema = t.schema(cols, res.Data)

	h := sha256.New()
	h.Write([]byte(q))
	h.Write([]byte{0})
	h.Write([]byte(access.key()))
	fmt.Fprintf(h, "\x00%d", t.rowLimit)
	res.UUID = uuidFrom(h.Sum(nil))
	return res, nil
}

// failure turns an error of a running query into what the caller sees.
func (t *SQLTool) failure(ctx context.Context, g *guard, err error) error {
	switch {
	case g.denied != "":
		return toolErr("%s", g.denied)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return toolErr("the query ran longer than %s and was stopped", t.timeout)
	case ctx.Err() != nil:
		return ctx.Err()
	case g.exhausted():
		return toolErr("the query did too much work and was stopped; aggregate more or filter more")
	}
	if msg, ok := sqliteMessage(err); ok {
		return toolErr("the query failed: %s", msg)
	}
	return toolErr("the query failed")
}

// ctxOr returns ctx's error when ctx ended, else err.
func (t *SQLTool) ctxOr(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ctx.Err()
	}
	return err
}

// schema names the columns and their types: time for a member of type time
// of the model with that name, else from the first non-null value.
func (t *SQLTool) schema(cols []string, data [][]any) []Column {
	out := make([]Column, len(cols))
	for i, c := range cols {
		typ := ""
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
			case int64, float64:
				typ = "number"
			case string:
				typ = "string"
			case bool:
				typ = "boolean"
			}
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

// Name returns "svcSqlApi".
func (t *SQLTool) Name() string { return SQLToolName }

// Description tells a language model what the tool does.
func (t *SQLTool) Description() string {
	return "Runs one read-only SQL SELECT (SQLite dialect) over the views of the data model and returns at most " +
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
			"sqlQuery":    str("One SQLite SELECT statement over the data model's views."),
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
// query text under "query" is accepted when sqlQuery is empty.
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
	if err != nil {
		return nil, err
	}
	return res, nil
}

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
