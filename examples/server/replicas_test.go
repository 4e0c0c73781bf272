package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/middleware/httperr"
)

// envRunServer makes the test binary run the example server's main instead
// of the tests: the multi-process test starts replicas by re-executing
// itself, which needs no separate build.
const envRunServer = "EMBEDKIT_EXAMPLE_SERVER_PROCESS"

func TestMain(m *testing.M) {
	if os.Getenv(envRunServer) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// replica is an example server running in a child process.
type replica struct {
	name   string
	base   string
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited
	err    error         // the exit status, once exited is closed
	stderr *lockedBuffer
	stdout *lockedBuffer // every line written so far
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startReplica starts the example server in a new process on 127.0.0.1:0
// and returns once it listens. It is stopped with SIGTERM in t.Cleanup and
// must exit with status 0.
func startReplica(t *testing.T, name string, args ...string) *replica {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), envRunServer+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{name: name, cmd: cmd, exited: make(chan struct{}), stderr: &lockedBuffer{}, stdout: &lockedBuffer{}}
	cmd.Stderr = r.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Fprintln(r.stdout, sc.Text())
			select {
			case lines <- sc.Text():
			default: // nobody reads any more
			}
		}
	}()
	go func() {
		r.err = cmd.Wait()
		close(r.exited)
	}()
	t.Cleanup(func() { r.stop(t) })

	deadline := time.After(60 * time.Second)
	var seen []string
	for r.base == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				<-r.exited
				t.Fatalf("%s exited before listening: %v\nstdout %q\nstderr %s", name, r.err, seen, r.stderr)
			}
			seen = append(seen, line)
			if rest, ok := strings.CutPrefix(line, "embedkit example server listening on "); ok {
				r.base = strings.Fields(rest)[0]
			}
		case <-deadline:
			t.Fatalf("%s did not start within 60s; stdout %q\nstderr %s", name, seen, r.stderr)
		}
	}
	return r
}

// stop sends SIGTERM and waits for a clean exit.
func (r *replica) stop(t *testing.T) {
	t.Helper()
	select {
	case <-r.exited:
	default:
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.exited:
		case <-time.After(40 * time.Second):
			_ = r.cmd.Process.Kill()
			<-r.exited
			t.Errorf("%s did not exit within 40s of SIGTERM", r.name)
		}
	}
	if r.err != nil {
		t.Errorf("%s exited with %v; stderr:\n%s", r.name, r.err, r.stderr)
	}
}

// replicasConfig is the bootstrap file of the test: the demo account, and
// an account limited to 5 external users and 2 running turns for the limit
// tests.
const replicasConfig = `{"accounts":[
 {"name":"acme","plan":"enterprise","useCreatorMode":true,"maxExternalUsers":10000,
  "apiKeys":[{"key":"sk-acme-admin","admin":true},{"key":"sk-acme-user"}],
  "deployments":[{"id":1,"name":"production"}],"agents":[{"id":"7","deploymentId":1}],
  "userAttributes":[{"name":"country","type":"string"}],"groups":[{"name":"sales"}],
  "branches":["main"]},
 {"name":"tiny","plan":"enterprise","useCreatorMode":false,"maxExternalUsers":5,
  "limits":{"runningTurns":2},
  "apiKeys":[{"key":"sk-tiny-admin","admin":true}],
  "deployments":[{"id":1,"name":"production"}],"agents":[{"id":"1","deploymentId":1}],
  "branches":["main"]}]}`

// TestReplicas runs two example-server processes on one PostgreSQL schema
// and checks what docs/decisions.md §5 and the README promise across replicas:
// sessions, chat abort and rejoin, and exact limits.
func TestReplicas(t *testing.T) {
	dsn := testdb.OpenDSN(t, testdb.Postgres) // skips without EMBEDKIT_TEST_POSTGRES_DSN
	cfg := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfg, []byte(replicasConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	// A pause long enough for a turn to be running when the other
	// replica acts; every turn of the test is aborted.
	args := []string{"-db", dsn, "-config", cfg, "-agent-delay", "300ms"}
	a := startReplica(t, "replica A", args...)
	b := startReplica(t, "replica B", args...)
	c := &http.Client{Timeout: 30 * time.Second}

	t.Run("session minted on A resolves on B", func(t *testing.T) {
		id := generateSession(t, c, a, "sk-acme-admin", "roamer")
		resp, body := do(t, c, http.MethodGet, b.base+"/embed/whoami?sessionId="+id, "", nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"externalId":"roamer"`) {
			t.Fatalf("whoami on B: %d %s", resp.StatusCode, body)
		}
		// A session minted on B is exchanged for a token on A, which B
		// accepts.
		id = generateSession(t, c, b, "sk-acme-admin", "roamer")
		resp, body = do(t, c, http.MethodPost, a.base+"/api/v1/embed/session/token", "", map[string]string{"sessionId": id})
		var tok struct{ Token string }
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &tok) != nil || tok.Token == "" {
			t.Fatalf("token on A: %d %s", resp.StatusCode, body)
		}
		req, _ := http.NewRequest(http.MethodGet, b.base+"/embed/whoami", nil)
		req.Header.Set("Authorization", "Bearer "+tok.Token)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"externalId":"roamer"`) {
			t.Fatalf("whoami on B with A's token: %d %s", resp.StatusCode, body)
		}
	})

	clientA := chatstream.NewClient(a.base, chatstream.WithAPIKey("sk-acme-user"))
	clientB := chatstream.NewClient(b.base, chatstream.WithAPIKey("sk-acme-user"))
	user := chatstream.SessionSettings{ExternalID: "chatter"}
	ctx := t.Context()

	t.Run("stream on A, abort on B", func(t *testing.T) {
		const id = "replicas-abort"
		lines, wait := follow(ctx, clientA, chatstream.Request{Input: "revenue by country", ChatID: id, SessionSettings: &user})
		waitFor(t, lines, "A's stream", isLiveContent)
		if err := clientB.Abort(ctx, "acme", "7", id, user); err != nil {
			t.Fatalf("abort on B: %v", err)
		}
		acked := time.Now()
		msgs, err := wait()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("A's stream ended %v after B's 204", time.Since(acked).Round(time.Millisecond))
		if st := lastMessage(msgs); st.ID != chatstream.StateID || st.State == nil || !st.State.Aborted {
			t.Fatalf("A's stream ends with %+v, want __state__ aborted", st)
		}
	})

	t.Run("rejoin on B of a turn running on A", func(t *testing.T) {
		const id = "replicas-rejoin"
		linesA, waitA := follow(ctx, clientA, chatstream.Request{Input: "revenue by country", ChatID: id, SessionSettings: &user})
		waitFor(t, linesA, "A's stream", isLiveContent)
		// Input for the running turn is 409 on B too.
		for _, err := range clientB.Stream(ctx, "acme", "7", chatstream.Request{Input: "more", ChatID: id, SessionSettings: &user}) {
			if e, ok := errors.AsType[*httperr.Error](err); !ok || e.Status != http.StatusConflict {
				t.Errorf("input on B while A runs: %v, want 409", err)
			}
			break
		}
		linesB, waitB := follow(ctx, clientB, chatstream.Request{ChatID: id, SessionSettings: &user})
		first := waitFor(t, linesB, "B's rejoined stream", func(chatstream.Message) bool { return true })
		if first.ID != chatstream.CutoffID || first.State == nil || !first.State.IsStreaming {
			t.Fatalf("B's first line = %+v, want __cutoff__ with isStreaming", first)
		}
		waitFor(t, linesB, "B's rejoined stream", isLiveContent)
		// End the turn from A; both streams end alike.
		if err := clientA.Abort(ctx, "acme", "7", id, user); err != nil {
			t.Fatal(err)
		}
		msgsA, err := waitA()
		if err != nil {
			t.Fatal(err)
		}
		msgsB, err := waitB()
		if err != nil {
			t.Fatal(err)
		}
		var ca, cb chatstream.Conversation
		for _, m := range msgsA {
			ca.Add(m)
		}
		for _, m := range msgsB {
			cb.Add(m)
		}
		fa, _ := ca.FinalAnswer()
		fb, _ := cb.FinalAnswer()
		if fa.Content == "" || fa.Content != fb.Content {
			t.Errorf("final answers differ: A %q, B %q", fa.Content, fb.Content)
		}
		if sa, sb := lastMessage(msgsA), lastMessage(msgsB); sb.State == nil || !sb.State.Aborted || sa.Sort != sb.Sort {
			t.Errorf("B's stream ends with %+v, want A's __state__ %+v", sb, sa)
		}
	})

	t.Run("limits are exact across replicas", func(t *testing.T) {
		statuses := make([]int, 32)
		var wg sync.WaitGroup
		for i := range statuses {
			r := a
			if i%2 == 1 {
				r = b
			}
			wg.Go(func() {
				body, _ := json.Marshal(map[string]any{"deploymentId": 1, "externalId": fmt.Sprintf("tiny-%02d", i)})
				req, _ := http.NewRequest(http.MethodPost, r.base+"/api/v1/embed/generate-session", bytes.NewReader(body))
				req.Header.Set("Authorization", "Api-Key sk-tiny-admin")
				req.Header.Set("Content-Type", "application/json")
				resp, err := c.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				statuses[i] = resp.StatusCode
			})
		}
		wg.Wait()
		count := map[int]int{}
		for _, s := range statuses {
			count[s]++
		}
		if count[http.StatusOK] != 5 || count[http.StatusForbidden] != 27 {
			t.Errorf("statuses = %v, want 5 × 200 and 27 × 403", count)
		}
	})

	t.Run("running turns are counted across replicas", func(t *testing.T) {
		tinyA := chatstream.NewClient(a.base, chatstream.WithAPIKey("sk-tiny-admin"))
		tinyB := chatstream.NewClient(b.base, chatstream.WithAPIKey("sk-tiny-admin"))
		start := func(c *chatstream.Client, n int) {
			t.Helper()
			ch := make(chan error, 1)
			go func() {
				for _, err := range c.Stream(ctx, "tiny", "1", chatstream.Request{Input: "revenue by country", ChatID: fmt.Sprintf("tl-%d", n),
					SessionSettings: &chatstream.SessionSettings{ExternalID: fmt.Sprintf("tl-%d", n)}}) {
					ch <- err // the first line: the turn runs
					return
				}
			}()
			if err := <-ch; err != nil {
				t.Fatalf("turn %d: %v", n, err)
			}
		}
		start(tinyA, 1)
		start(tinyB, 2)
		for i, c := range []*chatstream.Client{tinyA, tinyB} {
			for _, err := range c.Stream(ctx, "tiny", "1", chatstream.Request{Input: "one more", SessionSettings: &chatstream.SessionSettings{ExternalID: "tl-3"}}) {
				if e, ok := errors.AsType[*httperr.Error](err); !ok || e.Status != http.StatusTooManyRequests {
					t.Errorf("a third turn on replica %d: %v, want 429", i, err)
				}
				break
			}
		}
		for n, c := range []*chatstream.Client{tinyA, tinyB} {
			_ = c.Abort(ctx, "tiny", "1", fmt.Sprintf("tl-%d", n+1), chatstream.SessionSettings{ExternalID: fmt.Sprintf("tl-%d", n+1)})
		}
	})
}

func generateSession(t *testing.T, c *http.Client, r *replica, key, externalID string) string {
	t.Helper()
	resp, body := do(t, c, http.MethodPost, r.base+"/api/v1/embed/generate-session", key,
		map[string]any{"deploymentId": 1, "externalId": externalID})
	var out struct{ SessionID string }
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &out) != nil || out.SessionID == "" {
		t.Fatalf("generate-session on %s: %d %s", r.name, resp.StatusCode, body)
	}
	return out.SessionID
}

// follow reads a chat stream in the background: lines delivers each
// message as it arrives (until nobody reads), wait returns them all once
// the stream ends.
func follow(ctx context.Context, c *chatstream.Client, req chatstream.Request) (lines <-chan chatstream.Message, wait func() ([]chatstream.Message, error)) {
	ch := make(chan chatstream.Message, 1024)
	done := make(chan struct{})
	var (
		msgs []chatstream.Message
		serr error
	)
	go func() {
		defer close(done)
		defer close(ch)
		for m, err := range c.Stream(ctx, "acme", "7", req) {
			if err != nil {
				serr = err
				return
			}
			msgs = append(msgs, m)
			select {
			case ch <- m:
			default:
			}
		}
	}()
	return ch, func() ([]chatstream.Message, error) {
		<-done
		return msgs, serr
	}
}

// waitFor returns the first message of lines that satisfies cond.
func waitFor(t *testing.T, lines <-chan chatstream.Message, what string, cond func(chatstream.Message) bool) chatstream.Message {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case m, ok := <-lines:
			if !ok {
				t.Fatalf("%s ended before the expected line", what)
			}
			if cond(m) {
				return m
			}
		case <-deadline:
			t.Fatalf("%s: expected line not within 30s", what)
		}
	}
}

func isLiveContent(m chatstream.Message) bool {
	return m.Role == chatstream.RoleAssistant && m.IsDelta && m.IsInProcess && m.Content != ""
}

func lastMessage(msgs []chatstream.Message) chatstream.Message {
	if len(msgs) == 0 {
		return chatstream.Message{}
	}
	return msgs[len(msgs)-1]
}
