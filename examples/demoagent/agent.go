package demoagent

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/analytics"

	_ "github.com/mattn/go-sqlite3" // the "sqlite3" database/sql driver
)

// Defaults of the options.
const (
	DefaultDelay    = 15 * time.Millisecond
	DefaultRowLimit = 100
)

// ErrClosed is returned by [Agent.Answer] after [Agent.Close].
var ErrClosed = errors.New("demoagent: agent is closed")

// How to add an option to this package: write a With function that checks
// its argument first and panics with "demoagent: WithX: <what is wrong>, got
// <value>" when it is invalid (options are checked when the With function is
// called, never silently replaced by a default), then returns an Option: a
// func that sets a field of config. Its doc comment states the default and
// the valid range; add a row to TestInvalidOptionsPanic.

// Option configures an [Agent] at [New]. An invalid value panics when its
// With function is called (New's error reports failures to build the data
// set, never a bad option).
type Option func(*config)

type config struct {
	delay    time.Duration
	rowLimit int
	// pg, when set, is the reader of the data set in PostgreSQL.
	pg    *sql.DB
	pgCfg analytics.PostgresConfig
}

// WithDelay sets the pause between two streamed content pieces. Default
// [DefaultDelay] (15ms); zero streams without pausing. d must not be
// negative; WithDelay panics otherwise.
func WithDelay(d time.Duration) Option {
	if d < 0 {
		panic(fmt.Sprintf("demoagent: WithDelay: duration must not be negative, got %v", d))
	}
	return func(c *config) { c.delay = d }
}

// WithRowLimit sets how many rows a svcSqlApi result holds at most in its
// data; totalRows still counts them all. Default [DefaultRowLimit] (100).
// n must be positive; WithRowLimit panics otherwise.
func WithRowLimit(n int) Option {
	if n <= 0 {
		panic(fmt.Sprintf("demoagent: WithRowLimit: count must be positive, got %d", n))
	}
	return func(c *config) { c.rowLimit = n }
}

// WithPostgres makes the agent answer over the sample data set in
// PostgreSQL, which [SetupPostgres] loaded with the same cfg, instead of a
// private in-memory SQLite database: reader must log in as cfg's reader
// role (see [analytics.NewPostgresSQLTool]); the agent does not close it.
// The answers are the same as over SQLite. Default: SQLite (leave the
// option out). reader must not be nil; WithPostgres panics otherwise.
func WithPostgres(reader *sql.DB, cfg analytics.PostgresConfig) Option {
	if reader == nil {
		panic("demoagent: WithPostgres: reader must not be nil, got nil")
	}
	return func(c *config) { c.pg, c.pgCfg = reader, cfg }
}

// Agent is the demo analytics agent: a [chatstream.Agent] that answers
// questions about a generated sample shop (customers, products, orders)
// held in a private in-memory SQLite database, through the svcMeta and
// svcSqlApi executors of package analytics. It is safe for concurrent use;
// call [Agent.Close] to release the database.
type Agent struct {
	// On SQLite (nil on PostgreSQL):
	db  *sql.DB   // read-write: loads the data set
	ro  *sql.DB   // read-only: the tools' connections
	pin *sql.Conn // keeps the in-memory database alive until Close
	// postgres: the data set is in PostgreSQL, so the SQL is written
	// for it.
	postgres bool
	meta     *analytics.MetaTool
	sql      *analytics.SQLTool
	// model is the data model the tools expose.
	model *analytics.Model

	delay time.Duration
	size  DataSize

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ chatstream.DataAgent = (*Agent)(nil)

// resultCacheSize bounds the svcSqlApi results the agent keeps: its data
// never changes, so a repeated question by a user with the same row access
// is answered without running SQL again.
const resultCacheSize = 4096

// New generates the sample data set, loads it into a new in-memory
// database private to the returned Agent, and returns the Agent. The data
// set is the same on every call.
func New(opts ...Option) (*Agent, error) {
	cfg := config{delay: DefaultDelay, rowLimit: DefaultRowLimit}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.pg != nil {
		return newPostgres(cfg)
	}

	// The memdb VFS shares one in-memory database between the connections
	// of the pool (without the shared-cache mode); the random name keeps
	// every Agent's database apart.
	name := "file:/demoagent-" + rand.Text() + "?vfs=memdb"
	db, err := sql.Open("sqlite3", name)
	if err != nil {
		return nil, fmt.Errorf("demoagent: open database: %w", err)
	}
	db.SetMaxOpenConns(4)
	ctx := context.Background()
	pin, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("demoagent: open database: %w", err)
	}
	tables := generate()
	if err := load(ctx, pin, tables); err != nil {
		pin.Close()
		db.Close()
		return nil, err
	}
	ro, err := sql.Open("sqlite3", name+"&mode=ro")
	if err != nil {
		pin.Close()
		db.Close()
		return nil, fmt.Errorf("demoagent: open database: %w", err)
	}
	ro.SetMaxOpenConns(8)
	ro.SetMaxIdleConns(8)
	a := &Agent{
		db: db, ro: ro, pin: pin,
		model: Model(),
		delay: cfg.delay,
		size: DataSize{
			Customers:  len(tables[0].rows),
			Products:   len(tables[1].rows),
			Orders:     len(tables[2].rows),
			OrderLines: len(tables[3].rows),
		},
	}
	a.meta = analytics.NewMetaTool(a.model)
	if a.sql, err = analytics.NewSQLTool(ro, a.model, analytics.WithRowLimit(cfg.rowLimit), analytics.WithResultCache(resultCacheSize)); err != nil {
		a.Close()
		return nil, fmt.Errorf("demoagent: %w", err)
	}
	return a, nil
}

// newPostgres returns the agent over the data set in PostgreSQL.
func newPostgres(cfg config) (*Agent, error) {
	tables := generate()
	a := &Agent{
		postgres: true,
		model:    PostgresModel(),
		delay:    cfg.delay,
		size:     DataSize{Customers: len(tables[0].rows), Products: len(tables[1].rows), Orders: len(tables[2].rows), OrderLines: len(tables[3].rows)},
	}
	a.meta = analytics.NewMetaTool(a.model)
	var err error
	if a.sql, err = analytics.NewPostgresSQLTool(cfg.pg, a.model, cfg.pgCfg, analytics.WithRowLimit(cfg.rowLimit), analytics.WithResultCache(resultCacheSize)); err != nil {
		return nil, fmt.Errorf("demoagent: %w", err)
	}
	return a, nil
}

// Size reports how many rows each table of the sample data set holds.
func (a *Agent) Size() DataSize { return a.size }

// Tools returns the agent's svcMeta and svcSqlApi executors over the
// sample data set, for another agent (such as a language model's) to call.
// They stay usable until [Agent.Close].
func (a *Agent) Tools() (*analytics.MetaTool, *analytics.SQLTool) { return a.meta, a.sql }

// DataSource returns the agent's svcSqlApi executor, for the chat
// handler's data query API: it runs a result's sqlQuery with every row,
// under the same row access as the tool. The demo agent serves every
// account and agent of the handler, so accountName and agentID are not
// read. It implements [chatstream.DataAgent].
func (a *Agent) DataSource(accountName, agentID string) chatstream.DataSource { return a.sql }

// DataModel returns the data model the tools expose (see [Model]).
func (a *Agent) DataModel() *analytics.Model { return a.model }

// Close releases the database. Turns running meanwhile fail; later calls
// to Answer return [ErrClosed]. Close is idempotent.
func (a *Agent) Close() error {
	a.closeOnce.Do(func() {
		a.closed.Store(true)
		if a.db != nil { // SQLite: the agent's own database
			a.closeErr = errors.Join(a.ro.Close(), a.pin.Close(), a.db.Close())
		}
	})
	return a.closeErr
}

// Answer answers one turn; see the package documentation for the flow.
// It implements [chatstream.Agent].
func (a *Agent) Answer(ctx context.Context, t chatstream.Turn, e chatstream.Emitter) error {
	if a.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var history []string
	var memoryID string
	for _, m := range t.History {
		if m.Role == chatstream.RoleUser {
			history = append(history, m.Content)
		}
		if tc := m.ToolCall; tc != nil && tc.Name == ToolSQL && tc.Result != nil {
			var r struct {
				UUID string `json:"uuid"`
			}
			if json.Unmarshal([]byte(*tc.Result), &r) == nil && r.UUID != "" {
				memoryID = r.UUID
			}
		}
	}
	access := analytics.AccessOf(a.model, t.User)

	if looksLikeSQL(t.Input) {
		return a.runSQL(ctx, t, e, access)
	}
	q, ok := understand(t.Input, history)
	if q.cannot() {
		return a.cannot(ctx, t, e, q)
	}
	if !ok {
		if err := e.Thinking("The message names no metric or breakdown of the sample data that I know, so I will explain what I can answer."); err != nil {
			return err
		}
		return a.say(ctx, e, helpText())
	}

	if err := e.Thinking(reasoning(q, access)); err != nil {
		return err
	}
	if err := a.say(ctx, e, "Let me look that up in the sample shop data."); err != nil {
		return err
	}

	search := searchText(q.plan)
	meta, err := e.ToolCall(ToolMeta, analytics.MetaInput{SearchQuery: search})
	if err != nil {
		return err
	}
	if err := meta.Result(a.model.Search(search)); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	in := analytics.SQLInput{
		SQLQuery:    q.sqlText(a.postgres),
		QueryTitle:  q.title(),
		Description: q.description(),
		UserRequest: t.Input,
		MemoryID:    memoryID,
		VegaSpec:    q.vega(),
	}
	call, err := e.ToolCall(ToolSQL, in)
	if err != nil {
		return err
	}
	res, failed, err := a.run(ctx, t, in, call)
	switch {
	case err != nil:
		return err
	case res == nil && strings.HasPrefix(failed, "branch "):
		return a.say(ctx, e, "\n\n"+unknownBranchText(t.ActiveBranchName, t.Branches))
	case res == nil:
		return a.say(ctx, e, "\n\nI could not run the query: "+failed+".")
	}
	return a.say(ctx, e, "\n\n"+summary(q, res, access))
}

// run runs one svcSqlApi call and ends it. When the tool refuses the query
// it returns a nil result, no error, and the tool's message, which is also
// the call's error result.
func (a *Agent) run(ctx context.Context, t chatstream.Turn, in analytics.SQLInput, call chatstream.ToolCall) (*analytics.SQLResult, string, error) {
	res, err := a.sql.Run(ctx, t, in)
	if err == nil {
		return res, "", call.Result(res)
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return nil, "", ctxErr
	}
	var te *analytics.ToolError
	if errors.As(err, &te) {
		return nil, te.Msg, call.Fail(te.Msg)
	}
	if a.closed.Load() {
		err = ErrClosed
	}
	if ferr := call.Fail("the query could not be run"); ferr != nil {
		return nil, "", errors.Join(err, ferr)
	}
	return nil, "", err
}

// runSQL answers a message that is an SQL statement: it hands the
// statement to svcSqlApi as it is, which runs it only if it is a single
// read-only SELECT over the data model, under the user's row access.
func (a *Agent) runSQL(ctx context.Context, t chatstream.Turn, e chatstream.Emitter, access analytics.Access) error {
	if err := e.Thinking("The message is an SQL statement, not a question. I will pass it to the SQL tool unchanged: the tool runs only a single read-only SELECT over the data model's views, with the user's row access."); err != nil {
		return err
	}
	if err := a.say(ctx, e, "That looks like an SQL statement, so I passed it to the query tool as it is."); err != nil {
		return err
	}
	in := analytics.SQLInput{
		SQLQuery: t.Input, QueryTitle: "Your SQL statement",
		Description: "The statement from the message, run as given.", UserRequest: t.Input,
	}
	call, err := e.ToolCall(ToolSQL, in)
	if err != nil {
		return err
	}
	res, failed, err := a.run(ctx, t, in, call)
	if err != nil {
		return err
	}
	return a.say(ctx, e, "\n\n"+sqlAnswer(res, failed, access))
}

// cannot answers a question whose measure or breakdown the data lacks: it
// searches the data model for it, finds nothing, and says so.
func (a *Agent) cannot(ctx context.Context, t chatstream.Turn, e chatstream.Emitter, q parsed) error {
	words := append(slices.Clone(q.lacking), q.badStats...)
	if len(words) == 0 {
		words = []string{q.badGrain}
	}
	search := strings.Join(words, " ")
	if err := e.Thinking(fmt.Sprintf("The question asks for %s. I will search the data model for it before answering.", joinAnd(words))); err != nil {
		return err
	}
	meta, err := e.ToolCall(ToolMeta, analytics.MetaInput{SearchQuery: search})
	if err != nil {
		return err
	}
	found := a.model.Search(search)
	if err := meta.Result(found); err != nil {
		return err
	}
	return a.say(ctx, e, cannotText(q))
}

// unknownBranchText explains a failed query on an unknown branch.
func unknownBranchText(b string, known []string) string {
	var s strings.Builder
	fmt.Fprintf(&s, "I could not run the query: the branch %q is unknown", b)
	if len(known) > 0 {
		q := make([]string, len(known))
		for i, k := range known {
			q[i] = fmt.Sprintf("%q", k)
		}
		fmt.Fprintf(&s, "; this account's branches are %s", joinAnd(q))
	}
	s.WriteString(". Choose one of them, or no branch to query the main branch.")
	return s.String()
}

// say streams text as content, a word at a time, pausing the configured
// delay between pieces. It returns ctx.Err() as soon as ctx is done.
func (a *Agent) say(ctx context.Context, e chatstream.Emitter, text string) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for i, piece := range pieces(text) {
		if i > 0 && a.delay > 0 {
			if timer == nil {
				timer = time.NewTimer(a.delay)
			} else {
				timer.Reset(a.delay)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-timer.C:
			}
		} else if err := ctx.Err(); err != nil {
			return err
		}
		if err := e.Content(piece); err != nil {
			return err
		}
	}
	return nil
}

// pieces splits text after each run of spaces, so that concatenating the
// pieces gives text back.
func pieces(text string) []string {
	var out []string
	start := 0
	for i := 0; i < len(text); i++ {
		if text[i] == ' ' && (i+1 == len(text) || text[i+1] != ' ') {
			out = append(out, text[start:i+1])
			start = i + 1
		}
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}
