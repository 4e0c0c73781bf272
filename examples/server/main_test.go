package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
)

// server runs the example server in-process on a free port until the test
// ends.
type server struct {
	base string
	stop func()
	done chan error
	out  *lineWriter
	// output is everything the server wrote, to stdout and stderr.
	output *lockedBuffer
}

type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line)
			break
		}
		select {
		case w.lines <- strings.TrimSpace(line):
		default:
		}
	}
	return len(p), nil
}

func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &lineWriter{lines: make(chan string, 100)}
	s := &server{stop: cancel, done: make(chan error, 1), out: out, output: &lockedBuffer{}}
	go func() {
		s.done <- run(ctx, context.Background(), append([]string{"-addr", "127.0.0.1:0", "-agent-delay", "0s"}, args...), io.MultiWriter(out, s.output), s.output)
	}()
	deadline := time.After(30 * time.Second)
	var seen []string
	for s.base == "" {
		select {
		case line := <-out.lines:
			seen = append(seen, line)
			if rest, ok := strings.CutPrefix(line, "embedkit example server listening on "); ok {
				s.base = strings.Fields(rest)[0]
			}
		case err := <-s.done:
			t.Fatalf("server exited: %v (output %q)", err, seen)
		case <-deadline:
			t.Fatalf("server did not start; output %q", seen)
		}
	}
	t.Cleanup(func() { s.shutdown(t) })
	return s
}

func (s *server) shutdown(t *testing.T) {
	if s.stop == nil {
		return
	}
	s.stop()
	s.stop = nil
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("server shutdown: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("server did not shut down")
	}
}

func do(t *testing.T, c *http.Client, method, url, key string, body any) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Api-Key "+key)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func TestServerContract(t *testing.T) {
	s := startServer(t, "-db", ":memory:")
	c := http.DefaultClient

	t.Run("healthz", func(t *testing.T) {
		resp, _ := do(t, c, http.MethodGet, s.base+"/healthz", "", nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("Cache-Control %q, want no-store", cc)
		}
		if resp, _ := do(t, c, http.MethodHead, s.base+"/healthz", "", nil); resp.StatusCode != http.StatusOK {
			t.Errorf("HEAD: status %d", resp.StatusCode)
		}
	})

	var sessionID string
	t.Run("generate-session", func(t *testing.T) {
		resp, b := do(t, c, http.MethodPost, s.base+"/api/v1/embed/generate-session", "sk-acme-admin", map[string]any{
			"deploymentId": 1, "externalId": "jane", "email": "jane@example.test",
			"userProfile":     map[string]any{"displayName": "Jane Doe", "picture": "https://example.test/broken.png"},
			"userAttributes":  []map[string]any{{"name": "country", "value": "Germany"}, {"name": "region_ids", "value": []int{1, 2}}},
			"groups":          []string{"sales"},
			"securityContext": map[string]any{"team": "emea"},
		})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		var out struct{ SessionID string }
		if err := json.Unmarshal(b, &out); err != nil || out.SessionID == "" {
			t.Fatalf("body %s", b)
		}
		sessionID = out.SessionID
	})

	t.Run("whoami with sessionId then cookie", func(t *testing.T) {
		jar, _ := cookiejar.New(nil)
		jc := &http.Client{Jar: jar}
		resp, b := do(t, jc, http.MethodGet, s.base+"/embed/whoami?sessionId="+sessionID, "", nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		var who map[string]any
		if err := json.Unmarshal(b, &who); err != nil {
			t.Fatal(err)
		}
		if who["externalId"] != "jane" || who["displayName"] != "Jane Doe" || who["email"] != "jane@example.test" ||
			who["deploymentId"] != 1.0 || who["creatorMode"] != false {
			t.Errorf("whoami = %s", b)
		}
		if attrs, _ := who["userAttributes"].(map[string]any); attrs["country"] != "Germany" {
			t.Errorf("userAttributes = %v", who["userAttributes"])
		}
		if g, _ := who["groups"].([]any); len(g) != 1 || g[0] != "sales" {
			t.Errorf("groups = %v", who["groups"])
		}
		if sc, _ := who["securityContext"].(map[string]any); sc["team"] != "emea" {
			t.Errorf("securityContext = %v", who["securityContext"])
		}
		// The cookie now authenticates; the used sessionId does not.
		resp, b = do(t, jc, http.MethodGet, s.base+"/embed/whoami", "", nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("cookie: status %d: %s", resp.StatusCode, b)
		}
		resp, _ = do(t, c, http.MethodGet, s.base+"/embed/whoami?sessionId="+sessionID, "", nil)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("replayed sessionId: status %d, want 401", resp.StatusCode)
		}
		// The profile page shows the picture with an initials fallback.
		resp, b = do(t, jc, http.MethodGet, s.base+"/embed/profile", "", nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), ">JD<") ||
			!strings.Contains(string(b), "https://example.test/broken.png") || strings.Contains(string(b), "<script") || strings.Contains(string(b), "onerror") {
			t.Errorf("profile: status %d: %s", resp.StatusCode, b)
		}
	})

	t.Run("chat answers with real SQL", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, s.base+"/api/v1/public/acme/agents/7/chat/stream-chat-state",
			strings.NewReader(`{"input":"revenue by country","sessionSettings":{"externalId":"chatter","userAttributes":[{"name":"country","value":"Germany"}]}}`))
		req.Header.Set("Authorization", "Api-Key sk-acme-user")
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-ndjson") {
			t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		var sawSQL, sawState bool
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 8<<20)
		for sc.Scan() {
			var m struct {
				ID       string
				ToolCall *struct{ Name, Result string }
			}
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			if m.ToolCall != nil && m.ToolCall.Name == "svcSqlApi" && m.ToolCall.Result != "" {
				var res struct {
					Data      [][]any
					TotalRows int
					VegaSpec  string
				}
				if err := json.Unmarshal([]byte(m.ToolCall.Result), &res); err != nil || len(res.Data) == 0 || res.VegaSpec == "" {
					t.Errorf("svcSqlApi result %q: %v", m.ToolCall.Result, err)
				}
				sawSQL = true
			}
			if m.ID == "__state__" {
				sawState = true
			}
		}
		if !sawSQL || !sawState {
			t.Errorf("sql %v, state %v", sawSQL, sawState)
		}
	})
}

func TestServerRestartKeepsData(t *testing.T) {
	db := filepath.Join(t.TempDir(), "embed.db")
	s := startServer(t, "-db", db)
	resp, b := do(t, http.DefaultClient, http.MethodPost, s.base+"/api/v1/embed/generate-session", "sk-acme-admin",
		map[string]any{"deploymentId": 1, "externalId": "restart-user", "groups": []string{"marketing"}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var out struct{ SessionID string }
	_ = json.Unmarshal(b, &out)
	s.shutdown(t)

	s2 := startServer(t, "-db", db) // bootstrap runs again: idempotent
	resp, b = do(t, http.DefaultClient, http.MethodGet, s2.base+"/embed/whoami?sessionId="+out.SessionID, "", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "marketing") {
		t.Fatalf("after restart: status %d: %s", resp.StatusCode, b)
	}
}

func TestFlagsFromEnvironment(t *testing.T) {
	t.Setenv("EMBED_ADDR", "127.0.0.1:9999")
	t.Setenv("EMBED_DB", ":memory:")
	t.Setenv("EMBED_DEV", "true")
	t.Setenv("EMBED_AGENT_DELAY", "5ms")
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.addr != "127.0.0.1:9999" || o.db != ":memory:" || !o.dev || o.agentDelay != 5*time.Millisecond {
		t.Errorf("options = %+v", o)
	}
	o, err = parseFlags([]string{"-addr", "127.0.0.1:1", "-dev=false"}, io.Discard)
	if err != nil || o.addr != "127.0.0.1:1" || o.dev {
		t.Errorf("flags override env: %+v %v", o, err)
	}
	if _, err = parseFlags([]string{"-agent-delay=-1s"}, io.Discard); err == nil || !strings.Contains(err.Error(), "must not be negative") {
		t.Errorf("negative -agent-delay: %v, want an error", err)
	}
	if _, err = parseFlags([]string{"-data-row-limit=0"}, io.Discard); err == nil || !strings.Contains(err.Error(), "must be positive") {
		t.Errorf("-data-row-limit 0: %v, want an error", err)
	}
	if o, err = parseFlags(nil, io.Discard); err != nil || o.dataRowLimit != chatstream.DefaultDataRowLimit {
		t.Errorf("default -data-row-limit: %d %v", o.dataRowLimit, err)
	}
}

func TestServerWithConfigFile(t *testing.T) {
	cfg := `{"accounts":[{"name":"initech","plan":"premium","useCreatorMode":false,"maxExternalUsers":2,
	  "apiKeys":[{"key":"sk-initech","admin":true}],"deployments":[{"id":3,"name":"prod"}],
	  "agents":[{"id":"a1","deploymentId":3}],"userAttributes":[{"name":"country","type":"string"}],
	  "groups":[{"name":"ops"}],"internalUsers":[{"username":"bob@initech.test"}],"branches":["main"]}]}`
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "-db", ":memory:", "-config", path)
	c := http.DefaultClient
	for i, want := range []int{200, 200, 403} { // maxExternalUsers 2
		resp, b := do(t, c, http.MethodPost, s.base+"/api/v1/embed/generate-session", "sk-initech",
			map[string]any{"deploymentId": 3, "externalId": "u" + string(rune('a'+i)), "groups": []string{"ops"}})
		if resp.StatusCode != want {
			t.Errorf("user %d: status %d (%s), want %d", i, resp.StatusCode, b, want)
		}
	}
	// The demo account does not exist with a config file.
	resp, _ := do(t, c, http.MethodPost, s.base+"/api/v1/embed/generate-session", "sk-acme-admin", map[string]any{"deploymentId": 1, "externalId": "x"})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("demo key with a config: status %d, want 401", resp.StatusCode)
	}
	// Unknown routes answer JSON.
	resp, b := do(t, c, http.MethodGet, s.base+"/api/v1/nope", "", nil)
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(b), `"error"`) {
		t.Errorf("unknown route: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	// So do paths that are not clean, rather than a redirect elsewhere.
	for _, rq := range []struct{ method, path string }{
		{http.MethodPost, "/api/v1/embed//generate-session"},
		{http.MethodPost, "/api/v1/embed/./generate-session"},
		{http.MethodGet, "/api/v1/embed-tenants//groups"},
		{http.MethodDelete, "/api/v1/embed/users/ua/../ub"},
	} {
		resp, b := do(t, c, rq.method, s.base+rq.path, "sk-initech", nil)
		if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/json" ||
			string(b) != `{"error":"no such endpoint: `+rq.method+" "+rq.path+`"}`+"\n" {
			t.Errorf("%s %s: %d %q %s, want a JSON 404", rq.method, rq.path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
	}
	resp, _ = do(t, c, http.MethodGet, s.base+"/api/v1/embed/generate-session", "", nil)
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Errorf("wrong method: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	resp, _ = do(t, c, http.MethodPost, s.base+"/api/v1/embed-tenants/some-tenant/groups/1", "", nil)
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "DELETE" {
		t.Errorf("wrong method on a path with parameters: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

// TestDemoHostOnlyWithDemoAccount: the demo host page mints sessions for
// its users with the built-in demo account only; with a -config file, even
// one whose first account has an admin key and a deployment, /?user= is a
// 404 and provisions nobody.
func TestDemoHostOnlyWithDemoAccount(t *testing.T) {
	c := http.DefaultClient
	demo := startServer(t, "-db", ":memory:")
	resp, b := do(t, c, http.MethodGet, demo.base+"/?user=ana", "", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "/embed/chat?sessionId=") {
		t.Fatalf("demo server, /?user=ana: %d %s", resp.StatusCode, b)
	}

	// A visitor of localhost gets the avatar from its own origin.
	req0, _ := http.NewRequest(http.MethodGet, demo.base+"/?user=ana", nil)
	req0.Host = strings.Replace(strings.TrimPrefix(demo.base, "http://"), "127.0.0.1", "localhost", 1)
	if resp, err := c.Do(req0); err != nil {
		t.Fatal(err)
	} else {
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if sid := regexp.MustCompile(`sessionId=([A-Za-z0-9_-]+)`).FindSubmatch(b); sid != nil {
		_, wb := do(t, c, http.MethodGet, demo.base+"/embed/whoami?sessionId="+string(sid[1]), "", nil)
		if !strings.Contains(string(wb), `"picture":"http://`+req0.Host+`/demo/avatars/`) {
			t.Errorf("a visitor of %s: whoami %s, want the avatar on that origin", req0.Host, wb)
		}
	} else {
		t.Fatalf("no sessionId in the demo page: %s", b)
	}

	// The demo users are shared: the Host header of one visitor's request
	// never becomes the picture every other visitor's browser loads.
	req, _ := http.NewRequest(http.MethodGet, demo.base+"/?user=ana", nil)
	req.Host = "attacker.example:8443"
	if resp, err := c.Do(req); err != nil {
		t.Fatal(err)
	} else {
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	sid := regexp.MustCompile(`sessionId=([A-Za-z0-9_-]+)`).FindSubmatch(b)
	if sid == nil {
		t.Fatalf("no sessionId in the demo page: %s", b)
	}
	resp, b = do(t, c, http.MethodGet, demo.base+"/embed/whoami?sessionId="+string(sid[1]), "", nil)
	var who struct{ Picture string }
	if err := json.Unmarshal(b, &who); err != nil || !strings.HasPrefix(who.Picture, demo.base+"/demo/avatars/") {
		t.Errorf("demo-ana's picture after a request with another Host = %q (%d %s), want one under %s", who.Picture, resp.StatusCode, b, demo.base)
	}

	cfg := `{"accounts":[{"name":"initech","plan":"enterprise","apiKeys":[{"key":"sk-initech","admin":true}],
	  "deployments":[{"id":1,"name":"prod"}],"agents":[{"id":"7","deploymentId":1}],
	  "userAttributes":[{"name":"country","type":"string"}]}]}`
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "-db", ":memory:", "-config", path)
	resp, b = do(t, c, http.MethodGet, s.base+"/?user=ana", "", nil)
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/json" ||
		!strings.Contains(string(b), "built-in demo account only") {
		t.Errorf("-config, /?user=ana: %d %s, want a 404 JSON error", resp.StatusCode, b)
	}
	// Nobody was provisioned in the config's account.
	if resp, b := do(t, c, http.MethodDelete, s.base+"/api/v1/embed/users/demo-ana", "sk-initech", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("demo-ana in the config's account: DELETE answered %d %s, want 404", resp.StatusCode, b)
	}
	resp, b = do(t, c, http.MethodGet, s.base+"/", "", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "built-in demo account only") || strings.Contains(string(b), "sessionId") {
		t.Errorf("-config, /: %d %s", resp.StatusCode, b)
	}
}

// TestFlagsRefusePositionalArgument: a stray argument ("-dev true" for
// "-dev=true") would end the flags there and the ones after it would be
// ignored: it is refused.
func TestFlagsRefusePositionalArgument(t *testing.T) {
	o, err := parseFlags([]string{"-dev", "true", "-db", ":memory:", "-addr", "127.0.0.1:18999"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `unexpected argument "true"`) {
		t.Fatalf("parseFlags with a positional argument: %v (addr %q, db %q), want an error naming it", err, o.addr, o.db)
	}
}

// TestFailedStartChangesNothing: a start that cannot listen (the address is
// taken) fails before it opens the database, so it neither creates one nor
// writes its -config into one another server uses; -h and a bad flag are
// usage errors, printed once by the flag package.
func TestFailedStartChangesNothing(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	db := filepath.Join(t.TempDir(), "never.db")
	var out bytes.Buffer
	err = run(t.Context(), context.Background(), []string{"-addr", taken.Addr().String(), "-db", db}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("start on a taken address: %v, want its listen error", err)
	}
	if _, serr := os.Stat(db); !os.IsNotExist(serr) {
		t.Errorf("the failed start created %s (%v)", db, serr)
	}
	if strings.Contains(out.String(), "level=ERROR") {
		t.Errorf("the failed start logged an error besides its own: %s", out.String())
	}
	var usage usageError
	if _, err := parseFlags([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp (exit 0, the usage printed)", err)
	}
	if _, err := parseFlags([]string{"-bogus"}, io.Discard); !errors.As(err, &usage) {
		t.Errorf("-bogus: %v (%T), want a usageError (exit 2, printed once)", err, err)
	}
}

// TestHeadWhereGet: every page answers HEAD as it answers GET (RFC 9110).
func TestHeadWhereGet(t *testing.T) {
	s := startServer(t, "-db", ":memory:")
	for p, want := range map[string]int{"/embed/chat": 200, "/embed/chat/chart": 200, "/": 200, "/healthz": 200, "/embed/whoami": 401} {
		req, _ := http.NewRequest(http.MethodHead, s.base+p, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("HEAD %s: %d (Allow %q), want %d as for GET", p, res.StatusCode, res.Header.Get("Allow"), want)
		}
	}
}

// TestNewSessionIDBeatsEarlierCookie: a page opened with a new sessionId
// shows that session's user, and one whose new sessionId fails shows the
// failure: never the user of the cookie an earlier session left in the
// browser, and a reload of the same URL keeps working.
func TestNewSessionIDBeatsEarlierCookie(t *testing.T) {
	s := startServer(t, "-db", ":memory:")
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	mint := func(ext, name string) string {
		t.Helper()
		res, body := do(t, http.DefaultClient, http.MethodPost, s.base+"/api/v1/embed/generate-session", "sk-acme-admin",
			map[string]any{"deploymentId": 1, "externalId": ext, "userProfile": map[string]any{"displayName": name},
				"userAttributes": []any{map[string]any{"name": "country", "value": name + "-land"}}})
		if res.StatusCode != 200 {
			t.Fatalf("generate-session: %d %s", res.StatusCode, body)
		}
		var out struct{ SessionID string }
		_ = json.Unmarshal(body, &out)
		return out.SessionID
	}
	whoami := func(sid string) (int, string) {
		t.Helper()
		res, body := do(t, browser, http.MethodGet, s.base+"/embed/whoami?sessionId="+sid, "", nil)
		return res.StatusCode, string(body)
	}
	kim := mint("kim", "Kim")
	if st, b := whoami(kim); st != 200 || !strings.Contains(b, `"externalId":"kim"`) {
		t.Fatalf("kim: %d %s", st, b)
	}
	if st, b := whoami(kim); st != 200 || !strings.Contains(b, `"externalId":"kim"`) {
		t.Errorf("a reload of kim's URL (its sessionId used): %d %s, want kim by the cookie", st, b)
	}
	// The host now signs in another user in the same browser.
	if st, b := whoami(mint("ana", "Ana")); !strings.Contains(b, `"externalId":"ana"`) {
		t.Errorf("page opened with ana's new sessionId: %d %s", st, b)
	}
	// A new sessionId that fails (unknown here).
	if st, b := whoami("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"); st != http.StatusUnauthorized {
		t.Errorf("page opened with a failing new sessionId: %d %s, want 401", st, b)
	}
	// Kim's tab, reloaded, is not served by ana's cookie either.
	if st, b := whoami(kim); st != http.StatusUnauthorized {
		t.Errorf("kim's used sessionId with ana's cookie: %d %s, want 401", st, b)
	}
}

// TestUncleanPathsAreNotFound: with the demo host's static files mounted,
// a path that is not clean is the JSON 404 of any unknown path, not a file
// served under a cleaned path or a redirect.
func TestUncleanPathsAreNotFound(t *testing.T) {
	s := startServer(t, "-db", ":memory:")
	c := http.DefaultClient
	if resp, b := do(t, c, http.MethodGet, s.base+"/demo/demo.js", "", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /demo/demo.js: %d %s", resp.StatusCode, b)
	}
	for _, p := range []string{"/demo//demo.js", "/demo/./index.html", "/demo/avatars/../demo.js", "/demo/../healthz", "//healthz", "/embed/chat/./assets/chat.js"} {
		resp, b := do(t, c, http.MethodGet, s.base+p, "", nil)
		if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/json" ||
			string(b) != `{"error":"no such endpoint: GET `+p+`"}`+"\n" {
			t.Errorf("GET %s: %d %q %s, want a JSON 404", p, resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
	}
}
