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

// Agent is the demo analytics agent: a [chatstream.Agent] that answers
// questions about a generated sample shop (customers, products, orders)
// held in a private in-memory SQLite database. It is safe for concurrent
// use; call [Agent.Close] to release the database.
type Agent struct {
	db  *sql.DB
	pin *sql.Conn // keeps the in-memory database alive until Close

	delay    time.Duration
	rowLimit int
	size     DataSize

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ chatstream.Agent = (*Agent)(nil)

// New generates the sample data set, loads it into a new in-memory
// database private to the returned Agent, and returns the Agent. The data
// set is the same on every call.
func New(opts ...Option) (*Agent, error) {
	cfg := config{delay: DefaultDelay, rowLimit: DefaultRowLimit}
	for _, o := range opts {
		o(&cfg)
	}

	// The memdb VFS shares one in-memory database between the connections
	// of the pool (without the shared-cache mode); the random name keeps
	// every Agent's database apart.
	db, err := sql.Open("sqlite3", "file:/demoagent-"+rand.Text()+"?vfs=memdb")
	if err != nil {
		return nil, fmt.Errorf("demoagent: open database: %w", err)
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
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
	return &Agent{
		db:       db,
		pin:      pin,
		delay:    cfg.delay,
		rowLimit: cfg.rowLimit,
		size: DataSize{
			Customers:  len(tables[0].rows),
			Products:   len(tables[1].rows),
			Orders:     len(tables[2].rows),
			OrderLines: len(tables[3].rows),
		},
	}, nil
}

// Size reports how many rows each table of the sample data set holds.
func (a *Agent) Size() DataSize { return a.size }

// Close releases the database. Turns running meanwhile fail; later calls
// to Answer return [ErrClosed]. Close is idempotent.
func (a *Agent) Close() error {
	a.closeOnce.Do(func() {
		a.closed.Store(true)
		a.closeErr = errors.Join(a.pin.Close(), a.db.Close())
	})
	return a.closeErr
}

// Answer answers one turn; see the package documentation for the flow.
// It implements [chatstream.Agent].
func (a *Agent) Answer(ctx context.Context, t chatstream.Turn, e chatstream.Emitter) error {
	if a.closed.Load() {
		return ErrClosed
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

	p, ok := understand(t.Input, history)
	if !ok {
		if err := e.Thinking("The message names no metric or breakdown of the sample data that I know, so I will explain what I can answer."); err != nil {
			return err
		}
		return a.say(ctx, e, helpText())
	}

	f := userFilter(t.User.Attributes)
	if err := e.Thinking(reasoning(p, f)); err != nil {
		return err
	}
	if err := a.say(ctx, e, "Let me look that up in the sample shop data."); err != nil {
		return err
	}

	search := searchText(p)
	meta, err := e.ToolCall(ToolMeta, MetaInput{SearchQuery: search})
	if err != nil {
		return err
	}
	if err := meta.Result(searchModel(search)); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	query, err := e.ToolCall(ToolSQL, SQLInput{
		SQLQuery:    p.sqlText(),
		QueryTitle:  p.title(),
		Description: p.description(),
		UserRequest: t.Input,
		MemoryID:    memoryID,
		VegaSpec:    p.vega(),
	})
	if err != nil {
		return err
	}
	if b := t.ActiveBranchName; b != "" && !slices.Contains(t.Branches, b) {
		if err := query.Fail(fmt.Sprintf("branch %q not found", b)); err != nil {
			return err
		}
		return a.say(ctx, e, "\n\n"+unknownBranchText(b, t.Branches))
	}
	res, err := run(ctx, a.db, p, f, a.rowLimit)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		if a.closed.Load() {
			err = ErrClosed
		}
		if ferr := query.Fail("the query could not be run"); ferr != nil {
			return errors.Join(err, ferr)
		}
		return err
	}
	res.UserRequest = t.Input
	if err := query.Result(res); err != nil {
		return err
	}
	return a.say(ctx, e, "\n\n"+summary(p, res, f))
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
