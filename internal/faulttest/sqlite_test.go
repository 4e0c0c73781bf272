package faulttest_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/middleware/httperr"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore"

	_ "github.com/mattn/go-sqlite3"
)

// TestSQLiteConcurrentLoad runs 64 clients at once on one SQLite file
// store, each generating sessions (four clients share each user, so their
// upserts collide), exchanging them for tokens and chatting: SQLite's
// "database is locked" must never reach a caller, as a 500 or at all.
func TestSQLiteConcurrentLoad(t *testing.T) {
	// Four chats of one user run at once: above the default per-user limit.
	e := newEnv(t, envOpts{backend: testdb.SQLite, agent: testAgent,
		chatOpts: []chatstream.Option{chatstream.WithDefaultLimits(store.Limits{RunningTurnsPerUser: 4})}})
	const clients, rounds = 64, 4
	var (
		mu       sync.Mutex
		statuses = map[string]map[int]int{"generate-session": {}, "token": {}, "chat": {}}
		wg       sync.WaitGroup
		start    = make(chan struct{})
	)
	count := func(what string, status int) {
		mu.Lock()
		statuses[what][status]++
		mu.Unlock()
	}
	begin := time.Now()
	for c := range clients {
		wg.Go(func() {
			<-start
			user := fmt.Sprintf("lite-%d", c%16)
			for r := range rounds {
				g := &genReq{extID: user, country: fmt.Sprintf("C%d-%d", c, r), group: []string{"sales", "marketing"}[r%2]}
				e.generate(t.Context(), g)
				if g.err != nil {
					t.Errorf("generate-session: %v", g.err)
					return
				}
				count("generate-session", g.status)
				if g.status != http.StatusOK {
					t.Errorf("generate-session: %d %q, want 200", g.status, g.errMsg)
					continue
				}
				tok := e.Send(t, e.Request(t, http.MethodPost, embedsession.PathSessionToken, "", map[string]string{"sessionId": g.sessionID}))
				count("token", tok.Status)
				if tok.Status != http.StatusOK {
					t.Errorf("token exchange: %d %s, want 200", tok.Status, tok.Raw)
				}
				ctx, cancel := context.WithTimeout(t.Context(), hangGuard)
				var msgs []chatstream.Message
				var err error
				for m, serr := range e.client.Stream(ctx, acct, agentID, chatstream.Request{Input: "q", ChatID: fmt.Sprintf("lite-chat-%d", c),
					SessionSettings: &chatstream.SessionSettings{ExternalID: user}}) {
					if serr != nil {
						err = serr
						break
					}
					msgs = append(msgs, m)
				}
				cancel()
				if ae, ok := err.(*httperr.Error); ok {
					count("chat", ae.Status)
					t.Errorf("chat: %v, want 200", err)
					continue
				}
				count("chat", http.StatusOK)
				if _, st := checkEnd(t, "chat", msgs, err); st != nil && (st.Error != "" || st.Aborted) {
					t.Errorf("chat: state %+v, want a normal end", st)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	t.Logf("statuses %v in %v", statuses, time.Since(begin).Round(time.Millisecond))
}

// TestSQLiteLockedByAnotherWriter has another connection to the same SQLite
// file (another process, a backup, a migration) take the write lock again
// and again while 8 generate-session clients and 4 chat clients run, once
// for longer than the query timeout: requests wait for short locks and
// answer 503 JSON for the long one, never 500, and every acknowledged write
// is stored.
func TestSQLiteLockedByAnotherWriter(t *testing.T) {
	e := newEnv(t, envOpts{backend: testdb.SQLite, agent: testAgent,
		storeOpts: []gormstore.Option{gormstore.WithQueryTimeout(queryTimeout)}})
	other, err := sql.Open("sqlite3", "file:"+e.dsn+"?_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	lockConn, err := other.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer lockConn.Close()
	hold := func(d time.Duration) {
		if _, err := lockConn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
			t.Errorf("other writer: %v", err)
			return
		}
		time.Sleep(d)
		if _, err := lockConn.ExecContext(t.Context(), "ROLLBACK"); err != nil {
			t.Errorf("other writer: %v", err)
		}
	}

	stop := make(chan struct{})
	done := make(chan []*genReq)
	go func() { done <- e.load(t.Context(), 8, stop) }()
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		chats      = map[string]int{}
		stateError int
	)
	for c := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(t.Context(), hangGuard)
				var msgs []chatstream.Message
				var err error
				for m, serr := range e.client.Stream(ctx, acct, agentID, chatstream.Request{Input: "q", ChatID: fmt.Sprintf("locked-%d-%d", c, i),
					SessionSettings: &chatstream.SessionSettings{ExternalID: fmt.Sprintf("locked-%d", c)}}) {
					if serr != nil {
						err = serr
						break
					}
					msgs = append(msgs, m)
				}
				cancel()
				mu.Lock()
				switch {
				case is503(err):
					chats["503"]++
				case err != nil:
					chats["other"]++
					t.Errorf("chat: %v, want 200 or 503", err)
				default:
					chats["200"]++
					if _, st := checkEnd(t, "chat", msgs, nil); st != nil && st.Error != "" {
						stateError++ // the answer could not be stored: reported in the stream
					}
				}
				mu.Unlock()
			}
		})
	}

	for range 5 {
		time.Sleep(100 * time.Millisecond)
		hold(150 * time.Millisecond) // shorter than the busy wait: callers wait
	}
	hold(3 * queryTimeout / 2) // longer than the query timeout: 503
	time.Sleep(300 * time.Millisecond)
	close(stop)
	all := <-done
	wg.Wait()

	counts, slowest := checkAnswers(t, all)
	t.Logf("generate-session %v (slowest 503 %v); chat %v, %d with state.error", counts, slowest.Round(time.Millisecond), chats, stateError)
	if counts[http.StatusOK] == 0 {
		t.Error("no request succeeded")
	}
	e.checkDurable(t, all)
}

// TestSQLiteRecoversFromWriteErrors: while the database file cannot be
// written (made immutable, as a filesystem that starts refusing writes),
// writes answer 503 and store nothing; once it can be written again the
// server writes again, without a restart. Skipped where chattr cannot
// make a file immutable (not root, or a filesystem without the flag).
func TestSQLiteRecoversFromWriteErrors(t *testing.T) {
	e := newEnv(t, envOpts{backend: testdb.SQLite, agent: testAgent,
		storeOpts: []gormstore.Option{gormstore.WithQueryTimeout(queryTimeout)}})
	g := &genReq{extID: "before", country: "DE", group: "sales"}
	if e.generate(t.Context(), g); g.status != http.StatusOK {
		t.Fatalf("warm-up: %d %q %v", g.status, g.errMsg, g.err)
	}
	files := []string{e.dsn, e.dsn + "-wal"}
	chattr := func(flag string) error {
		for _, f := range files {
			if out, err := exec.Command("chattr", flag, f).CombinedOutput(); err != nil {
				return fmt.Errorf("chattr %s %s: %v %s", flag, f, err, out)
			}
		}
		return nil
	}
	if err := chattr("+i"); err != nil {
		_ = chattr("-i")
		t.Skip(err)
	}
	defer func() { _ = chattr("-i") }()
	for i := range 3 {
		g := &genReq{extID: fmt.Sprintf("during-%d", i), country: "FR", group: "sales"}
		if e.generate(t.Context(), g); g.status != http.StatusServiceUnavailable || g.errMsg == "" {
			t.Errorf("a write while the file cannot be written: %d %q %v, want 503", g.status, g.errMsg, g.err)
		}
	}
	if err := chattr("-i"); err != nil {
		t.Fatal(err)
	}
	e.probe(t, time.Now())
	for i := range 3 {
		if u := e.User(t, acct, fmt.Sprintf("during-%d", i), ""); u.Exists {
			t.Errorf("during-%d was refused but stored", i)
		}
	}
}
