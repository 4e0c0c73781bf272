package main

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// TestMetrics scrapes GET /metrics of a server started with -metrics after a
// generate-session and a chat turn, and finds the request metric by route
// and status, the turn metrics and no unbounded label.
func TestMetrics(t *testing.T) {
	s := startServer(t, "-db", ":memory:", "-metrics")
	c := http.DefaultClient
	if resp, b := do(t, c, http.MethodPost, s.base+"/api/v1/embed/generate-session", "sk-acme-admin",
		map[string]any{"deploymentId": 1, "externalId": "metrics-jane"}); resp.StatusCode != http.StatusOK {
		t.Fatalf("generate-session: %d %s", resp.StatusCode, b)
	}
	if resp, b := do(t, c, http.MethodPost, s.base+"/api/v1/public/acme/agents/7/chat/stream-chat-state", "sk-acme-admin",
		map[string]any{"input": "hello", "chatId": "metrics-chat-1", "sessionSettings": map[string]any{"externalId": "metrics-jane"}}); resp.StatusCode != http.StatusOK {
		t.Fatalf("chat: %d %s", resp.StatusCode, b)
	}

	resp, b := do(t, c, http.MethodGet, s.base+"/metrics", "", nil)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	body := string(b)
	for _, re := range []string{
		`(?m)^http_server_request_duration_seconds_count\{[^}]*http_route="/api/v1/embed/generate-session"[^}]*\} 1$`,
		`(?m)^http_server_request_duration_seconds_count\{[^}]*http_response_status_code="200"[^}]*\} `,
		`(?m)^http_server_request_duration_seconds_count\{[^}]*http_route="/api/v1/public/\{accountName\}/agents/\{agentId\}/chat/stream-chat-state"[^}]*\} 1$`,
		`(?m)^embedkit_chat_turn_duration_seconds_count\{[^}]*embedkit_chat_turn_outcome="done"[^}]*\} 1$`,
		`(?m)^embedkit_chat_turns_running(_turn)?\{[^}]*\} 0$`,
		`(?m)^embedkit_chat_stream_lines(_line)?_total\{[^}]*\} [1-9]`,
	} {
		if !regexp.MustCompile(re).MatchString(body) {
			t.Errorf("no line matches %s in:\n%s", re, grepEmbedkit(body))
		}
	}
	for _, secret := range []string{"metrics-jane", "metrics-chat-1", "sk-acme-admin"} {
		if strings.Contains(body, secret) {
			t.Errorf("the scrape holds %q", secret)
		}
	}
}

// grepEmbedkit keeps the lines of our metrics, for failure messages.
func grepEmbedkit(body string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "http_server") || strings.HasPrefix(l, "embedkit_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestNoMetricsByDefault checks that /metrics is not served without
// -metrics.
func TestNoMetricsByDefault(t *testing.T) {
	s := startServer(t, "-db", ":memory:")
	if resp, _ := do(t, http.DefaultClient, http.MethodGet, s.base+"/metrics", "", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /metrics without -metrics: %d, want 404", resp.StatusCode)
	}
}
