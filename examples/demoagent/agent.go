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
//
// A turn's goroutine waits in say, under Answer, for most of the turn, and
// the runtime shrinks a waiting goroutine's stack only to four times what
// its frames use: Answer streams the texts that the steps of a turn
// return, and the steps (reading the history, the tool calls) run in
// functions of their own that have returned by the time it waits. Nor does
// a waiting turn hold their state: each step reads what it needs again.
func (a *Agent) Answer(ctx context.Context, t chatstream.Turn, e chatstream.Emitter) error {
	if a.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for step := 0; ; step++ {
		text, done, err := a.step(ctx, &t, e, step)
		if err != nil {
			return err
		}
		if text != "" {
			if err := a.say(ctx, e, text); err != nil {
				return err
			}
		}
		if done {
			return nil
		}
	}
}

// turn is what a step of a turn knows.
type turn struct {
	a        *Agent
	t        *chatstream.Turn
	e        chatstream.Emitter
	history  []string // the user's earlier questions
	memoryID string   // the last result's memory id
	access   analytics.Access
	q        parsed
	ok       bool // q is understood
}

// step runs the turn's step (0, then 1 after the first text) and returns
// the text to stream after it; done is true when the answer is complete
// once it is streamed.
func (a *Agent) step(ctx context.Context, t *chatstream.Turn, e chatstream.Emitter, step int) (text string, done bool, err error) {
	tn := &turn{a: a, t: t, e: e}
	for _, m := range t.History {
		if m.Role == chatstream.RoleUser {
			tn.history = append(tn.history, m.Content)
		}
		if tc := m.ToolCall; tc != nil && tc.Name == ToolSQL && tc.Result != nil {
			var r struct {
				UUID string `json:"uuid"`
			}
			if json.Unmarshal([]byte(*tc.Result), &r) == nil && r.UUID != "" {
				tn.memoryID = r.UUID
			}
		}
	}
	tn.access = analytics.AccessOf(a.model, t.User)
	if looksLikeSQL(t.Input) {
		if step == 0 {
			return tn.sqlIntro()
		}
		return tn.runSQL(ctx)
	}
	tn.q, tn.ok = understand(t.Input, tn.history)
	if step == 0 {
		return tn.first()
	}
	return tn.lookup(ctx)
}

// first emits the thinking about the question; it returns the first text.
func (tn *turn) first() (string, bool, error) {
	e := tn.e
	if tn.q.cannot() {
		return tn.cannot()
	}
	if !tn.ok {
		if err := e.Thinking("The message names no metric or breakdown of the sample data that I know, so I will explain what I can answer."); err != nil {
			return "", false, err
		}
		return helpText(), true, nil
	}
	if err := e.Thinking(reasoning(tn.q, tn.access)); err != nil {
		return "", false, err
	}
	return "Let me look that up in the sample shop data.", false, nil
}

// lookup searches the data model, runs the question's SQL and returns the
// answer's text.
func (tn *turn) lookup(ctx context.Context) (string, bool, error) {
	a, t, e, q := tn.a, tn.t, tn.e, tn.q
	search := searchText(q.plan)
	meta, err := e.ToolCall(ToolMeta, analytics.MetaInput{SearchQuery: search})
	if err != nil {
		return "", false, err
	}
	if err := meta.Result(a.model.Search(search)); err != nil {
		return "", false, err
	}
	if err := ctx.Err(); err != nil {
		return "", false, err
	}

	in := analytics.SQLInput{
		SQLQuery:    q.sqlText(a.postgres),
		QueryTitle:  q.title(),
		Description: q.description(),
		UserRequest: t.Input,
		MemoryID:    tn.memoryID,
		VegaSpec:    q.vega(),
	}
	call, err := e.ToolCall(ToolSQL, in)
	if err != nil {
		return "", false, err
	}
	res, failed, err := a.run(ctx, *t, in, call)
	switch {
	case err != nil:
		return "", false, err
	case res == nil && strings.HasPrefix(failed, "branch "):
		return "\n\n" + unknownBranchText(t.ActiveBranchName, t.Branches), true, nil
	case res == nil:
		return "\n\nI could not run the query: " + failed + ".", true, nil
	}
	return "\n\n" + summary(q, res, tn.access), true, nil
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

// sqlIntro starts the answer to a message that is an SQL statement.
func (tn *turn) sqlIntro() (string, bool, error) {
	if err := tn.e.Thinking("The message is an SQL statement, not a question. I will pass it to the SQL tool unchanged: the tool runs only a single read-only SELECT over the data model's views, with the user's row access."); err != nil {
		return "", false, err
	}
	return "That looks like an SQL statement, so I passed it to the query tool as it is.", false, nil
}

// runSQL hands a message that is an SQL statement to svcSqlApi as it is,
// which runs it only if it is a single read-only SELECT over the data
// model, under the user's row access; it returns the answer's text.
func (tn *turn) runSQL(ctx context.Context) (string, bool, error) {
	t := tn.t
	in := analytics.SQLInput{
		SQLQuery: t.Input, QueryTitle: "Your SQL statement",
		Description: "The statement from the message, run as given.", UserRequest: t.Input,
	}
	call, err := tn.e.ToolCall(ToolSQL, in)
	if err != nil {
		return "", false, err
	}
	res, failed, err := tn.a.run(ctx, *t, in, call)
	if err != nil {
		return "", false, err
	}
	return "\n\n" + sqlAnswer(res, failed, tn.access), true, nil
}

// cannot answers a question whose measure or breakdown the data lacks: it
// searches the data model for it, finds nothing, and returns the text
// that says so.
func (tn *turn) cannot() (string, bool, error) {
	q, e := tn.q, tn.e
	words := append(slices.Clone(q.lacking), q.badStats...)
	if len(words) == 0 {
		words = []string{q.badGrain}
	}
	search := strings.Join(words, " ")
	if err := e.Thinking(fmt.Sprintf("The question asks for %s. I will search the data model for it before answering.", joinAnd(words))); err != nil {
		return "", false, err
	}
	meta, err := e.ToolCall(ToolMeta, analytics.MetaInput{SearchQuery: search})
	if err != nil {
		return "", false, err
	}
	found := tn.a.model.Search(search)
	if err := meta.Result(found); err != nil {
		return "", false, err
	}
	return cannotText(q), true, nil
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
	for i := 0; text != ""; i++ {
		var piece string
		piece, text = nextPiece(text)
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

// nextPiece splits text after its first run of spaces (a turn holds the
// text it streams, not a list of its pieces): concatenating the pieces
// gives text back.
func nextPiece(text string) (piece, rest string) {
	for i := 0; i < len(text); i++ {
		if text[i] == ' ' && (i+1 == len(text) || text[i+1] != ' ') {
			return text[:i+1], text[i+1:]
		}
	}
	return text, ""
}
