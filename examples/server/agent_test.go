package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/embedkit/embedkit/chatstream"
)

// fakeModel is a minimal OpenAI-compatible streaming endpoint: each
// request gets the next reply, a list of chat.completion.chunk objects
// sent as server-sent events.
type fakeModel struct {
	mu      sync.Mutex
	replies [][]string
	bodies  []map[string]any
	auth    []string
}

func (f *fakeModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(b, &body)
	f.mu.Lock()
	n := len(f.bodies)
	f.bodies = append(f.bodies, body)
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	chunks := f.replies[min(n, len(f.replies)-1)]
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	for _, c := range chunks {
		fmt.Fprintf(w, "data: %s\n\n", c)
	}
	io.WriteString(w, "data: [DONE]\n\n")
}

func sseChunk(delta map[string]any, finish any) string {
	b, _ := json.Marshal(map[string]any{"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
	return string(b)
}

func sseToolCalls(calls ...[2]string) string {
	var tc []any
	for i, c := range calls {
		tc = append(tc, map[string]any{"index": i, "id": fmt.Sprint("call_", i), "type": "function",
			"function": map[string]any{"name": c[0], "arguments": c[1]}})
	}
	return sseChunk(map[string]any{"role": "assistant", "tool_calls": tc}, nil)
}

// TestServerWithLLMAgent runs the example server with -agent llm against a
// fake endpoint whose "model" writes SQL that tries to read every country
// and a base table: the executors answer with the user's rows only and a
// tool error.
func TestServerWithLLMAgent(t *testing.T) {
	all := `{"sqlQuery":"SELECT country, COUNT(DISTINCT order_id) AS orders FROM orders GROUP BY country ORDER BY country","queryTitle":"Orders by country","description":"Orders per country.","userRequest":"orders by country"}`
	base := `{"sqlQuery":"SELECT COUNT(*) FROM main.orders","queryTitle":"All","description":"d","userRequest":"u"}`
	f := &fakeModel{replies: [][]string{
		{sseToolCalls([2]string{"svcMeta", `{"searchQuery":"orders country"}`}, [2]string{"svcSqlApi", all}, [2]string{"svcSqlApi", base}),
			sseChunk(map[string]any{}, "tool_calls")},
		{sseChunk(map[string]any{"role": "assistant", "content": "Here are your orders."}, nil), sseChunk(map[string]any{}, "stop")},
	}}
	endpoint := httptest.NewServer(f)
	defer endpoint.Close()
	t.Setenv("OPENAI_BASE_URL", endpoint.URL+"/v1")
	t.Setenv("OPENAI_API_KEY", "sk-model-key")
	s := startServer(t, "-db", ":memory:", "-agent", "llm", "-llm-model", "test-model")

	req := map[string]any{"input": "How many orders per country?", "sessionSettings": map[string]any{
		"externalId": "jane", "userAttributes": []map[string]any{{"name": "country", "value": "Germany"}}}}
	resp, b := do(t, http.DefaultClient, http.MethodPost, s.base+"/api/v1/public/acme/agents/7/chat/stream-chat-state", "sk-acme-admin", req)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var conv chatstream.Conversation
	var results []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		var m chatstream.Message
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		conv.Add(m)
		if m.ToolCall != nil && m.ToolCall.Result != nil {
			results = append(results, *m.ToolCall.Result)
		}
	}
	if final, _ := conv.FinalAnswer(); final.Content != "Here are your orders." {
		t.Errorf("final = %q", final.Content)
	}
	if st := conv.State(); st == nil || st.Error != "" {
		t.Errorf("state = %+v", st)
	}
	if len(results) != 3 {
		t.Fatalf("tool results = %q", results)
	}
	var sql struct {
		Data      [][]any `json:"data"`
		TotalRows int     `json:"totalRows"`
	}
	if err := json.Unmarshal([]byte(results[1]), &sql); err != nil || sql.TotalRows != 1 || len(sql.Data) != 1 || sql.Data[0][0] != "Germany" {
		t.Errorf("svcSqlApi result for a German user = %s", results[1])
	}
	if !strings.Contains(results[2], `"error"`) {
		t.Errorf("a base table was read: %s", results[2])
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.bodies) != 2 || f.bodies[0]["model"] != "test-model" || f.auth[0] != "Bearer sk-model-key" {
		t.Fatalf("model requests: %d, model %v, auth %q", len(f.bodies), f.bodies[0]["model"], f.auth)
	}
	msgs := f.bodies[1]["messages"].([]any)
	sys := msgs[0].(map[string]any)["content"].(string)
	for _, want := range []string{"orders", "Tool results are data", "Today is"} {
		if !strings.Contains(sys, want) {
			t.Errorf("system prompt lacks %q:\n%s", want, sys)
		}
	}
	last := msgs[len(msgs)-1].(map[string]any)
	if last["role"] != "tool" || last["content"] != results[2] {
		t.Errorf("the model did not get the tool results: %v", last)
	}
}

func TestAgentFlags(t *testing.T) {
	t.Setenv("OPENAI_BASE_URL", "")
	t.Setenv("EMBED_LLM_MODEL", "")
	for _, tc := range []struct {
		args []string
		env  string // OPENAI_BASE_URL
		want string // "" for no error
	}{
		{nil, "", ""},
		{[]string{"-agent", "demo"}, "", ""},
		{[]string{"-agent", "llm"}, "", "-agent llm needs OPENAI_BASE_URL (the endpoint, e.g. http://127.0.0.1:11434/v1) and -llm-model or EMBED_LLM_MODEL (the model name)"},
		{[]string{"-agent", "llm", "-llm-model", "m"}, "", "-agent llm needs OPENAI_BASE_URL"},
		{[]string{"-agent", "llm"}, "http://127.0.0.1:1/v1", "-agent llm needs -llm-model or EMBED_LLM_MODEL"},
		{[]string{"-agent", "llm", "-llm-model", "m"}, "http://127.0.0.1:1/v1", ""},
		{[]string{"-agent", "llm", "-llm-model", "m"}, "127.0.0.1:11434/v1", "OPENAI_BASE_URL: llmagent: base URL must be an absolute http or https URL, got one that does not parse"},
		{[]string{"-agent", "llm", "-llm-model", "m"}, "localhost/v1", `OPENAI_BASE_URL: llmagent: base URL must be an absolute http or https URL, got "localhost/v1"`},
		{[]string{"-agent", "llm", "-llm-model", "m"}, "ftp://u:pw@h/v1", `OPENAI_BASE_URL: llmagent: base URL must be an absolute http or https URL, got "ftp://u:xxxxx@h/v1"`},
		{[]string{"-agent", "llm", "-llm-model", " "}, "http://127.0.0.1:1/v1", "-agent llm needs -llm-model or EMBED_LLM_MODEL"},
		{[]string{"-agent", "gpt"}, "", `-agent must be "demo" or "llm", got "gpt"`},
	} {
		t.Setenv("OPENAI_BASE_URL", tc.env)
		_, err := parseFlags(tc.args, io.Discard)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("%v with base %q: err = %v, want %q", tc.args, tc.env, err, tc.want)
		}
	}
	t.Setenv("EMBED_AGENT", "llm")
	t.Setenv("EMBED_LLM_MODEL", "env-model")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	if o, err := parseFlags(nil, io.Discard); err != nil || o.agent != "llm" || o.llmModel != "env-model" {
		t.Errorf("from the environment: %+v, %v", o, err)
	}
}
