package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/embedkit/embedkit/chatstream"
)

// TestHostileSQLThroughTheChat runs the hostile-SQL attacks through the
// HTTP chat of the example server with -agent llm: a fake model endpoint
// asks for each query as a svcSqlApi call on behalf of a German user. Each
// attack gets a tool error; each legitimate query, German rows only. The
// system prompt names no filter value or identifier of the user.
func TestHostileSQLThroughTheChat(t *testing.T) {
	mb := "printf('%.*c',1000000,'a')"
	cases := []struct {
		q      string
		refuse bool
	}{
		{"WITH 'customers' AS (SELECT * FROM main.customers) SELECT country, count(*) FROM customers GROUP BY 1", true},
		{`WITH "orders" AS (SELECT * FROM main.orders) SELECT count(*) FROM orders`, true},
		{"WITH [customers] AS MATERIALIZED (SELECT * FROM main.customers) SELECT country FROM [customers]", true},
		{"WITH x AS (SELECT 1), `Customers` AS NOT MATERIALIZED (SELECT * FROM main.customers) SELECT country FROM customers, x", true},
		{"WITH RECURSIVE customers(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM customers WHERE n < (SELECT count(*) FROM main.customers)) SELECT max(n) FROM customers", true},
		{"SELECT country FROM main.customers AS customers", true},
		{"SELECT country FROM (SELECT * FROM main.customers) AS customers", true},
		{"SELECT (SELECT group_concat(DISTINCT country) FROM main.customers)", true},
		{"SELECT count(*) FROM (SELECT 'France' AS country) NATURAL JOIN main.customers", true},
		{"SELECT count(*) FROM main.order_lines", true},
		{"SELECT * FROM sqlite_master", true},
		{"SELECT * FROM sqlite_temp_master", true},
		{"SELECT * FROM pragma_table_list", true},
		{"SELECT * FROM json_each((SELECT json_group_array(country) FROM main.customers))", true},
		{"SELECT instr(" + mb + ", printf('%.*c',500000,'a') || 'b')", true},
		{"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 8) SELECT " + mb + ", " + mb + ", " + mb + ", " + mb + ", " + mb + " FROM c", true},
		{`SELECT country, count(*) FROM "customers" GROUP BY 1`, false},
		{"WITH customers AS (SELECT * FROM temp.customers) SELECT country, count(*) FROM customers GROUP BY 1", false},
		{"WITH 'x' AS (SELECT * FROM orders) SELECT country, count(DISTINCT order_id) FROM x GROUP BY 1", false},
		{"SELECT c.country FROM customers AS orders JOIN customers c USING (id) GROUP BY 1", false},
	}
	var calls [][2]string
	for _, c := range cases {
		b, _ := json.Marshal(map[string]string{"sqlQuery": c.q, "queryTitle": "t", "description": "d", "userRequest": "u"})
		calls = append(calls, [2]string{"svcSqlApi", string(b)})
	}
	// In two responses: the agent runs at most 16 calls of one.
	f := &fakeModel{replies: [][]string{
		{sseToolCalls(calls[:10]...), sseChunk(map[string]any{}, "tool_calls")},
		{sseToolCalls(calls[10:]...), sseChunk(map[string]any{}, "tool_calls")},
		{sseChunk(map[string]any{"role": "assistant", "content": "Done."}, nil), sseChunk(map[string]any{}, "stop")},
	}}
	endpoint := httptest.NewServer(f)
	defer endpoint.Close()
	t.Setenv("OPENAI_BASE_URL", endpoint.URL+"/v1")
	t.Setenv("OPENAI_API_KEY", "sk-model-key")
	s := startServer(t, "-db", ":memory:", "-agent", "llm", "-llm-model", "test-model")

	req := map[string]any{"input": "Show me everything.", "sessionSettings": map[string]any{
		"externalId": "jane-4711", "email": "jane@example.test", "groups": []string{"sales"},
		"userAttributes": []map[string]any{{"name": "country", "value": "Germany"}}}}
	resp, b := do(t, http.DefaultClient, http.MethodPost, s.base+"/api/v1/public/acme/agents/7/chat/stream-chat-state", "sk-acme-admin", req)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var results []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		var m chatstream.Message
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if m.ToolCall != nil && m.ToolCall.Result != nil {
			results = append(results, *m.ToolCall.Result)
		}
	}
	if len(results) != len(cases) {
		t.Fatalf("%d tool results for %d calls: %q", len(results), len(cases), results)
	}
	others := []string{"United States", "United Kingdom", "France", "Japan", "Canada", "Spain", "Italy", "Netherlands", "Australia", "Brazil", "Sweden", "CREATE TABLE"}
	for i, c := range cases {
		r := results[i]
		var res struct {
			Error string  `json:"error"`
			Data  [][]any `json:"data"`
		}
		if err := json.Unmarshal([]byte(r), &res); err != nil {
			t.Fatalf("%s: result %q: %v", c.q, r, err)
		}
		switch {
		case c.refuse && res.Error == "":
			t.Errorf("%s: ran: %.300s", c.q, r)
		case !c.refuse && (res.Error != "" || len(res.Data) != 1 || res.Data[0][0] != "Germany"):
			t.Errorf("%s: %.300s, want German rows only", c.q, r)
		}
		for _, o := range others {
			if strings.Contains(r, o) {
				t.Errorf("%s: %q reaches a German user: %.300s", c.q, o, r)
			}
		}
		for _, leak := range []string{"order_lines", "sqlite_", "embedkit_"} {
			if strings.Contains(res.Error, leak) && !strings.Contains(c.q, leak) {
				t.Errorf("%s: the error %q names %q", c.q, res.Error, leak)
			}
		}
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	sys := f.bodies[0]["messages"].([]any)[0].(map[string]any)["content"].(string)
	if !strings.Contains(sys, "Row filters apply") {
		t.Errorf("the system prompt does not say that row filters apply:\n%s", sys)
	}
	for _, leak := range []string{"Germany", "jane", "4711", "example.test", "sales"} {
		if strings.Contains(sys, leak) {
			t.Errorf("the system prompt names %q:\n%s", leak, sys)
		}
	}
}
