package gormstore_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mattn/go-sqlite3"
	gormsqlite "gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/chatstreamtest"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
)

// countingDriver is go-sqlite3 with a count of the statements that reach the
// driver, to compare with what the host's GORM logger and callbacks see.
type countingDriver struct {
	sqlite3.SQLiteDriver
	mu    sync.Mutex
	stmts []string
}

func (d *countingDriver) Open(name string) (driver.Conn, error) {
	c, err := d.SQLiteDriver.Open(name)
	if err != nil {
		return nil, err
	}
	return &countingConn{c.(*sqlite3.SQLiteConn), d}, nil
}

func (d *countingDriver) add(q string) {
	d.mu.Lock()
	d.stmts = append(d.stmts, q)
	d.mu.Unlock()
}

func (d *countingDriver) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.stmts
	d.stmts = nil
	return out
}

type countingConn struct {
	*sqlite3.SQLiteConn
	d *countingDriver
}

func (c *countingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.d.add(q)
	return c.SQLiteConn.ExecContext(ctx, q, args)
}

func (c *countingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.d.add(q)
	return c.SQLiteConn.QueryContext(ctx, q, args)
}

// PrepareContext counts nothing: a prepared statement counts each time it
// runs.
func (c *countingConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	st, err := c.SQLiteConn.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	return &countingStmt{st.(*sqlite3.SQLiteStmt), q, c.d}, nil
}

type countingStmt struct {
	*sqlite3.SQLiteStmt
	q string
	d *countingDriver
}

func (s *countingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.d.add(s.q)
	return s.SQLiteStmt.ExecContext(ctx, args)
}

func (s *countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.d.add(s.q)
	return s.SQLiteStmt.QueryContext(ctx, args)
}

var counting = &countingDriver{}

func init() { sql.Register("sqlite3-counting", counting) }

// statementLog is a host's GORM logger that records the SQL of every
// statement it is asked to trace.
type statementLog struct {
	logger.Interface
	mu    sync.Mutex
	stmts []string
}

func (l *statementLog) Trace(ctx context.Context, begin time.Time, fc func() (string, int64), err error) {
	q, _ := fc()
	l.mu.Lock()
	l.stmts = append(l.stmts, q)
	l.mu.Unlock()
}

func (l *statementLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.stmts
	l.stmts = nil
	return out
}

// TestHostSeesEveryStatement opens the store on a host's *gorm.DB with its
// own logger and a callback, runs generate-session, the token exchange and a
// chat turn over HTTP, and checks that the logger and the callback saw every
// statement that reached the database driver.
func TestHostSeesEveryStatement(t *testing.T) {
	log := &statementLog{Interface: logger.Discard}
	path := t.TempDir() + "/host.db"
	db, err := gorm.Open(gormsqlite.New(gormsqlite.Config{DriverName: "sqlite3-counting", DSN: "file:" + path + "?_foreign_keys=on&_journal_mode=WAL&_txlock=immediate"}),
		&gorm.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	sqlDB.SetMaxOpenConns(3)
	t.Cleanup(func() { _ = sqlDB.Close() })
	var (
		mu  sync.Mutex
		cbs []string
	)
	if err := testdb.OnStatement(db, func(_ context.Context, q string) {
		mu.Lock()
		cbs = append(cbs, q)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	agent := &chatstreamtest.ScriptedAgent{Events: []chatstreamtest.Event{chatstreamtest.Content("hello")}}
	var h *chatstream.Handler
	s := apitest.New(t, apitest.Target{Backend: testdb.SQLite, Router: apitest.ServeMux},
		apitest.WithStore(func(t testing.TB, _ string) store.Store {
			return openOn(t, db)
		}),
		apitest.WithRoutes(func(s *apitest.Server) []apitest.Route {
			h = chatstream.NewHandler(s.Store, agent, chatstream.WithClock(s.Now))
			var rs []apitest.Route
			for _, r := range h.Routes() {
				rs = append(rs, apitest.Route(r))
			}
			return rs
		}))
	t.Cleanup(func() { _ = h.Close() })

	check := func(what string) {
		t.Helper()
		drv := counting.take()
		logged := log.take()
		mu.Lock()
		seen := cbs
		cbs = nil
		mu.Unlock()
		// Transaction control (BEGIN, COMMIT, and the savepoints of
		// SQLite's group commit) is not a statement of GORM's callback
		// chain, as with any GORM transaction.
		drv = slices.DeleteFunc(drv, func(q string) bool {
			return q == "BEGIN IMMEDIATE" || q == "COMMIT" || q == "ROLLBACK" || strings.HasSuffix(q, " embedkit_call")
		})
		if len(drv) == 0 {
			t.Fatalf("%s: no statement reached the driver", what)
		}
		slices.Sort(drv)
		slices.Sort(seen)
		// The logger gets the statements with their values filled in.
		if len(drv) != len(logged) || !slices.Equal(drv, seen) {
			t.Errorf("%s: driver ran %d statements, logger saw %d, callback %d:\ndriver:\n%s\nlogger:\n%s",
				what, len(drv), len(logged), len(seen), strings.Join(drv, "\n"), strings.Join(logged, "\n"))
		}
		t.Logf("%s: %d statements, all seen by the host", what, len(drv))
	}
	counting.take()
	log.take()
	mu.Lock()
	cbs = nil
	mu.Unlock()

	sid := s.GenerateSession(t, map[string]any{"deploymentId": 1, "externalId": "jane",
		"userAttributes": []any{map[string]any{"name": "country", "value": "DE"}}, "groups": []string{"sales"}})
	check("generate-session")
	s.Token(t, sid)
	check("session token")
	c := chatstream.NewClient(s.URL, chatstream.WithAPIKey(apitest.AdminKey), chatstream.WithHTTPClient(s.Client()))
	for m, err := range c.Stream(t.Context(), apitest.Account, "7", chatstream.Request{Input: "hi", ChatID: "host-1",
		SessionSettings: &chatstream.SessionSettings{ExternalID: "jane"}}) {
		if err != nil {
			t.Fatal(err)
		}
		_ = m
	}
	// The turn's last writes may land just after the stream ends.
	time.Sleep(100 * time.Millisecond)
	check("chat turn")
}
