package llmagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/option"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/chatstreamtest"
	"github.com/embedkit/embedkit/chatstream/llmagent"
	"github.com/embedkit/embedkit/internal/logbuf"
	"github.com/embedkit/embedkit/internal/optiontest"
)

const testKey = "sk-test-secret-0123456789"

func newAgent(t testing.TB, f *fakeLLM, tools []llmagent.Tool, opts ...llmagent.Option) (*llmagent.Agent, *logbuf.Buffer) {
	t.Helper()
	logs := &logbuf.Buffer{}
	base := []llmagent.Option{
		llmagent.WithAPIKey(testKey),
		llmagent.WithRetryDelay(time.Millisecond),
		llmagent.WithLogger(slog.New(slog.NewTextHandler(logs, nil))),
	}
	return llmagent.New(f.url(), "fake-model", tools, append(base, opts...)...), logs
}

func answer(t testing.TB, a chatstream.Agent, tu chatstream.Turn) (*chatstreamtest.Recorder, error) {
	t.Helper()
	if tu.Input == "" {
		tu.Input = "How is revenue?"
	}
	if tu.AccountName == "" {
		tu.AccountName, tu.AgentID, tu.ChatID = "acme", "7", "c1"
	}
	rec := &chatstreamtest.Recorder{}
	err := a.Answer(context.Background(), tu, rec)
	return rec, err
}

// messages returns the messages of the i-th request as role/content maps.
func messages(t testing.TB, f *fakeLLM, i int) []map[string]any {
	t.Helper()
	reqs := f.reqs()
	if i >= len(reqs) {
		t.Fatalf("request %d not made; %d requests", i, len(reqs))
	}
	var out []map[string]any
	for _, m := range reqs[i].Body["messages"].([]any) {
		out = append(out, m.(map[string]any))
	}
	return out
}

func roles(ms []map[string]any) string {
	var r []string
	for _, m := range ms {
		r = append(r, m["role"].(string))
	}
	return strings.Join(r, ",")
}

func TestStreamsTextAsContent(t *testing.T) {
	f := newFake(t, say("Revenue ", "grew ", "12%."))
	a, logs := newAgent(t, f, []llmagent.Tool{&fakeTool{name: "svcMeta"}}, llmagent.WithMaxOutputTokens(321))
	rec, err := answer(t, a, chatstream.Turn{})
	if err != nil {
		t.Fatal(err)
	}
	var pieces []string
	for _, e := range rec.Events() {
		pieces = append(pieces, e.Text)
	}
	if got := strings.Join(pieces, "|"); got != "Revenue |grew |12%." {
		t.Errorf("content pieces = %q", got)
	}
	reqs := f.reqs()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Path != "/v1/chat/completions" {
		t.Errorf("path = %q", r.Path)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer "+testKey {
		t.Errorf("Authorization = %q", got)
	}
	b := r.Body
	if b["model"] != "fake-model" || b["stream"] != true || b["max_completion_tokens"] != 321.0 {
		t.Errorf("model, stream, max_completion_tokens = %v, %v, %v", b["model"], b["stream"], b["max_completion_tokens"])
	}
	if so, _ := b["stream_options"].(map[string]any); so["include_usage"] != true {
		t.Errorf("stream_options = %v", b["stream_options"])
	}
	tools, _ := b["tools"].([]any)
	if len(tools) != 1 || tools[0].(map[string]any)["function"].(map[string]any)["name"] != "svcMeta" {
		t.Errorf("tools = %v", b["tools"])
	}
	if _, ok := b["tool_choice"]; ok {
		t.Errorf("tool_choice sent in round 1: %v", b["tool_choice"])
	}
	ms := messages(t, f, 0)
	if roles(ms) != "system,user" || ms[1]["content"] != "How is revenue?" {
		t.Errorf("messages = %v", ms)
	}
	l := logs.String()
	for _, want := range []string{"llmagent: model usage", "prompt_tokens=10", "completion_tokens=5", "total_tokens=15", "finish_reason=stop", "model=fake-model"} {
		if !strings.Contains(l, want) {
			t.Errorf("log lacks %q:\n%s", want, l)
		}
	}
	if !strings.Contains(l, "llmagent: turn usage") || !strings.Contains(l, "model_calls=1 tool_calls=0 prompt_tokens=10 completion_tokens=5") {
		t.Errorf("no turn usage record:\n%s", l)
	}
	if strings.Contains(l, testKey) || strings.Contains(l, "revenue") {
		t.Errorf("log holds the key or the prompt:\n%s", l)
	}
}

func TestToolCallArgumentsSplitAcrossChunks(t *testing.T) {
	f := newFake(t,
		reply{chunks: []string{role(),
			toolStart(0, "call_abc", "svcSqlApi", ""),
			toolArgs(0, `{"sqlQuery":"SELECT `),
			toolArgs(0, `1","queryTitle":`),
			toolArgs(0, `"One"}`),
			finish("tool_calls"), usage(20, 9)}},
		say("The answer is 1."))
	sql := &fakeTool{name: "svcSqlApi", result: map[string]any{"data": [][]any{{1}}, "totalRows": 1, "note": "<b>&"}}
	a, _ := newAgent(t, f, []llmagent.Tool{sql})
	rec, err := answer(t, a, chatstream.Turn{})
	if err != nil {
		t.Fatal(err)
	}
	ev := rec.Events()
	if len(ev) != 2 || ev[0].Kind != chatstreamtest.KindTool || ev[1].Kind != chatstreamtest.KindContent {
		t.Fatalf("events = %+v", ev)
	}
	wantIn := `{"sqlQuery":"SELECT 1","queryTitle":"One"}`
	if ev[0].Name != "svcSqlApi" || ev[0].Input != wantIn {
		t.Errorf("tool call = %s %s", ev[0].Name, ev[0].Input)
	}
	if got := sql.called(); len(got) != 1 || got[0] != wantIn {
		t.Errorf("tool got %q", got)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(ev[0].Result), &res); err != nil || res["totalRows"] != 1.0 {
		t.Errorf("result = %s", ev[0].Result)
	}
	ms := messages(t, f, 1)
	if roles(ms) != "system,user,assistant,tool" {
		t.Fatalf("second request roles = %s", roles(ms))
	}
	tc := ms[2]["tool_calls"].([]any)[0].(map[string]any)
	fn := tc["function"].(map[string]any)
	if tc["id"] != "call_abc" || fn["name"] != "svcSqlApi" || fn["arguments"] != wantIn {
		t.Errorf("assistant tool call = %v", tc)
	}
	if ms[3]["tool_call_id"] != "call_abc" || ms[3]["content"] != `{"data":[[1]],"note":"<b>&","totalRows":1}` {
		t.Errorf("tool message = %v", ms[3])
	}
}

// TestThoughtSignatureSentBack: a tool call's "extra_content", where
// Gemini's OpenAI-compatible API puts the thought signature it requires
// back with the call, returns with the call in the turn's next request;
// a call without one gets none.
func TestThoughtSignatureSentBack(t *testing.T) {
	signed := chunk(map[string]any{"tool_calls": []any{map[string]any{
		"index": 0, "id": "call_a", "type": "function", "function": map[string]any{"name": "svcMeta", "arguments": `{"q":"orders"}`},
		"extra_content": map[string]any{"google": map[string]any{"thought_signature": "c2lnLUE="}},
	}}}, nil)
	f := newFake(t,
		reply{chunks: []string{role(), signed, toolStart(1, "call_b", "svcMeta", `{"q":"users"}`), finish("tool_calls")}},
		say("Done."))
	meta := &fakeTool{name: "svcMeta", result: map[string]any{"ok": true}}
	a, _ := newAgent(t, f, []llmagent.Tool{meta})
	if _, err := answer(t, a, chatstream.Turn{}); err != nil {
		t.Fatal(err)
	}
	ms := messages(t, f, 1)
	calls := ms[2]["tool_calls"].([]any)
	if len(calls) != 2 {
		t.Fatalf("assistant tool calls = %v", calls)
	}
	first, second := calls[0].(map[string]any), calls[1].(map[string]any)
	sig, _ := first["extra_content"].(map[string]any)["google"].(map[string]any)
	if first["id"] != "call_a" || sig["thought_signature"] != "c2lnLUE=" {
		t.Errorf("first call = %v, want its extra_content back", first)
	}
	if _, ok := second["extra_content"]; ok || second["id"] != "call_b" {
		t.Errorf("second call = %v, want no extra_content", second)
	}
}

// TestThoughtSignatureTooLong: an extra_content over the bound is not
// sent back, and the agent says so in its log.
func TestThoughtSignatureTooLong(t *testing.T) {
	long := chunk(map[string]any{"tool_calls": []any{map[string]any{
		"index": 0, "id": "call_a", "type": "function", "function": map[string]any{"name": "svcMeta", "arguments": `{}`},
		"extra_content": map[string]any{"google": map[string]any{"thought_signature": strings.Repeat("A", 70<<10)}},
	}}}, nil)
	f := newFake(t, reply{chunks: []string{role(), long, finish("tool_calls")}}, say("Done."))
	a, logs := newAgent(t, f, []llmagent.Tool{&fakeTool{name: "svcMeta", result: map[string]any{"ok": true}}})
	if _, err := answer(t, a, chatstream.Turn{}); err != nil {
		t.Fatal(err)
	}
	call := messages(t, f, 1)[2]["tool_calls"].([]any)[0].(map[string]any)
	if _, ok := call["extra_content"]; ok {
		t.Error("an extra_content over the bound sent back")
	}
	if !strings.Contains(logs.String(), "extra_content is longer than 64 KiB") {
		t.Errorf("log = %s", logs.String())
	}
}

func TestSeveralToolCallsInOneResponse(t *testing.T) {
	f := newFake(t,
		reply{chunks: []string{role(),
			toolStart(0, "call_1", "svcMeta", `{"q":`),
			toolStart(1, "call_2", "svcSqlApi", `{"q":"x`),
			toolArgs(0, `"orders"}`),
			toolArgs(1, `"}`),
			toolStart(2, "call_3", "dropTables", `{}`),
			toolStart(3, "call_4", "svcSqlApi", `{"q":`), // never completed: not JSON
			finish("tool_calls")}},
		say("Done."))
	meta := &fakeTool{name: "svcMeta", result: map[string]any{"cubes": []any{}}}
	sql := &fakeTool{name: "svcSqlApi", err: errors.New("only SELECT is allowed")}
	a, _ := newAgent(t, f, []llmagent.Tool{meta, sql})
	rec, err := answer(t, a, chatstream.Turn{})
	if err != nil {
		t.Fatal(err)
	}
	ev := rec.Events()
	// The stream (and the tool's span) names a tool the agent does not
	// have "unknown"; the model is told the name it wrote.
	want := []struct{ name, input, result string }{
		{"svcMeta", `{"q":"orders"}`, `{"cubes":[]}`},
		{"svcSqlApi", `{"q":"x"}`, `{"error":"only SELECT is allowed"}`},
		{"unknown", `{}`, `{"error":"unknown tool; the tools are svcMeta, svcSqlApi"}`},
		{"svcSqlApi", `"{\"q\":"`, `{"error":"the arguments are not valid JSON"}`},
	}
	toModel := []string{want[0].result, want[1].result, `{"error":"unknown tool \"dropTables\"; the tools are svcMeta, svcSqlApi"}`, want[3].result}
	if len(ev) != len(want)+1 {
		t.Fatalf("events = %+v", ev)
	}
	for i, w := range want {
		if ev[i].Name != w.name || ev[i].Input != w.input || ev[i].Result != w.result {
			t.Errorf("call %d = %s %s %s, want %s %s %s", i, ev[i].Name, ev[i].Input, ev[i].Result, w.name, w.input, w.result)
		}
	}
	if len(sql.called()) != 1 {
		t.Errorf("svcSqlApi ran %d times, want 1 (the invalid call is not run)", len(sql.called()))
	}
	ms := messages(t, f, 1)
	if roles(ms) != "system,user,assistant,tool,tool,tool,tool" {
		t.Fatalf("roles = %s", roles(ms))
	}
	if n := len(ms[2]["tool_calls"].([]any)); n != 4 {
		t.Errorf("assistant message has %d tool calls", n)
	}
	for i, id := range []string{"call_1", "call_2", "call_3", "call_4"} {
		if ms[3+i]["tool_call_id"] != id || ms[3+i]["content"] != toModel[i] {
			t.Errorf("tool message %d = %v", i, ms[3+i])
		}
	}
	// The call whose arguments are not JSON goes back with {} (endpoints
	// that parse the arguments of the calls they are sent refuse it).
	if fn := ms[2]["tool_calls"].([]any)[3].(map[string]any)["function"].(map[string]any); fn["arguments"] != "{}" || fn["name"] != "svcSqlApi" {
		t.Errorf("the invalid call sent back as %v", fn)
	}
}

// TestOverlongToolNameRunsNothing: a call whose name grows past 64
// characters over its chunks is an unknown tool, never the tool its first
// piece named.
func TestOverlongToolNameRunsNothing(t *testing.T) {
	f := newFake(t,
		reply{chunks: []string{role(),
			toolStart(0, "c1", "svcSqlApi", `{"q":`),
			toolStart(0, "c1", strings.Repeat("x", 60), `"SELECT 1"}`),
			finish("tool_calls")}},
		say("Done."))
	sql := &fakeTool{name: "svcSqlApi", result: 1}
	a, _ := newAgent(t, f, []llmagent.Tool{sql})
	rec, err := answer(t, a, chatstream.Turn{})
	if err != nil {
		t.Fatal(err)
	}
	if ev := rec.Events(); len(ev) < 1 || ev[0].Name != "unknown" {
		t.Errorf("events = %+v", ev)
	}
	if n := len(sql.called()); n != 0 {
		t.Errorf("svcSqlApi ran %d times", n)
	}
}

func TestReasoningBecomesThinking(t *testing.T) {
	f := newFake(t, reply{chunks: []string{role(),
		reasoning("reasoning_content", "Think A. "),
		reasoning("reasoning", "Think B."),
		text("Answer."), finish("stop")}})
	a, _ := newAgent(t, f, nil)
	rec, err := answer(t, a, chatstream.Turn{})
	if err != nil {
		t.Fatal(err)
	}
	ev := rec.Events()
	if len(ev) != 3 || ev[0].Kind != chatstreamtest.KindThinking || ev[0].Text != "Think A. " ||
		ev[1].Kind != chatstreamtest.KindThinking || ev[1].Text != "Think B." || ev[2].Text != "Answer." {
		t.Errorf("events = %+v", ev)
	}
	if _, ok := f.reqs()[0].Body["tools"]; ok {
		t.Error("tools sent by an agent without tools")
	}
}

// TestContentParts: Mistral's reasoning models stream content as a list
// of parts, which the SDK hands over as raw JSON: the text parts are the
// answer, the thinking parts thinking (shown only in development mode),
// anything else dropped; none is shown as JSON.
func TestContentParts(t *testing.T) {
	parts := func(p ...any) string { return chunk(map[string]any{"content": p}, nil) }
	f := newFake(t, reply{chunks: []string{role(),
		parts(map[string]any{"type": "thinking", "thinking": []any{map[string]any{"type": "text", "text": "Plan: "}, map[string]any{"type": "other", "text": "x"}}}),
		parts(map[string]any{"type": "thinking", "thinking": []any{map[string]any{"type": "text", "text": "read the filter."}}}),
		parts(map[string]any{"type": "text", "text": "Revenue "}, map[string]any{"type": "image_url", "image_url": "http://x"}),
		parts(map[string]any{"type": "text", "text": "is 42."}),
		chunk(map[string]any{"content": map[string]any{"type": "text", "text": "an object"}, "refusal": []any{"a list"}}, nil),
		finish("stop")}})
	a, _ := newAgent(t, f, nil)
	rec, err := answer(t, a, chatstream.Turn{})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Text() != "Revenue is 42." {
		t.Errorf("content %q, want the text parts only", rec.Text())
	}
	var thinking string
	for _, e := range rec.Events() {
		if e.Kind == chatstreamtest.KindThinking {
			thinking += e.Text
		}
	}
	if thinking != "Plan: read the filter." {
		t.Errorf("thinking %q", thinking)
	}
	// And what goes back to the model as history is the text.
	f.reset(say("ok"))
	if _, err := answer(t, a, chatstream.Turn{Input: "again", History: []chatstream.Message{
		{ID: "u1", Role: "user", Content: "q", Sort: 1}, {ID: "a1", Role: "assistant", Content: rec.Text(), Sort: 2}}}); err != nil {
		t.Fatal(err)
	}
}

func TestFinishReasons(t *testing.T) {
	for _, tc := range []struct {
		reason, want string
	}{
		{"stop", "Hi"},
		{"length", "Hi\n\n[The answer was cut off at the output limit.]"},
		{"content_filter", "Hi\n\n[Part of the answer was withheld by the model's content filter.]"},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			f := newFake(t, reply{chunks: []string{role(), text("Hi"), finish(tc.reason)}})
			a, _ := newAgent(t, f, nil)
			rec, err := answer(t, a, chatstream.Turn{})
			if err != nil || rec.Text() != tc.want {
				t.Errorf("got %q, %v; want %q", rec.Text(), err, tc.want)
			}
		})
	}
	t.Run("length without text", func(t *testing.T) {
		f := newFake(t, reply{chunks: []string{role(), finish("length")}})
		a, _ := newAgent(t, f, nil)
		rec, err := answer(t, a, chatstream.Turn{})
		if err != nil || rec.Text() != "[The answer was cut off at the output limit.]" {
			t.Errorf("got %q, %v", rec.Text(), err)
		}
	})
	t.Run("length in a tool round", func(t *testing.T) {
		// The arguments were cut: the tool is not run, the model hears why
		// and answers in the next round; no note.
		f := newFake(t, reply{chunks: []string{toolStart(0, "c", "t", `{"q":"ab`), finish("length")}}, say("Sorry."))
		tool := &fakeTool{name: "t"}
		a, _ := newAgent(t, f, []llmagent.Tool{tool})
		rec, err := answer(t, a, chatstream.Turn{})
		if err != nil || rec.Text() != "Sorry." || len(tool.called()) != 0 {
			t.Errorf("got %q, %v, tool ran %d times", rec.Text(), err, len(tool.called()))
		}
	})
	t.Run("empty answer", func(t *testing.T) {
		f := newFake(t, reply{chunks: []string{role(), finish("stop")}})
		a, _ := newAgent(t, f, nil)
		rec, err := answer(t, a, chatstream.Turn{})
		if err != nil || rec.Text() != "The model gave no answer." {
			t.Errorf("got %q, %v", rec.Text(), err)
		}
	})
}

func TestErrorStatuses(t *testing.T) {
	errBody := `{"error":{"message":"Incorrect API key provided: sk-test-***","type":"invalid_request_error","code":"invalid_api_key","param":null}}`
	for _, tc := range []struct {
		name     string
		replies  []reply
		requests int
		ok       bool
		logHas   string
	}{
		{"400 is not retried", []reply{{status: 400, body: errBody}}, 1, false, "code=invalid_api_key"},
		{"401 is not retried", []reply{{status: 401, body: errBody}}, 1, false, "401 Unauthorized"},
		{"429 then success", []reply{{status: 429, body: `{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}`, header: map[string]string{"Retry-After": "0"}}, say("ok")}, 2, true, "429 Too Many Requests"},
		{"429 with a long Retry-After fails at once", []reply{{status: 429, body: `{}`, header: map[string]string{"Retry-After": "60"}}, say("ok")}, 1, false, "429"},
		{"429 with a Retry-After past time.Duration fails at once", []reply{{status: 429, body: `{}`, header: map[string]string{"Retry-After": "1e300"}}, say("ok")}, 1, false, "429"},
		{"429 with an infinite Retry-After fails at once", []reply{{status: 429, body: `{}`, header: map[string]string{"Retry-After": "Inf"}}, say("ok")}, 1, false, "429"},
		{"429 with a long retry-after-ms fails at once", []reply{{status: 429, body: `{}`, header: map[string]string{"retry-after-ms": "20000"}}, say("ok")}, 1, false, "429"},
		{"503 with a short retry-after-ms", []reply{{status: 503, body: `{}`, header: map[string]string{"retry-after-ms": "5", "Retry-After": "60"}}, say("ok")}, 2, true, "503"},
		{"500 then success", []reply{{status: 500, body: `{"error":{"message":"boom"}}`}, say("ok")}, 2, true, "500 Internal Server Error"},
		{"500 twice: one retry in total", []reply{{status: 500, body: `{}`}, {status: 500, body: `{}`}, say("never")}, 2, false, "500"},
		{"503 with a non-JSON body", []reply{{status: 503, body: `<html>down</html>`}, {status: 502, body: ``}, say("never")}, 2, false, "502"},
		{"error event in the stream", []reply{{chunks: []string{`{"error":{"message":"overloaded: Incorrect API key provided: sk-test-***","type":"server_error"}}`}}, say("ok")}, 2, true, "sent an error event"},
		// Gateways answer {"error": "..."}: the status still decides, and
		// their text is not logged.
		{"401 with a string error is not retried", []reply{{status: 401, body: `{"error":"Unauthorized: sk-test-***"}`}, say("never")}, 1, false, "401 Unauthorized"},
		{"404 with a string error is not retried", []reply{{status: 404, body: `{"error":"model not found"}`}, say("never")}, 1, false, "404 Not Found"},
		{"429 with a string error and a long Retry-After fails at once", []reply{{status: 429, body: `{"error":"rate limited"}`, header: map[string]string{"Retry-After": "60"}}, say("ok")}, 1, false, "429"},
		{"500 with a body past the cap", []reply{{status: 500, body: strings.Repeat("x", 8<<20)}, say("ok")}, 2, true, "500 Internal Server Error"},
		// The body's type and code are cut, as an error event's are: they
		// are the endpoint's, and may echo what the request held.
		{"401 with a long type and code", []reply{{status: 401, body: `{"error":{"message":"m","type":"` + strings.Repeat("T", 20000) + `","code":"` + strings.Repeat("C", 64) + ` ` + testKey + `"}}`}}, 1, false, "type=" + strings.Repeat("T", 64) + "… code=" + strings.Repeat("C", 64) + "…"},
		// An endpoint that echoes the key in a short type or code: masked.
		{"401 echoing the key as its type", []reply{{status: 401, body: `{"error":{"message":"m","type":"` + testKey + `","code":"x"}}`}}, 1, false, "type=xxxxx code=x"},
		{"error event echoing the key as its code", []reply{{chunks: []string{`{"error":{"message":"` + testKey + `","type":"t","code":"` + testKey + `"}}`}}, {chunks: []string{`{"error":{"message":"m","type":"t","code":"` + testKey + `"}}`}}}, 2, false, `code \"xxxxx\"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, tc.replies...)
			a, logs := newAgent(t, f, nil)
			rec, err := answer(t, a, chatstream.Turn{})
			if got := len(f.reqs()); got != tc.requests {
				t.Errorf("%d requests, want %d", got, tc.requests)
			}
			if tc.ok {
				if err != nil || rec.Text() != "ok" {
					t.Errorf("got %q, %v", rec.Text(), err)
				}
			} else if err == nil {
				t.Errorf("no error; content %q", rec.Text())
			}
			l := logs.String()
			if len(l) > 4096 {
				t.Errorf("log of %d bytes", len(l))
			}
			if !strings.Contains(l, tc.logHas) {
				t.Errorf("log lacks %q:\n%s", tc.logHas, l)
			}
			for _, s := range []string{testKey, "sk-test-***"} {
				if strings.Contains(l, s) || (err != nil && strings.Contains(err.Error(), s)) {
					t.Errorf("%q leaked: %v\n%s", s, err, l)
				}
			}
		})
	}
}

func TestOneRetryPerTurn(t *testing.T) {
	// Round 1 fails once and succeeds with a tool call; round 2 fails: the
	// turn's retry is used, so the turn ends.
	f := newFake(t,
		reply{status: 500, body: `{}`},
		reply{chunks: []string{toolStart(0, "c1", "t", `{}`), finish("tool_calls")}},
		reply{status: 500, body: `{}`},
		say("never"))
	a, _ := newAgent(t, f, []llmagent.Tool{&fakeTool{name: "t", result: 1}})
	_, err := answer(t, a, chatstream.Turn{})
	if err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("err = %v", err)
	}
	if n := len(f.reqs()); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
}

func TestStreamCut(t *testing.T) {
	t.Run("after text: no retry", func(t *testing.T) {
		f := newFake(t, reply{chunks: []string{role(), text("Revenue was ")}, cut: true}, say("never"))
		a, _ := newAgent(t, f, nil)
		rec, err := answer(t, a, chatstream.Turn{})
		if err == nil {
			t.Fatal("no error")
		}
		if rec.Text() != "Revenue was " || len(f.reqs()) != 1 {
			t.Errorf("content %q after %d requests", rec.Text(), len(f.reqs()))
		}
	})
	t.Run("before text: retried", func(t *testing.T) {
		f := newFake(t, reply{chunks: []string{role(), toolStart(0, "c", "t", `{"q":`)}, cut: true}, say("ok"))
		a, _ := newAgent(t, f, []llmagent.Tool{&fakeTool{name: "t"}})
		rec, err := answer(t, a, chatstream.Turn{})
		if err != nil || rec.Text() != "ok" || len(f.reqs()) != 2 {
			t.Errorf("got %q, %v after %d requests", rec.Text(), err, len(f.reqs()))
		}
		if ev := rec.Events(); len(ev) != 1 {
			t.Errorf("events = %+v (the half tool call must not show)", ev)
		}
	})
	t.Run("clean end without finish_reason", func(t *testing.T) {
		f := newFake(t, reply{chunks: []string{role(), text("partial")}, noDone: true}, say("never"))
		a, _ := newAgent(t, f, nil)
		_, err := answer(t, a, chatstream.Turn{})
		if err == nil || !strings.Contains(err.Error(), "without a finish reason") || len(f.reqs()) != 1 {
			t.Errorf("err = %v after %d requests", err, len(f.reqs()))
		}
	})
}

func TestSlowStream(t *testing.T) {
	f := newFake(t, reply{chunks: []string{role(), text("slow "), text("but "), text("steady"), finish("stop")}, delay: 30 * time.Millisecond})
	a, _ := newAgent(t, f, nil, llmagent.WithIdleTimeout(5*time.Second))
	rec, err := answer(t, a, chatstream.Turn{})
	if err != nil || rec.Text() != "slow but steady" {
		t.Errorf("got %q, %v", rec.Text(), err)
	}
}

func TestSilentStreamTimesOut(t *testing.T) {
	f := newFake(t, reply{chunks: []string{role()}, hang: true})
	a, logs := newAgent(t, f, nil, llmagent.WithIdleTimeout(100*time.Millisecond))
	_, err := answer(t, a, chatstream.Turn{})
	if err == nil || !strings.Contains(err.Error(), "silent") {
		t.Errorf("err = %v", err)
	}
	// Two attempts, both given up as silent. (On a loaded machine the
	// timeout may fire before a request reaches the fake, so count the
	// attempts in the log.)
	l := logs.String()
	if strings.Count(l, "model request failed") != 2 || !strings.Contains(l, "attempt=2") || strings.Count(l, "silent") != 2 {
		t.Errorf("log = %s", l)
	}
	// Every request the fake got was cancelled.
	for range f.reqs() {
		<-f.cancelled
	}
}

// TestKeepAliveIsNotSilence: an endpoint that keeps a slow stream open
// with SSE comments, as some do while a model thinks, is not silent,
// though no event comes for longer than the idle timeout.
func TestKeepAliveIsNotSilence(t *testing.T) {
	chunks := []string{role()}
	for range 12 {
		chunks = append(chunks, ": keep-alive")
	}
	f := newFake(t, reply{chunks: append(chunks, text("thought it over"), finish("stop")), delay: 50 * time.Millisecond})
	a, _ := newAgent(t, f, nil, llmagent.WithIdleTimeout(300*time.Millisecond))
	rec, err := answer(t, a, chatstream.Turn{})
	if err != nil || rec.Text() != "thought it over" || len(f.reqs()) != 1 {
		t.Errorf("got %q, %v after %d requests", rec.Text(), err, len(f.reqs()))
	}
}

func TestAbortCancelsTheRequest(t *testing.T) {
	f := newFake(t, reply{chunks: []string{role(), text("first")}, hang: true})
	a, _ := newAgent(t, f, nil)
	ctx, cancel := context.WithCancelCause(context.Background())
	rec := &contentSignal{got: make(chan struct{}, 1)}
	done := make(chan error, 1)
	go func() { done <- a.Answer(ctx, chatstream.Turn{Input: "hi"}, rec) }()
	<-rec.got
	abort := errors.New("aborted by the user")
	cancel(abort)
	<-f.cancelled
	if err := <-done; !errors.Is(err, abort) {
		t.Errorf("Answer returned %v, want the abort cause", err)
	}
	if n := len(f.reqs()); n != 1 {
		t.Errorf("%d requests after abort, want 1", n)
	}
}

// contentSignal is a Recorder that signals the first content piece.
type contentSignal struct {
	chatstreamtest.Recorder
	got chan struct{}
}

func (c *contentSignal) Content(p string) error {
	select {
	case c.got <- struct{}{}:
	default:
	}
	return c.Recorder.Content(p)
}

func TestAtMostEightToolRounds(t *testing.T) {
	f := newFake(t, reply{chunks: []string{toolStart(0, "c", "t", `{}`), finish("tool_calls")}})
	tool := &fakeTool{name: "t", result: "more"}
	a, _ := newAgent(t, f, []llmagent.Tool{tool})
	rec, err := answer(t, a, chatstream.Turn{})
	if err != nil {
		t.Fatal(err)
	}
	reqs := f.reqs()
	if len(reqs) != llmagent.MaxToolRounds+1 {
		t.Fatalf("%d requests, want %d", len(reqs), llmagent.MaxToolRounds+1)
	}
	if n := len(tool.called()); n != llmagent.MaxToolRounds {
		t.Errorf("tool ran %d times", n)
	}
	for i, r := range reqs {
		tc, has := r.Body["tool_choice"]
		if last := i == len(reqs)-1; last != has || (last && tc != "none") {
			t.Errorf("request %d: tool_choice = %v", i+1, tc)
		}
	}
	if want := fmt.Sprintf("I could not finish the analysis within %d rounds of tool calls.", llmagent.MaxToolRounds); rec.Text() != want {
		t.Errorf("text = %q", rec.Text())
	}
}

func TestLastRoundAnswersWithoutTools(t *testing.T) {
	round := reply{chunks: []string{text("Checking. "), toolStart(0, "c", "t", `{}`), finish("tool_calls")}}
	var replies []reply
	for range llmagent.MaxToolRounds {
		replies = append(replies, round)
	}
	f := newFake(t, append(replies, say("Best effort."))...)
	a, _ := newAgent(t, f, []llmagent.Tool{&fakeTool{name: "t", result: 1}})
	rec, err := answer(t, a, chatstream.Turn{})
	if want := strings.Repeat("Checking. ", llmagent.MaxToolRounds) + "Best effort."; err != nil || rec.Text() != want {
		t.Errorf("got %q, %v", rec.Text(), err)
	}
}

func TestHistoryBecomesModelMessages(t *testing.T) {
	f := newFake(t, say("Again 42."))
	a, _ := newAgent(t, f, []llmagent.Tool{&fakeTool{name: "svcSqlApi"}})
	result := `{"data":[[42]]}`
	yes := false
	thinking := "secret reasoning"
	hist := []chatstream.Message{
		{ID: "u1", Role: "user", Content: "How many orders?", Sort: 1},
		{ID: "t1", Role: "assistant", ToolCall: &chatstream.ToolInfo{Name: "svcSqlApi", Input: `{"sqlQuery":"SELECT 42"}`, Result: &result}, GraphPath: []string{"agent", "tools"}, Sort: 4},
		{ID: "a1", Role: "assistant", Content: "42 orders.", Thinking: &thinking, GraphPath: []string{"final", "agent"}, IsStructuredResponse: &yes, Sort: 6},
	}
	if _, err := answer(t, a, chatstream.Turn{Input: "And now?", History: hist}); err != nil {
		t.Fatal(err)
	}
	ms := messages(t, f, 0)
	if roles(ms) != "system,user,assistant,tool,assistant,user" {
		t.Fatalf("roles = %s", roles(ms))
	}
	call := ms[2]["tool_calls"].([]any)[0].(map[string]any)
	if fn := call["function"].(map[string]any); fn["name"] != "svcSqlApi" || fn["arguments"] != `{"sqlQuery":"SELECT 42"}` {
		t.Errorf("call = %v", call)
	}
	// The only form of id Mistral's API accepts (400 "Tool call id was …
	// but must be a-z, A-Z, 0-9, with a length of 9" otherwise, and every
	// later turn of the thread failed), and every other endpoint accepts.
	if id, _ := call["id"].(string); !regexp.MustCompile(`^[a-zA-Z0-9]{9}$`).MatchString(id) {
		t.Errorf("the history's call id %q is not 9 letters and digits", id)
	}
	if ms[3]["tool_call_id"] != call["id"] || ms[3]["content"] != result {
		t.Errorf("tool message = %v", ms[3])
	}
	if ms[1]["content"] != "How many orders?" || ms[4]["content"] != "42 orders." || ms[5]["content"] != "And now?" {
		t.Errorf("messages = %v", ms)
	}
	if b, _ := json.Marshal(ms); strings.Contains(string(b), thinking) {
		t.Error("thinking sent to the model")
	}
}

func TestHistoryTrimmedToBudget(t *testing.T) {
	f := newFake(t, say("ok"))
	a, _ := newAgent(t, f, nil, llmagent.WithContextBudget(1000), llmagent.WithSystemPrompt(func(chatstream.Turn) string { return "sys" }))
	var hist []chatstream.Message
	for i := range 10 {
		// About 250 tokens per exchange: the budget holds the newest three.
		hist = append(hist,
			chatstream.Message{ID: fmt.Sprint("u", i), Role: "user", Content: fmt.Sprintf("question %d %s", i, strings.Repeat("x", 480)), Sort: int64(2*i + 1)},
			chatstream.Message{ID: fmt.Sprint("a", i), Role: "assistant", Content: fmt.Sprintf("answer %d %s", i, strings.Repeat("y", 480)), Sort: int64(2*i + 2)})
	}
	if _, err := answer(t, a, chatstream.Turn{Input: "latest", History: hist}); err != nil {
		t.Fatal(err)
	}
	ms := messages(t, f, 0)
	if ms[0]["content"] != "sys" || ms[len(ms)-1]["content"] != "latest" {
		t.Fatalf("first/last = %v / %v", ms[0], ms[len(ms)-1])
	}
	kept := ms[1 : len(ms)-1]
	if len(kept) != 6 {
		t.Fatalf("kept %d history messages, want 6: %s", len(kept), roles(ms))
	}
	if c := kept[0]["content"].(string); !strings.HasPrefix(c, "question 7 ") {
		t.Errorf("oldest kept = %.20s, want question 7", c)
	}
}

func TestBigToolResultsLeftOutToFitBudget(t *testing.T) {
	f := newFake(t,
		reply{chunks: []string{toolStart(0, "c1", "t", `{}`), finish("tool_calls")}},
		reply{chunks: []string{toolStart(0, "c2", "t", `{}`), finish("tool_calls")}},
		say("ok"))
	big := strings.Repeat("z", 3000) // about 750 tokens
	a, _ := newAgent(t, f, []llmagent.Tool{&fakeTool{name: "t", result: big}}, llmagent.WithContextBudget(1200),
		llmagent.WithSystemPrompt(func(chatstream.Turn) string { return "sys" }))
	if _, err := answer(t, a, chatstream.Turn{}); err != nil {
		t.Fatal(err)
	}
	ms := messages(t, f, 2)
	if roles(ms) != "system,user,assistant,tool,assistant,tool" {
		t.Fatalf("roles = %s", roles(ms))
	}
	if c := ms[3]["content"].(string); !strings.Contains(c, "left out to fit the context budget") {
		t.Errorf("older result kept: %.40s", c)
	}
	if c := ms[5]["content"].(string); c != `"`+big+`"` {
		t.Errorf("newest result replaced: %.40s", c)
	}
}

func TestToolGetsTheTurn(t *testing.T) {
	f := newFake(t, reply{chunks: []string{toolStart(0, "c1", "t", `{}`), finish("tool_calls")}}, say("ok"))
	tool := &fakeTool{name: "t", result: 1}
	a, _ := newAgent(t, f, []llmagent.Tool{tool})
	u := chatstream.User{ExternalID: "jane", Attributes: map[string]any{"country": "France"}}
	if _, err := answer(t, a, chatstream.Turn{User: u, ActiveBranchName: "dev-1"}); err != nil {
		t.Fatal(err)
	}
	if tu := tool.turns[0]; tu.User.ExternalID != "jane" || tu.ActiveBranchName != "dev-1" {
		t.Errorf("tool got turn %+v", tu)
	}
	if sys := messages(t, f, 0)[0]["content"].(string); strings.Contains(sys, "France") || strings.Contains(sys, "jane") {
		t.Errorf("default system prompt names the user's attributes: %s", sys)
	}
	for _, want := range []string{llmagent.Guidelines, "Today is ", "external user", `development branch "dev-1"`} {
		if sys := messages(t, f, 0)[0]["content"].(string); !strings.Contains(sys, want) {
			t.Errorf("default system prompt lacks %q: %s", want, sys)
		}
	}
}

// TestInvalidOptionsPanic checks that every invalid option value panics,
// when its With function is called, and every invalid argument of New
// when New is called, with a message naming the package, the function and
// the value (without a URL's password or query).
func TestInvalidOptionsPanic(t *testing.T) {
	const base = "http://127.0.0.1:1/v1"
	tool := &fakeTool{name: "t"}
	optiontest.Panics(t, map[string]func(){
		`llmagent: WithAPIKey: key must not be empty, got "" (leave the option out to send none)`:                             func() { llmagent.WithAPIKey("") },
		"llmagent: WithHTTPClient: client must not be nil, got nil":                                                           func() { llmagent.WithHTTPClient(nil) },
		"llmagent: WithRequestOptions: options must not be nil, got nil at index 1":                                           func() { llmagent.WithRequestOptions(option.WithHeader("X-A", "b"), nil) },
		"llmagent: WithMaxOutputTokens: count must be positive, got 0":                                                        func() { llmagent.WithMaxOutputTokens(0) },
		"llmagent: WithContextBudget: budget must be at least 1000 tokens, got 10":                                            func() { llmagent.WithContextBudget(10) },
		"llmagent: WithRetryDelay: duration must not be negative, got -1ms":                                                   func() { llmagent.WithRetryDelay(-time.Millisecond) },
		"llmagent: WithIdleTimeout: duration must be positive, got 0s":                                                        func() { llmagent.WithIdleTimeout(0) },
		"llmagent: WithSystemPrompt: prompt function must not be nil, got nil (leave the option out for DefaultSystemPrompt)": func() { llmagent.WithSystemPrompt(nil) },
		"llmagent: WithLogger: logger must not be nil, got nil (leave the option out for slog.Default())":                     func() { llmagent.WithLogger(nil) },
		`llmagent: New: base URL must be an absolute http or https URL, got ""`:                                               func() { llmagent.New("", "m", nil) },
		`llmagent: New: base URL must be an absolute http or https URL, got "/v1"`:                                            func() { llmagent.New("/v1", "m", nil) },
		`llmagent: New: base URL must be an absolute http or https URL, got "ftp://u:xxxxx@x/v1?..."`:                         func() { llmagent.New("ftp://u:secret@x/v1?api-key=secret", "m", nil) },
		`llmagent: New: base URL must be an absolute http or https URL, got one that does not parse`:                          func() { llmagent.New("http://x/%zz", "m", nil) },
		`llmagent: New: model must not be empty, got " "`:                                                                     func() { llmagent.New(base, " ", nil) },
		"llmagent: New: tools must not be nil, got nil at index 0":                                                            func() { llmagent.New(base, "m", []llmagent.Tool{nil}) },
		`llmagent: New: tool name must be 1 to 64 characters of a-z A-Z 0-9 _ -, got "a b"`:                                   func() { llmagent.New(base, "m", []llmagent.Tool{&fakeTool{name: "a b"}}) },
		`llmagent: New: tool names must be unique, got "t" twice`:                                                             func() { llmagent.New(base, "m", []llmagent.Tool{tool, tool}) },
	})
	if err := llmagent.CheckBaseURL(base); err != nil {
		t.Errorf("CheckBaseURL(%q): %v", base, err)
	}
	// The parser's reason would quote the password ("invalid port").
	if err := llmagent.CheckBaseURL("http://tok:Prefix-Secret#rest@127.0.0.1:1/v1"); err == nil || strings.Contains(err.Error(), "Secret") {
		t.Errorf("CheckBaseURL of a URL that does not parse: %v, want an error without the password", err)
	}
}

func TestNoKeyNoAuthorizationAndNoEnvironment(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
	f := newFake(t, say("ok"))
	a := llmagent.New(f.url(), "m", nil, llmagent.WithLogger(slog.New(slog.DiscardHandler)))
	if _, err := answer(t, a, chatstream.Turn{}); err != nil {
		t.Fatal(err)
	}
	if h := f.reqs()[0].Header.Get("Authorization"); h != "" {
		t.Errorf("Authorization = %q, want none", h)
	}
}

// FuzzStreamedToolCall streams arbitrary text and an arbitrary tool call
// (name and arguments) from the model: the turn completes, the tool-call
// message's input and result are JSON, and the tool runs only with valid
// JSON arguments.
func FuzzStreamedToolCall(f *testing.F) {
	f.Add("t", `{"q":"x"}`, "Hi")
	f.Add("", `{"q":`, "")
	f.Add("a b", "\xff\"", "<b>&</b>")
	f.Add("t", `  [1, 2]  `, "\u2028")
	fake := newFake(f, say("x"))
	tool := &fakeTool{name: "t", result: map[string]string{"ok": "<yes>"}}
	a, _ := newAgent(f, fake, []llmagent.Tool{tool})
	f.Fuzz(func(t *testing.T, name, args, content string) {
		fake.reset(reply{chunks: []string{text(content), toolStart(0, "c", name, args), finish("tool_calls")}}, say("done"))
		rec, err := answer(t, a, chatstream.Turn{})
		if err != nil {
			t.Fatal(err)
		}
		var call *chatstreamtest.Recorded
		for _, e := range rec.Events() {
			if e.Kind == chatstreamtest.KindTool {
				call = &e
			}
		}
		if call == nil {
			t.Fatalf("no tool call: %+v", rec.Events())
		}
		if !json.Valid([]byte(call.Input)) || !json.Valid([]byte(call.Result)) {
			t.Errorf("input %q, result %q", call.Input, call.Result)
		}
		ran := strings.Contains(call.Result, "yes")
		if want := name == "t" && (strings.TrimSpace(args) == "" || json.Valid([]byte(args))); ran != want {
			t.Errorf("name %q args %q: tool ran = %v", name, args, ran)
		}
	})
}

func TestRequestOptionsAndHTTPClient(t *testing.T) {
	f := newFake(t, say("ok"))
	var mu sync.Mutex
	used := 0
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		used++
		mu.Unlock()
		return http.DefaultTransport.RoundTrip(r)
	})}
	a, _ := newAgent(t, f, nil, llmagent.WithHTTPClient(hc),
		llmagent.WithRequestOptions(option.WithHeader("X-Tenant", "acme"), option.WithJSONSet("max_tokens", 77),
			option.WithMaxRetries(5), option.WithBaseURL("http://127.0.0.1:9/v1")))
	if _, err := answer(t, a, chatstream.Turn{}); err != nil {
		t.Fatal(err)
	}
	r := f.reqs()[0]
	if r.Header.Get("X-Tenant") != "acme" || r.Body["max_tokens"] != 77.0 {
		t.Errorf("header %q, max_tokens %v", r.Header.Get("X-Tenant"), r.Body["max_tokens"])
	}
	if used != 1 {
		t.Errorf("the HTTP client was used %d times", used)
	}
	// The host's options cannot turn the SDK's retries back on.
	f.reset(reply{status: 500, body: `{}`})
	if _, err := answer(t, a, chatstream.Turn{}); err == nil || len(f.reqs()) != 2 {
		t.Errorf("err %v after %d requests, want 2", err, len(f.reqs()))
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestConcurrentTurns(t *testing.T) {
	f := newFake(t,
		reply{chunks: []string{text("a"), toolStart(0, "c", "t", `{}`), finish("tool_calls")}},
		say("b"))
	// Every request after the first two gets say("b"): turns share the
	// fake, so only check that each turn completes on its own.
	a, _ := newAgent(t, f, []llmagent.Tool{&fakeTool{name: "t", result: 1}})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			rec, err := answer(t, a, chatstream.Turn{})
			if err != nil || !strings.HasSuffix(rec.Text(), "b") {
				t.Errorf("got %q, %v", rec.Text(), err)
			}
		})
	}
	wg.Wait()
}

// TestTransportFailureLogsNoQuery: a host may send the model endpoint's key
// in the query (option.WithQuery("api-key", ...), as some gateways take
// it); a transport failure's log line, and the error Answer returns (which
// the chat handler logs and traces), name the endpoint without it.
func TestTransportFailureLogsNoQuery(t *testing.T) {
	logs := &logbuf.Buffer{}
	a := llmagent.New("http://127.0.0.1:1/v1", "m", nil, llmagent.WithRequestOptions(option.WithQuery("api-key", "query-secret-42")),
		llmagent.WithRetryDelay(time.Millisecond), llmagent.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	_, err := answer(t, a, chatstream.Turn{})
	if err == nil {
		t.Fatal("an unreachable endpoint answered")
	}
	if strings.Contains(err.Error(), "query-secret-42") {
		t.Errorf("the endpoint's query is in the error the handler logs and traces: %v", err)
	}
	l := logs.String()
	if !strings.Contains(l, "model request failed") || !strings.Contains(l, "127.0.0.1:1") {
		t.Fatalf("log = %s", l)
	}
	if strings.Contains(l, "query-secret-42") {
		t.Errorf("the endpoint's query reached the log: %s", l)
	}
}

// runBothTools answers one turn whose model sends chunks (tool calls) then
// "Done.", with svcMeta and svcSqlApi as tools, and returns them.
func runBothTools(t *testing.T, chunks ...string) (meta, sql *fakeTool) {
	t.Helper()
	f := newFake(t,
		reply{chunks: append(append([]string{role()}, chunks...), finish("tool_calls"))},
		say("Done."))
	meta = &fakeTool{name: "svcMeta", result: 1}
	sql = &fakeTool{name: "svcSqlApi", result: 2}
	a, _ := newAgent(t, f, []llmagent.Tool{meta, sql})
	if _, err := answer(t, a, chatstream.Turn{}); err != nil {
		t.Fatal(err)
	}
	return meta, sql
}

// TestParallelCallsSharingAnIndex: endpoints that send every parallel call
// at index 0 (with a new id each) get each call run on its own, not one
// call of a merged name and arguments.
func TestParallelCallsSharingAnIndex(t *testing.T) {
	meta, sql := runBothTools(t,
		toolStart(0, "call_a", "svcMeta", `{"q":"revenue"}`),
		toolStart(0, "call_b", "svcSqlApi", `{"q":"select 1"}`))
	if m, q := meta.called(), sql.called(); len(m) != 1 || m[0] != `{"q":"revenue"}` || len(q) != 1 || q[0] != `{"q":"select 1"}` {
		t.Errorf("svcMeta ran with %v, svcSqlApi with %v; want one call each", m, q)
	}
}

// TestParallelCallsWithoutIDs: endpoints that send every parallel call at
// index 0 and without ids (each whole in its chunk) get each call run on
// its own; a call whose arguments come in pieces, its name repeated, stays
// one call.
func TestParallelCallsWithoutIDs(t *testing.T) {
	noID := func(name, args string) string {
		return chunk(map[string]any{"tool_calls": []any{map[string]any{
			"index": 0, "type": "function", "function": map[string]any{"name": name, "arguments": args},
		}}}, nil)
	}
	meta, sql := runBothTools(t,
		noID("svcMeta", `{"q":"revenue"}`),
		noID("svcSqlApi", `{"q":`), noID("svcSqlApi", `"select 1"}`),
		noID("svcMeta", `{"q":"orders"}`))
	if m, q := meta.called(), sql.called(); len(m) != 2 || m[0] != `{"q":"revenue"}` || m[1] != `{"q":"orders"}` || len(q) != 1 || q[0] != `{"q":"select 1"}` {
		t.Errorf("svcMeta ran with %v, svcSqlApi with %v; want two calls and one", m, q)
	}
}

// TestCallsLastChunkRepeatsItsName: endpoints that repeat a call's name,
// with empty or null arguments and no id, in its last chunk (or in every
// chunk) get the call run once.
func TestCallsLastChunkRepeatsItsName(t *testing.T) {
	call := func(id, name any, args any) string {
		tc := map[string]any{"index": 0, "type": "function", "function": map[string]any{"name": name, "arguments": args}}
		if id != nil {
			tc["id"] = id
		}
		return chunk(map[string]any{"tool_calls": []any{tc}}, nil)
	}
	for name, chunks := range map[string][]string{
		"empty arguments": {call("call_a", "svcMeta", ""), call(nil, nil, `{"q":`), call(nil, nil, `"revenue"}`), call(nil, "svcMeta", "")},
		"null arguments":  {call("call_a", "svcMeta", ""), call(nil, nil, `{"q":"revenue"}`), call(nil, "svcMeta", nil)},
		"name every time": {call(nil, "svcMeta", `{"q":`), call(nil, "svcMeta", `"revenue"}`), call(nil, "svcMeta", "")},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t, reply{chunks: append(append([]string{role()}, chunks...), finish("tool_calls"))}, say("Done."))
			meta := &fakeTool{name: "svcMeta", result: 1}
			a, _ := newAgent(t, f, []llmagent.Tool{meta})
			if _, err := answer(t, a, chatstream.Turn{}); err != nil {
				t.Fatal(err)
			}
			if m := meta.called(); len(m) != 1 || m[0] != `{"q":"revenue"}` {
				t.Errorf("svcMeta ran with %q; want once", m)
			}
		})
	}
}

// TestModelOutputBounded: what the agent reads of the endpoint is bounded:
// tool arguments past 64 KiB are a tool error (the tool does not run, and
// the stream carries at most the bound), and an answer past 16 MiB fails
// the request (retried once, as a broken stream).
func TestModelOutputBounded(t *testing.T) {
	piece := `"` + strings.Repeat("x", 1000) + `",`
	chunks := []string{role(), toolStart(0, "call_1", "svcSqlApi", `{"q":[`)}
	for range 100 {
		chunks = append(chunks, toolArgs(0, piece))
	}
	f := newFake(t, reply{chunks: append(chunks, toolArgs(0, `""]}`), finish("tool_calls"))}, say("Done."))
	sql := &fakeTool{name: "svcSqlApi", result: 1}
	a, _ := newAgent(t, f, []llmagent.Tool{sql})
	rec, err := answer(t, a, chatstream.Turn{})
	if err != nil {
		t.Fatal(err)
	}
	ev := rec.Events()
	if len(sql.called()) != 0 || len(ev) == 0 || ev[0].Result != `{"error":"the arguments are longer than 64 KiB"}` || len(ev[0].Input) > 80<<10 {
		t.Errorf("tool ran %d times; first event %q… (%d bytes of input)", len(sql.called()), ev[0].Result, len(ev[0].Input))
	}

	f = newFake(t, reply{chunks: []string{role(), text(strings.Repeat("y", 17<<20)), finish("stop")}}, say("ok"))
	a, logs := newAgent(t, f, nil)
	rec, err = answer(t, a, chatstream.Turn{})
	if err != nil || rec.Text() != "ok" || len(f.reqs()) != 2 || !strings.Contains(logs.String(), "larger than 16 MiB") {
		t.Errorf("a 17 MiB answer: %q, %v, %d requests; log:\n%s", rec.Text(), err, len(f.reqs()), logs.String())
	}
}

// TestCloseEndsIdleConnections: the agent's own connection pool keeps a
// connection to the endpoint after a turn, with its goroutines; Close ends
// them.
func TestCloseEndsIdleConnections(t *testing.T) {
	f := newFake(t, say("ok"))
	before := runtime.NumGoroutine()
	a, _ := newAgent(t, f, nil)
	if _, err := answer(t, a, chatstream.Turn{}); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after Close, %d before the agent", n, before)
	}
}

// TestCallWhoseIDChanges: endpoints that send another id in the later
// chunks of one call (without a name) make one call, not several.
func TestCallWhoseIDChanges(t *testing.T) {
	argsWithID := func(id, a string) string {
		return chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "id": id, "type": "function", "function": map[string]any{"arguments": a}}}}, nil)
	}
	f := newFake(t, reply{chunks: []string{role(), toolStart(0, "call_a", "svcMeta", `{"q":`), argsWithID("call_x1", `"revenue"`), argsWithID("call_x2", `}`), finish("tool_calls")}}, say("Done."))
	meta := &fakeTool{name: "svcMeta", result: 1}
	a, _ := newAgent(t, f, []llmagent.Tool{meta})
	if _, err := answer(t, a, chatstream.Turn{}); err != nil {
		t.Fatal(err)
	}
	if m := meta.called(); len(m) != 1 || m[0] != `{"q":"revenue"}` {
		t.Errorf("svcMeta ran with %q, want one call", m)
	}
}

// TestToolCallsPerResponseBounded: a response that asks for many tool
// calls (here 40, every one at index 0 with an id of its own) runs the
// first 16; the model is sent those 16 with their results, and the rest
// is logged, not run.
func TestToolCallsPerResponseBounded(t *testing.T) {
	chunks := []string{role()}
	for i := range 40 {
		chunks = append(chunks, toolStart(0, fmt.Sprint("call_", i), "svcMeta", `{"q":"x"}`))
	}
	f := newFake(t, reply{chunks: append(chunks, finish("tool_calls"))}, say("Done."))
	meta := &fakeTool{name: "svcMeta", result: map[string]any{"cubes": []any{}}}
	a, logs := newAgent(t, f, []llmagent.Tool{meta})
	if _, err := answer(t, a, chatstream.Turn{}); err != nil {
		t.Fatal(err)
	}
	if n := len(meta.called()); n != 16 {
		t.Errorf("the tool ran %d times, want 16", n)
	}
	ms := messages(t, f, 1)
	if n := len(ms[2]["tool_calls"].([]any)); n != 16 || roles(ms) != "system,user,assistant"+strings.Repeat(",tool", 16) {
		t.Errorf("the second request holds %d calls, roles %s", n, roles(ms))
	}
	if !strings.Contains(logs.String(), "more tool calls in one response than run") || !strings.Contains(logs.String(), "calls=40") {
		t.Errorf("logs: %s", logs)
	}
}

// TestWrongCallsSentBackValid: calls the model got wrong (arguments cut
// short, no name, an id given twice) go back to the endpoint in a form an
// endpoint that checks them accepts: arguments that are a JSON object,
// a valid function name, an id per call, each answered by its own tool
// message.
func TestWrongCallsSentBackValid(t *testing.T) {
	f := newFake(t,
		reply{chunks: []string{role(),
			toolStart(0, "c1", "svcMeta", `{"q":"rev`), // cut by the output limit
			toolStart(1, "c1", "", `{}`),               // no name, the id again
			toolStart(2, "", "svc Meta!", `[1]`),       // no id, an invalid name, not an object
			toolStart(3, "c00000200", "svcMeta", `{}`), // the id the agent would give the call before
			finish("length")}},
		say("Done."))
	meta := &fakeTool{name: "svcMeta", result: map[string]any{"cubes": []any{}}}
	a, _ := newAgent(t, f, []llmagent.Tool{meta})
	if _, err := answer(t, a, chatstream.Turn{}); err != nil {
		t.Fatal(err)
	}
	ms := messages(t, f, 1)
	calls := ms[2]["tool_calls"].([]any)
	if len(calls) != 4 || roles(ms) != "system,user,assistant,tool,tool,tool,tool" {
		t.Fatalf("calls %v, roles %s", calls, roles(ms))
	}
	ids := map[string]bool{}
	for i, c := range calls {
		c := c.(map[string]any)
		fn := c["function"].(map[string]any)
		id, _ := c["id"].(string)
		name, _ := fn["name"].(string)
		args, _ := fn["arguments"].(string)
		var obj map[string]any
		if id == "" || ids[id] || !regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`).MatchString(name) || json.Unmarshal([]byte(args), &obj) != nil {
			t.Errorf("call %d sent back as %v", i, c)
		}
		if (i == 1 || i == 2) && !regexp.MustCompile(`^[a-zA-Z0-9]{9}$`).MatchString(id) { // the agent's own (see TestHistoryBecomesModelMessages)
			t.Errorf("call %d got the id %q, not 9 letters and digits", i, id)
		}
		ids[id] = true
		if ms[3+i]["tool_call_id"] != id {
			t.Errorf("tool message %d answers %v, want %s", i, ms[3+i]["tool_call_id"], id)
		}
	}
}

// sourceErr is a failure of a tool's own source, told without its cause.
type sourceErr struct{ cause error }

func (e sourceErr) Error() string { return "the query could not be run" }
func (e sourceErr) Unwrap() error { return e.cause }

// TestToolFailureLogged: a tool error that wraps a cause (the tool's
// database failed) is logged with the cause; the model and the stream get
// the error's own message.
func TestToolFailureLogged(t *testing.T) {
	f := newFake(t, reply{chunks: []string{role(), toolStart(0, "c1", "svcSqlApi", `{"q":"x"}`), finish("tool_calls")}}, say("Sorry."))
	sql := &fakeTool{name: "svcSqlApi", err: sourceErr{errors.New("database is locked")}}
	a, logs := newAgent(t, f, []llmagent.Tool{sql})
	rec, err := answer(t, a, chatstream.Turn{})
	if err != nil {
		t.Fatal(err)
	}
	if ev := rec.Events(); len(ev) == 0 || ev[0].Result != `{"error":"the query could not be run"}` {
		t.Errorf("events %+v", ev)
	}
	if !strings.Contains(logs.String(), "llmagent: tool failed") || !strings.Contains(logs.String(), "database is locked") {
		t.Errorf("logs: %s", logs)
	}
}
