package main

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// sqlToolCall is svcSqlApi arguments over the demo data with a chart spec.
func sqlToolCall(title string, spec any) string {
	s, _ := json.Marshal(spec)
	b, _ := json.Marshal(map[string]string{"sqlQuery": "SELECT country, COUNT(DISTINCT order_id) AS orders FROM orders GROUP BY country",
		"queryTitle": title, "description": "d", "userRequest": "u", "vegaSpec": string(s)})
	return string(b)
}

// modelTurn is a fake model's two replies for one turn: the tool calls,
// then the answer.
func modelTurn(answer string, calls ...[2]string) [][]string {
	return [][]string{
		{sseToolCalls(calls...), sseChunk(map[string]any{}, "tool_calls")},
		{sseChunk(map[string]any{"role": "assistant", "content": answer}, nil), sseChunk(map[string]any{}, "stop")},
	}
}

// TestBrowserHostileToolCallsAndCharts: tool arguments and chart specs a
// model writes to break the page do not. Arguments that are not what the
// page expects (an object whose toString is not a function, nesting 9,000
// deep) leave the page idle at the turn's end, with the later messages
// drawn, also when the page draws them at the turn's end (a background
// tab runs no animation frames) and after a reload; a spec's own data in a
// layer is not drawn (only the result's rows are); a spec nested too deep
// fails at once. (A spec whose transforms ask for endless work:
// TestBrowserEndlessChartLeavesOtherChartsDrawn.)
func TestBrowserHostileToolCallsAndCharts(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("browser tests are not short")
	}
	dir := vegaDir(t)
	enc := map[string]any{"x": map[string]any{"field": "country", "type": "nominal"}, "y": map[string]any{"field": "orders", "type": "quantitative"}}
	var replies [][]string
	// 1: arguments the page cannot take as text, in one turn.
	replies = append(replies, modelTurn("First answer.",
		[2]string{"svcMeta", `{"searchQuery":"orders","description":{"toString":0}}`},
		[2]string{"svcLookup", `{"q":` + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + `}`})...)
	// 2: a layer with rows of its own.
	replies = append(replies, modelTurn("Second answer.", [2]string{"svcSqlApi", sqlToolCall("Orders by country", map[string]any{
		"layer": []any{
			map[string]any{"mark": "bar", "encoding": enc},
			map[string]any{"data": map[string]any{"values": []any{map[string]any{"country": "Atlantis", "orders": 987654}}}, "mark": "bar", "encoding": enc},
		}})})...)
	// 3: a spec nested 9,000 deep.
	replies = append(replies, modelTurn("Third answer.", [2]string{"svcSqlApi", sqlToolCall("Deep",
		json.RawMessage(`{"mark":"bar","description":`+strings.Repeat("[", 9000)+strings.Repeat("]", 9000)+`}`))})...)
	f := &fakeModel{replies: replies}
	endpoint := httptest.NewServer(f)
	defer endpoint.Close()
	t.Setenv("OPENAI_BASE_URL", endpoint.URL+"/v1")
	t.Setenv("OPENAI_API_KEY", "sk-model-key")
	s := startServer(t, "-db", ":memory:", "-agent", "llm", "-llm-model", "test-model", "-vega-dir", dir)
	b := newBrowser(t)
	tb := b.newTab(t, s.base)
	tb.open("ana")

	// 1, in a tab whose animation frames are held back (as in a
	// background tab): the turn's end draws the messages itself.
	tb.eval(chat(`(w.__held = [], w.__raf = w.requestAnimationFrame, w.requestAnimationFrame = (cb) => w.__held.push(cb), true)`), nil)
	tb.ask("what is in the data model?")
	tb.waitFor("the first turn to end", chat(jsIdle+` && d.getElementById("ek-log").innerText.includes("First answer.")`), 30*time.Second)
	tb.eval(chat(`(w.requestAnimationFrame = w.__raf, w.__held.forEach((cb) => { try { cb(performance.now()); } catch (_) {} }), true)`), nil)
	var steps int
	tb.eval(chat(`d.querySelectorAll("details.ek-step").length`), &steps)
	if steps != 2 {
		t.Errorf("%d tool steps drawn, want 2", steps)
	}

	// 2: the chart shows the result's rows only.
	tb.ask("orders by country")
	tb.waitFor("the chart", chat(jsIdle+` && d.getElementById("ek-log").innerText.includes("Second answer.") && `+jsHasChart), 60*time.Second)
	var table, svg string
	tb.eval(chat(`d.querySelector(".ek-table").innerText`), &table)
	tb.chartFrames(1)[0].eval(self(`d.querySelector("svg").textContent`), &svg)
	if strings.Contains(svg, "Atlantis") || strings.Contains(table, "Atlantis") {
		t.Errorf("the chart draws a row the result does not have: chart %q, table %q", svg, table)
	}

	// 3: too deep a spec fails at once.
	tb.ask("deep")
	tb.waitFor("the deep spec's chart to fail", chat(jsIdle+` && [...d.querySelectorAll(".ek-chart")].some((c) => c.dataset.state === "failed" && c.innerText.includes("too large"))`), 30*time.Second)

	// A reload draws the stored conversation, every message of it.
	tb.open("ana")
	var log string
	tb.eval(chat(`d.getElementById("ek-log").innerText`), &log)
	for _, want := range []string{"what is in the data model?", "First answer.", "Second answer.", "Third answer."} {
		if !strings.Contains(log, want) {
			t.Errorf("after a reload the conversation lacks %q:\n%s", want, log)
		}
	}

	tb.noProblems()
}
