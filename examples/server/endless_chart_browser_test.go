package main

import (
	"os"
	"testing"
	"time"
)

// TestBrowserEndlessChartLeavesOtherChartsDrawn: a chart whose spec asks
// for endless work is given up after its time, and the charts asked for
// meanwhile (the next answer's, or a reloaded conversation's) are drawn
// after it: chart frames share one process, so they are drawn one at a
// time. A chart drawn before it is drawn again, in a new process: while
// its frame lived, the busy process did too, and every later chart frame
// was put in it and never started.
func TestBrowserEndlessChartLeavesOtherChartsDrawn(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("browser tests are not short")
	}
	dir := vegaDir(t)
	s := startServer(t, "-db", ":memory:", "-vega-dir", dir)
	b := newBrowser(t)
	tb := b.newTab(t, s.base)
	tb.openWithoutSession(s.base)
	const draw = `(async (specs) => {
  const { renderTool } = await import("/embed/chat/assets/render.js");
  const enc = { x: { field: "k", type: "quantitative" }, y: { field: "v", type: "quantitative" } };
  const endless = { transform: [{ calculate: "datum.v", as: "k" }, { impute: "v", key: "k", keyvals: { start: 0, stop: 300000 }, value: 1 }, { loess: "v", on: "k", bandwidth: 1 }], mark: "line", encoding: enc };
  const plain = { mark: "bar", encoding: { x: { field: "k", type: "nominal" }, y: { field: "v", type: "quantitative" } } };
  window.__boxes = window.__boxes || [];
  for (const spec of specs === "endless" ? [endless] : specs === "one" ? [plain] : [plain, plain, plain]) {
    const box = document.createElement("div");
    document.body.append(box);
    window.__boxes.push(box);
    renderTool(box, { id: "t", role: "assistant", toolCall: { name: "svcSqlApi", input: JSON.stringify({ sqlQuery: "SELECT 1" }),
      result: JSON.stringify({ schema: [{ name: "k", column_type: "string" }, { name: "v", column_type: "number" }], data: [["a", 1], ["b", 2]], totalRows: 2, vegaSpec: JSON.stringify(spec) }) } });
  }
  return true;
})`
	tb.eval(draw+`("one")`, nil)
	tb.waitFor("a first chart to be drawn", `window.__boxes[0].querySelector(".ek-chart[data-state=drawn]")`, 30*time.Second)
	tb.eval(draw+`("endless")`, nil)
	tb.waitFor("the endless chart to start", `window.__boxes[1].querySelector(".ek-chart iframe")`, 10*time.Second)
	time.Sleep(3 * time.Second)
	tb.eval(draw+`("plain")`, nil)
	tb.waitFor("every chart to be drawn or given up", `!window.__boxes.some((b) => b.querySelector(".ek-chart[data-state=loading]"))`, 150*time.Second)
	var states []string
	tb.eval(`window.__boxes.map((b) => b.querySelector(".ek-chart").dataset.state)`, &states)
	if len(states) != 5 || states[1] != "failed" {
		t.Fatalf("states %q: the endless chart was not given up", states)
	}
	for i, st := range states {
		if i != 1 && st != "drawn" {
			t.Errorf("chart %d, a plain bar chart (the endless one is 1): %s, want drawn", i, st)
		}
	}
}
