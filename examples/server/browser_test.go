package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/input"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"github.com/embedkit/embedkit/chatstream/chatpage"
	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/store/memstore"
)

// The browser tests drive a headless Chromium (Debian's chromium package)
// through the demo host page: / mints a session for a demo user and
// embeds /embed/chat in an iframe. They need chromium on the PATH (or
// EMBEDKIT_CHROMIUM) and the pinned vega packages in a node_modules
// folder (EMBEDKIT_VEGA_DIR, default .ci/vega/node_modules, which .ci/run
// installs). Without them they skip, except under CI=true, where they
// fail.

// requirement skips the test, or fails it under CI.
func requirement(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: browser tests must run)", msg)
	}
	t.Skipf("%s; skipping the browser tests (they run in CI: .ci/run installs what they need)", msg)
}

func chromiumPath(t *testing.T) string {
	if p := os.Getenv("EMBEDKIT_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	requirement(t, "chromium not found (apt-get install chromium, or set EMBEDKIT_CHROMIUM)")
	return ""
}

func vegaDir(t *testing.T) string {
	dir := os.Getenv("EMBEDKIT_VEGA_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", ".ci", "vega", "node_modules")
	}
	if _, err := os.Stat(filepath.Join(dir, "vega-embed", "package.json")); err != nil {
		requirement(t, "vega packages not found in %s (npm ci --prefix .ci/vega, or set EMBEDKIT_VEGA_DIR)", dir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// browser is one headless Chromium shared by the subtests of a test.
type browser struct {
	ctx  context.Context
	mu   sync.Mutex
	tabs int
}

func newBrowser(t *testing.T, extra ...chromedp.ExecAllocatorOption) *browser {
	exe := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		// Block third-party cookies, as browsers now do by default.
		chromedp.Flag("test-third-party-cookie-phaseout", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1100, 900),
	)
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		cancel()
		cancelAlloc()
		t.Fatalf("start chromium %s: %v", exe, err)
	}
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	return &browser{ctx: ctx}
}

// tab is a browser tab of one subtest, recording console errors,
// exceptions and CSP violations.
type tab struct {
	t    *testing.T
	ctx  context.Context
	base string
	n    int // tab number, for screenshot names

	mu       sync.Mutex
	problems []string
	requests []string // URLs the page requested
}

// cspProbe records securitypolicyviolation events in every frame: in
// the top window's list, or, in a frame that cannot reach it (a chart's
// opaque origin), in its own.
const cspProbe = `document.addEventListener("securitypolicyviolation", (e) => {
  let w = window;
  try { window.top.__cspViolations; w = window.top; } catch (_) {}
  (w.__cspViolations = w.__cspViolations || []).push(location.pathname + ": " + e.violatedDirective + " " + e.blockedURI);
});`

// openWithoutSession opens the chat page at base with no session, and
// waits until the page has started and said so: a page whose renderers a
// test then drives.
func (tb *tab) openWithoutSession(base string) {
	tb.t.Helper()
	tb.run(chromedp.Navigate(base + "/embed/chat"))
	tb.waitFor("the page to start", `document.getElementById("ek-notice").textContent.includes("This chat has no session")`, 20*time.Second)
}

func (b *browser) newTab(t *testing.T, base string) *tab {
	ctx, cancel := chromedp.NewContext(b.ctx)
	b.mu.Lock()
	b.tabs++
	tb := &tab{t: t, ctx: ctx, base: base, n: b.tabs}
	b.mu.Unlock()
	err := chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == "error" || ev.Type == "assert" {
				var parts []string
				for _, a := range ev.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				tb.problem("console.%s: %s", ev.Type, strings.Join(parts, " "))
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			tb.problem("exception: %s", msg)
		case *network.EventRequestWillBeSent:
			tb.mu.Lock()
			tb.requests = append(tb.requests, ev.Request.URL)
			tb.mu.Unlock()
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == "error" {
				tb.problem("log %s: %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, runtime.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: cspProbe}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			tb.screenshot("failure")
		}
		cancel()
	})
	return tb
}

func (tb *tab) problem(format string, args ...any) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.problems = append(tb.problems, fmt.Sprintf(format, args...))
}

// screenshot writes the page to a PNG in the temp dir and logs its path.
func (tb *tab) screenshot(name string) string {
	ctx, cancel := context.WithTimeout(tb.ctx, 10*time.Second)
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.t.Logf("screenshot: %v", err)
		return ""
	}
	dir := filepath.Join(os.TempDir(), "embedkit-browser-screenshots")
	_ = os.MkdirAll(dir, 0o755)
	p := filepath.Join(dir, regexp.MustCompile(`[^A-Za-z0-9_-]+`).ReplaceAllString(fmt.Sprintf("%s-tab%d-%s", tb.t.Name(), tb.n, name), "_")+".png")
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		tb.t.Logf("screenshot: %v", err)
		return ""
	}
	tb.t.Logf("screenshot written to %s", p)
	return p
}

func (tb *tab) run(actions ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		tb.t.Fatal(err)
	}
}

// eval evaluates js in the top document (promises are awaited) and
// decodes its JSON value into out (when out is not nil).
func (tb *tab) eval(js string, out any) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(async () => JSON.stringify((await (`+js+`)) ?? null))()`, chromedp.EvalAwaitPromise))
	if err != nil {
		tb.t.Fatalf("evaluate %s: %v", js, err)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(v), out); err != nil {
			tb.t.Fatalf("evaluate %s: %v (value %s)", js, err, v)
		}
	}
}

// chat wraps js so that it runs with `d` as the chat iframe's document.
func chat(js string) string {
	return `(() => { const f = document.getElementById("chat"); const d = f && f.contentDocument; if (!d) return null; const w = f.contentWindow; return (` + js + `); })()`
}

// waitFor polls the boolean js until it is true.
func (tb *tab) waitFor(what, js string, timeout time.Duration) {
	tb.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(tb.ctx, 10*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!(`+js+`)`))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			tb.t.Fatalf("timed out waiting for %s (last error %v)", what, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// open loads the demo host page for user and waits for the chat.
func (tb *tab) open(user string) {
	tb.t.Helper()
	tb.run(chromedp.Navigate(tb.base + "/?user=" + user))
	tb.waitFor("the chat page to be ready", chat(`d.body && d.body.dataset.ready === "true"`), 30*time.Second)
}

// self wraps js for a tab whose target is the chat page itself.
func self(js string) string {
	return `(() => { const d = document; const w = window; return (` + js + `); })()`
}

// frameTab returns a tab on the out-of-process iframe (a cross-site frame)
// whose URL contains path.
func (tb *tab) frameTab(path string) *tab {
	tb.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		targets, err := chromedp.Targets(tb.ctx)
		if err != nil {
			tb.t.Fatal(err)
		}
		for _, ti := range targets {
			if ti.Type == "iframe" && strings.Contains(ti.URL, path) {
				ctx, cancel := chromedp.NewContext(tb.ctx, chromedp.WithTargetID(ti.TargetID))
				tb.t.Cleanup(cancel)
				ft := &tab{t: tb.t, ctx: ctx, base: tb.base, n: tb.n}
				if err := chromedp.Listen(ctx, func(ev any) {
					if e, ok := ev.(*runtime.EventExceptionThrown); ok {
						ft.problem("exception: %s", e.ExceptionDetails.Text)
					}
				}); err != nil {
					tb.t.Fatal(err)
				}
				return ft
			}
		}
		if time.Now().After(deadline) {
			tb.t.Fatalf("no iframe target for %s", path)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// chartFrames waits for at least n chart frames (sandboxed iframes of an
// opaque origin, each its own target) under the tab and returns a tab on
// each, in no particular order.
func (tb *tab) chartFrames(n int) []*tab {
	tb.t.Helper()
	parent := chromedp.FromContext(tb.ctx).Target.TargetID
	deadline := time.Now().Add(20 * time.Second)
	for {
		targets, err := chromedp.Targets(tb.ctx)
		if err != nil {
			tb.t.Fatal(err)
		}
		var ids []target.ID
		for _, ti := range targets {
			if ti.Type == "iframe" && ti.ParentID == parent && strings.Contains(ti.URL, "/embed/chat/chart") {
				ids = append(ids, ti.TargetID)
			}
		}
		if len(ids) >= n {
			var out []*tab
			for _, id := range ids {
				ctx, cancel := chromedp.NewContext(tb.ctx, chromedp.WithTargetID(id))
				tb.t.Cleanup(cancel)
				ft := &tab{t: tb.t, ctx: ctx, base: tb.base, n: tb.n}
				if err := chromedp.Listen(ctx, func(ev any) {
					switch e := ev.(type) {
					case *runtime.EventExceptionThrown:
						ft.problem("exception: %s", e.ExceptionDetails.Text)
					case *network.EventRequestWillBeSent:
						ft.mu.Lock()
						ft.requests = append(ft.requests, e.Request.URL)
						ft.mu.Unlock()
					}
				}); err != nil {
					tb.t.Fatal(err)
				}
				if _, err := chromedp.Call(ctx, runtime.Enable, cdp.Empty{}); err != nil {
					tb.t.Fatal(err)
				}
				out = append(out, ft)
			}
			return out
		}
		if time.Now().After(deadline) {
			tb.t.Fatalf("%d chart frames, want %d", len(ids), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// hover moves the mouse of the tab (the demo host page) over the middle
// of the element that js (with d as the frame's document) finds in the
// chart frame of a page with one chart.
func (tb *tab) hover(frame *tab, js string) {
	tb.t.Helper()
	var outer struct{ X, Y float64 }
	tb.eval(`(() => { const c = document.getElementById("chat"); const f = c.getBoundingClientRect();
		const d = c.contentDocument; const ch = d.querySelector(".ek-chart iframe");
		ch.scrollIntoView({ block: "center" });
		const r = ch.getBoundingClientRect();
		return { x: f.left + r.left, y: f.top + r.top }; })()`, &outer)
	// The browser routes input to a frame by where it was last drawn.
	tb.run(chromedp.Sleep(300 * time.Millisecond))
	var inner struct{ X, Y float64 }
	frame.eval(self(`(() => { const r = (`+js+`).getBoundingClientRect(); return { x: r.left + r.width / 2, y: r.top + r.height / 2 }; })()`), &inner)
	tb.run(chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, outer.X+inner.X, outer.Y+inner.Y))
}

// answerWithDownload lets the tab save downloads to a new folder, which
// it returns, and asks liam's "revenue by month": a table to download.
func (tb *tab) answerWithDownload(t *testing.T) string {
	t.Helper()
	dl := t.TempDir()
	if _, err := chromedp.CallBrowser(tb.ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
		Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dl}); err != nil {
		t.Fatal(err)
	}
	tb.open("liam")
	tb.ask("revenue by month")
	tb.waitFor("the answer", chat(jsIdle+` && d.querySelector(".ek-table") && d.querySelector(".ek-download")`), 60*time.Second)
	return dl
}

// downloadedCSV waits for the one .csv file the browser saves in dir
// and returns its records.
func downloadedCSV(t *testing.T, dir string) [][]string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".csv") {
				b, err := os.ReadFile(filepath.Join(dir, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				recs, err := csv.NewReader(strings.NewReader(string(b))).ReadAll()
				if err != nil {
					t.Fatalf("CSV %q: %v", b, err)
				}
				return recs
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no CSV file in %s", dir)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// distanceFromBottom is how far the chat's conversation is scrolled
// above its newest message, in px.
func (tb *tab) distanceFromBottom() int {
	tb.t.Helper()
	var d float64
	tb.eval(chat(`(() => { const l = d.getElementById("ek-log"); return l.scrollHeight - l.scrollTop - l.clientHeight; })()`), &d)
	return int(d + 0.5)
}

// wheel turns the mouse wheel over the chat's conversation (dy < 0
// scrolls up) and lets the scroll happen.
func (tb *tab) wheel(dy float64) {
	tb.t.Helper()
	var p struct{ X, Y float64 }
	tb.eval(`(() => { const c = document.getElementById("chat"); const f = c.getBoundingClientRect();
		const r = c.contentDocument.getElementById("ek-log").getBoundingClientRect();
		return { x: f.left + r.left + 8, y: f.top + r.top + r.height / 2 }; })()`, &p)
	tb.run(chromedp.MouseEvent(input.DispatchMouseEventTypeMouseWheel, p.X, p.Y, func(e *input.DispatchMouseEventParams) {
		e.DeltaY = dy
		e.DeltaX = 0.001 // CDP wants both, and drops a zero
	}),
		chromedp.Sleep(400*time.Millisecond))
}

// ask2 types a question into a tab that is the chat page itself.
func (tb *tab) ask2(q string) {
	tb.t.Helper()
	js, _ := json.Marshal(q)
	tb.eval(self(`(d.getElementById("ek-input").value = `+string(js)+`, d.getElementById("ek-form").requestSubmit(), true)`), nil)
}

// ask types a question and sends it.
func (tb *tab) ask(q string) {
	tb.t.Helper()
	js, _ := json.Marshal(q)
	tb.eval(chat(`(d.getElementById("ek-input").value = `+string(js)+`, d.getElementById("ek-form").requestSubmit(), true)`), nil)
}

const (
	jsBusy  = `d.getElementById("ek-log").getAttribute("aria-busy") === "true"`
	jsIdle  = `d.getElementById("ek-log").getAttribute("aria-busy") === "false" && !d.getElementById("ek-send").hidden`
	jsFinal = `[...d.querySelectorAll(".ek-assistant")].map((e) => e.innerText).join("\n")`
	// A chart is drawn in a sandboxed frame, which tells the page.
	jsHasChart = `!!d.querySelector(".ek-chart[data-state=drawn] iframe")`
	jsTable    = `[...d.querySelectorAll(".ek-table tbody tr")].map((tr) => [...tr.cells].map((c) => c.textContent))`
)

// noProblems fails on console errors, exceptions and CSP violations.
func (tb *tab) noProblems() {
	tb.t.Helper()
	var csp []string
	tb.eval(`window.__cspViolations || []`, &csp)
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for _, v := range csp {
		tb.t.Errorf("CSP violation: %s", v)
	}
	for _, p := range tb.problems {
		tb.t.Errorf("browser reported: %s", p)
	}
}

func TestBrowser(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("browser tests are not short")
	}
	dir := vegaDir(t)
	b := newBrowser(t)
	s := startServer(t, "-db", ":memory:", "-vega-dir", dir, "-agent-delay", "40ms")

	t.Run("answer streams with a tool step, a table and a chart", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		tb.open("ana")
		var name, initials string
		tb.eval(chat(`d.getElementById("ek-name").textContent`), &name)
		if name != "Ana Weber" {
			t.Errorf("display name %q", name)
		}
		tb.waitFor("the avatar picture", chat(`d.querySelector(".ek-avatar-img:not([hidden])")`), 10*time.Second)
		tb.eval(chat(`d.getElementById("ek-initials").hidden ? "" : "visible"`), &initials)
		if initials != "" {
			t.Errorf("initials shown over a picture that loaded")
		}
		tb.ask("revenue by country")
		// Streamed: some text is shown while the turn still runs.
		tb.waitFor("streamed text while the turn runs", chat(jsBusy+` && [...d.querySelectorAll(".ek-assistant .ek-md p")].some((p) => p.textContent.length > 0)`), 30*time.Second)
		tb.waitFor("the turn to end", chat(jsIdle), 60*time.Second)
		tb.waitFor("a chart", chat(jsHasChart), 20*time.Second)
		var sql, final string
		var rows [][]string
		tb.eval(chat(`[...d.querySelectorAll(".ek-step .ek-sql code")].map((c) => c.textContent).join("\n")`), &sql)
		tb.eval(chat(jsFinal), &final)
		tb.eval(chat(jsTable), &rows)
		if !strings.Contains(sql, "SELECT") {
			t.Errorf("tool step SQL %q", sql)
		}
		if len(rows) != 1 || rows[0][0] != "Germany" {
			t.Errorf("table rows %q, want Germany only", rows)
		}
		if !strings.Contains(final, "Germany") {
			t.Errorf("final answer %q", final)
		}
		var steps int
		tb.eval(chat(`d.querySelectorAll("details.ek-step").length`), &steps)
		if steps < 2 {
			t.Errorf("%d tool steps, want the metadata search and the query", steps)
		}
		// The chart's tooltip works in the chart's frame (built as text,
		// under the frame's CSP): hover the bar.
		frames := tb.chartFrames(1)
		tb.hover(frames[0], `d.querySelector("svg path.mark-rect, svg g.mark-rect path")`)
		frames[0].waitFor("the chart tooltip", self(`(() => { const t = d.querySelector(".ek-chart-tooltip"); return t && !t.hidden && t.textContent.includes("Germany"); })()`), 10*time.Second)
		// The address bar lost the single-use sessionId.
		var src string
		tb.eval(chat(`w.location.search`), &src)
		if strings.Contains(src, "sessionId") {
			t.Errorf("chat URL still has the sessionId: %q", src)
		}
		if p := os.Getenv("EMBEDKIT_README_SCREENSHOT"); p != "" {
			tb.ask("revenue by category")
			tb.waitFor("the second answer", chat(jsIdle+` && d.querySelectorAll(".ek-chart[data-state=drawn]").length === 2`), 60*time.Second)
			tb.run(chromedp.EmulateViewport(1000, 1250), chromedp.Sleep(300*time.Millisecond))
			tb.eval(chat(`(d.querySelectorAll(".ek-step")[3].open = true, d.querySelectorAll(".ek-user")[1].scrollIntoView(), true)`), nil)
			tb.run(chromedp.Sleep(500 * time.Millisecond))
			buf, err := chromedp.Run(tb.ctx, chromedp.CaptureScreenshot())
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, buf, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		tb.noProblems()
	})

	t.Run("the chat follows the conversation unless the user scrolled up", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		tb.run(chromedp.EmulateViewport(1000, 700))
		tb.open("ana")
		charts := 0
		// answer asks q and waits for the answer and its chart to be drawn.
		answer := func(q string) {
			t.Helper()
			tb.ask(q)
			charts++
			tb.waitFor("the answer to "+q, chat(jsIdle+fmt.Sprintf(` && d.querySelectorAll(".ek-chart[data-state=drawn]").length === %d`, charts)), 60*time.Second)
			tb.run(chromedp.Sleep(300 * time.Millisecond)) // the last sizes settle
		}
		var dist []int
		for _, q := range []string{"revenue by country", "revenue by category", "revenue by month", "orders by category"} {
			answer(q)
			dist = append(dist, tb.distanceFromBottom())
		}
		for i, d := range dist {
			if d > 2 {
				t.Errorf("distance from the bottom after each answer %v: answer %d is off screen", dist, i+1)
				break
			}
		}
		t.Logf("distance from the bottom after each of %d answers with charts: %v px", len(dist), dist)
		// The user scrolls up: the answer that follows does not pull the
		// view down; sending a question comes back to the newest.
		tb.wheel(-1500)
		if d := tb.distanceFromBottom(); d < 500 {
			t.Fatalf("after a wheel up the distance is %d px", d)
		}
		answer("revenue by month")
		if d := tb.distanceFromBottom(); d > 2 {
			t.Errorf("sending a question did not come back to the newest: %d px", d)
		}
		tb.ask("revenue by country")
		charts++
		tb.waitFor("the turn to start", chat(jsBusy), 20*time.Second)
		tb.wheel(-1500)
		tb.waitFor("the answer", chat(jsIdle+fmt.Sprintf(` && d.querySelectorAll(".ek-chart[data-state=drawn]").length === %d`, charts)), 60*time.Second)
		tb.run(chromedp.Sleep(300 * time.Millisecond))
		if d := tb.distanceFromBottom(); d < 500 {
			t.Errorf("the answer pulled the view down while the user read above: %d px from the bottom", d)
		}
		// Back at the bottom, the page follows again.
		tb.wheel(100000)
		answer("revenue by category")
		if d := tb.distanceFromBottom(); d > 2 {
			t.Errorf("after the user came back to the bottom, the next answer is %d px below", d)
		}
		// After a reload mid-turn, the rejoined turn is on screen.
		tb.ask("revenue by month")
		tb.waitFor("streamed text", chat(jsBusy+` && [...d.querySelectorAll(".ek-assistant .ek-md p")].some((p) => p.textContent.length > 10)`), 30*time.Second)
		tb.eval(chat(`(w.location.reload(), true)`), nil)
		time.Sleep(200 * time.Millisecond)
		tb.waitFor("the chat after reload", chat(`d.body && d.body.dataset.ready === "true"`), 30*time.Second)
		tb.waitFor("the rejoined turn to end", chat(jsIdle+` && d.querySelectorAll(".ek-chart[data-state=drawn]").length === d.querySelectorAll(".ek-chart").length`), 60*time.Second)
		tb.run(chromedp.Sleep(300 * time.Millisecond))
		if d := tb.distanceFromBottom(); d > 2 {
			t.Errorf("after a reload the rejoined turn is %d px below the view", d)
		}
		tb.noProblems()
	})

	t.Run("stop ends the turn and keeps the partial answer", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		tb.open("liam")
		tb.ask("revenue by month")
		tb.waitFor("streamed text", chat(jsBusy+` && [...d.querySelectorAll(".ek-assistant .ek-md p")].some((p) => p.textContent.length > 0)`), 30*time.Second)
		tb.eval(chat(`(d.getElementById("ek-stop").click(), true)`), nil)
		tb.waitFor("the turn to end", chat(jsIdle), 30*time.Second)
		var notice, final string
		tb.eval(chat(`d.getElementById("ek-notice").textContent`), &notice)
		tb.eval(chat(jsFinal), &final)
		if !strings.Contains(notice, "Stopped") {
			t.Errorf("notice %q, want Stopped", notice)
		}
		if strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(final), "Stopped.")) == "" {
			t.Errorf("the partial answer is gone: %q", final)
		}
		// A reload shows the same partial answer from the history.
		tb.eval(chat(`(w.location.reload(), true)`), nil)
		time.Sleep(200 * time.Millisecond)
		tb.waitFor("the chat after reload", chat(`d.body && d.body.dataset.ready === "true" && d.querySelector(".ek-assistant")`), 30*time.Second)
		tb.waitFor("the rejoin to end", chat(jsIdle), 30*time.Second)
		var after string
		tb.eval(chat(jsFinal), &after)
		if strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(final), "Stopped.")) != strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(after), "Stopped.")) {
			t.Errorf("after reload the answer is %q, want %q", after, final)
		}
		tb.noProblems()
	})

	t.Run("stop pressed before the stream opens still stops the turn", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		tb.open("liam")
		// The click comes before the server has the request (held back
		// 500 ms here): an abort sent then would find no turn.
		tb.eval(chat(`(w.fetch = ((f) => (u, i) => String(u).includes("stream-chat-state") ? new Promise((r) => setTimeout(r, 500)).then(() => f(u, i)) : f(u, i))(w.fetch), true)`), nil)
		tb.eval(chat(`(d.getElementById("ek-input").value = "revenue by month", d.getElementById("ek-form").requestSubmit(), d.getElementById("ek-stop").click(), true)`), nil)
		tb.waitFor("the turn to end", chat(jsIdle+` && d.querySelector(".ek-assistant")`), 30*time.Second)
		var notice string
		tb.eval(chat(`d.getElementById("ek-notice").textContent`), &notice)
		if !strings.Contains(notice, "Stopped") {
			t.Errorf("notice %q, want Stopped", notice)
		}
		tb.noProblems()
	})

	t.Run("a reload mid-turn rejoins and ends with the same final message", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		tb.open("ana")
		tb.ask("revenue by country")
		tb.waitFor("streamed text", chat(jsBusy+` && [...d.querySelectorAll(".ek-assistant .ek-md p")].some((p) => p.textContent.length > 10)`), 30*time.Second)
		tb.eval(chat(`(w.location.reload(), true)`), nil)
		time.Sleep(200 * time.Millisecond)
		tb.waitFor("the chat after reload", chat(`d.body && d.body.dataset.ready === "true"`), 30*time.Second)
		tb.waitFor("the rejoined turn to end", chat(jsIdle+` && d.querySelector(".ek-assistant")`), 60*time.Second)
		tb.waitFor("a chart", chat(jsHasChart), 20*time.Second)
		var cache struct {
			ChatID string `json:"chatId"`
			Msgs   map[string]struct {
				Role      string   `json:"role"`
				Content   string   `json:"content"`
				GraphPath []string `json:"graphPath"`
			} `json:"msgs"`
		}
		var cacheJSON, final, token string
		tb.eval(chat(`w.sessionStorage.getItem("embedkit.chat." + w.location.hash.slice(4))`), &cacheJSON)
		tb.eval(chat(`w.sessionStorage.getItem("embedkit.token." + w.location.hash.slice(4))`), &token)
		tb.eval(chat(jsFinal), &final)
		if err := json.Unmarshal([]byte(cacheJSON), &cache); err != nil {
			t.Fatal(err)
		}
		var assistants int
		tb.eval(chat(`d.querySelectorAll(".ek-assistant").length`), &assistants)
		if assistants != 1 || strings.Count(final, "Let me look that up") != 1 {
			t.Errorf("%d assistant messages after the rejoin: %q", assistants, final)
		}
		// The stored history's final message is the one the page shows.
		stored := finalOfThread(t, s.base, token, cache.ChatID)
		var shown string
		for _, m := range cache.Msgs {
			if m.Role == "assistant" && len(m.GraphPath) > 0 && m.GraphPath[0] == "final" {
				shown = m.Content
			}
		}
		if stored == "" || shown != stored {
			t.Errorf("page's final message %q, stored %q", shown, stored)
		}
		tb.noProblems()
	})

	t.Run("row security: users see their own numbers, no country sees none", func(t *testing.T) {
		tables := map[string][][]string{}
		for _, u := range []string{"ana", "liam", "sam"} {
			tb := b.newTab(t, s.base)
			tb.open(u)
			tb.ask("revenue by country")
			tb.waitFor("the answer", chat(jsIdle+` && d.querySelector(".ek-table")`), 60*time.Second)
			var rows [][]string
			tb.eval(chat(jsTable), &rows)
			tables[u] = rows
			tb.noProblems()
		}
		if len(tables["ana"]) != 1 || tables["ana"][0][0] != "Germany" || len(tables["liam"]) != 1 || tables["liam"][0][0] != "United States" {
			t.Errorf("ana saw %q, liam saw %q", tables["ana"], tables["liam"])
		} else if tables["ana"][0][1] == tables["liam"][0][1] {
			t.Errorf("ana and liam see the same revenue %q", tables["ana"][0][1])
		}
		if rows := tables["sam"]; len(rows) != 1 || rows[0][0] != "No rows." {
			t.Errorf("the user without a country saw %q, want no rows", rows)
		}
	})

	t.Run("an expired token posts the event to the host", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		tb.open("liam")
		// Revoking the user's sessions ends the token, as expiry does.
		req, _ := http.NewRequest(http.MethodDelete, s.base+"/api/v1/embed/users/demo-liam/sessions", nil)
		req.Header.Set("Authorization", "Api-Key sk-acme-admin")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNoContent {
			t.Fatalf("revoke: %d", res.StatusCode)
		}
		tb.ask("revenue by country")
		tb.waitFor("the host to get embedkit:session-expired", `document.body.dataset.sessionExpired === "true"`, 20*time.Second)
		var inputDisabled bool
		tb.eval(chat(`d.getElementById("ek-input").disabled`), &inputDisabled)
		if !inputDisabled {
			t.Error("the chat still takes questions after the session expired")
		}
		var token string
		tb.eval(chat(`w.sessionStorage.getItem("embedkit.token." + w.location.hash.slice(4)) || ""`), &token)
		if token != "" {
			t.Error("the expired token is still in sessionStorage")
		}
		// The 401 of the chat request is the only error the browser logs.
		tb.mu.Lock()
		var rest []string
		for _, p := range tb.problems {
			if !strings.Contains(p, "401") {
				rest = append(rest, p)
			}
		}
		tb.problems = rest
		tb.mu.Unlock()
		tb.noProblems()

		// A token reaching its expiry time posts the event too, with no
		// request needed.
		tb2 := b.newTab(t, s.base)
		tb2.open("ana")
		tb2.eval(chat(`(w.sessionStorage.setItem("embedkit.tokenExpiresAt." + w.location.hash.slice(4), new Date(Date.now() + 1500).toISOString()), w.location.reload(), true)`), nil)
		tb2.waitFor("the host to get embedkit:session-expired at expiry", `document.body.dataset.sessionExpired === "true"`, 20*time.Second)
		tb2.noProblems()
	})

	t.Run("Download CSV gets every row through the data query API; Show SQL shows the query", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		dl := tb.answerWithDownload(t)
		var shown struct {
			SQL, Step string
			Hidden    bool
			Headers   []string
			First     []string
		}
		tb.eval(chat(`(d.querySelector(".ek-show-sql").click(), {
			sql: d.querySelector(".ek-table-sql").textContent, hidden: d.querySelector(".ek-table-sql").hidden,
			step: d.querySelector(".ek-step .ek-sql code").textContent,
			headers: [...d.querySelectorAll(".ek-table thead th")].map((th) => th.textContent),
			first: [...d.querySelectorAll(".ek-table tbody tr")].map((tr) => tr.cells[0].textContent) })`), &shown)
		if shown.Hidden || shown.SQL == "" || shown.SQL != shown.Step {
			t.Errorf("Show SQL: hidden %v, %q, want the step's %q", shown.Hidden, shown.SQL, shown.Step)
		}
		tb.eval(chat(`(d.querySelector(".ek-download").click(), true)`), nil)
		recs := downloadedCSV(t, dl)
		if len(recs) < 2 || strings.Join(recs[0], ",") != strings.Join(shown.Headers, ",") {
			t.Fatalf("CSV header %q, table header %q", recs[0], shown.Headers)
		}
		var first []string
		for _, r := range recs[1:] {
			first = append(first, r[0])
		}
		if strings.Join(first, ",") != strings.Join(shown.First, ",") {
			t.Errorf("CSV rows %q, table rows %q", first, shown.First)
		}
		t.Logf("downloaded %d rows", len(recs)-1)
		var status string
		tb.eval(chat(`d.querySelector(".ek-table-status").textContent`), &status)
		if status != "" {
			t.Errorf("status after a whole download: %q", status)
		}
		tb.noProblems()
	})

	t.Run("Download CSV says when the file holds fewer rows than the result", func(t *testing.T) {
		s := startServer(t, "-db", ":memory:", "-vega-dir", dir, "-agent-delay", "0s", "-data-row-limit", "3")
		tb := b.newTab(t, s.base)
		dl := tb.answerWithDownload(t)
		var caption string
		tb.eval(chat(`(d.querySelector(".ek-download").click(), d.querySelector(".ek-table caption").textContent)`), &caption)
		if recs := downloadedCSV(t, dl); len(recs) != 4 {
			t.Fatalf("%d CSV records, want the header and 3 rows", len(recs))
		}
		total := regexp.MustCompile(`(\d+) rows$`).FindStringSubmatch(caption) // the table's caption: "...: 24 rows"
		if total == nil {
			t.Fatalf("caption %q", caption)
		}
		want := "The file holds the first 3 of " + total[1] + " rows."
		tb.waitFor("the status", chat(`d.querySelector(".ek-table-status").textContent !== ""`), 10*time.Second)
		var status string
		tb.eval(chat(`d.querySelector(".ek-table-status").textContent`), &status)
		if status != want {
			t.Errorf("status %q, want %q (caption %q)", status, want, caption)
		}
		tb.noProblems()
	})

	t.Run("a failed sessionId shows the failure and never falls back to the earlier user", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		tb.open("ana")
		tb.ask("revenue by country")
		tb.waitFor("the answer", chat(jsIdle+` && d.querySelector(".ek-table")`), 60*time.Second)
		// The host opens the chat again with a sessionId that fails (used,
		// unknown or expired): ana's token and chat must not come back.
		tb.eval(`(document.getElementById("chat").src = "/embed/chat?sessionId=00000000-0000-0000-0000-000000000000", true)`, nil)
		tb.waitFor("the failure", chat(`d.body && d.body.dataset.exchange === "failed"`), 20*time.Second)
		var got struct {
			Notice, Name, Token, Chat string
			Messages                  int
			Disabled                  bool
		}
		tb.eval(chat(`({ notice: d.getElementById("ek-notice").textContent, name: d.getElementById("ek-name").textContent,
			token: w.sessionStorage.getItem("embedkit.token." + w.location.hash.slice(4)) || "", chat: w.sessionStorage.getItem("embedkit.chat." + w.location.hash.slice(4)) || "",
			messages: d.querySelectorAll(".ek-msg").length, disabled: d.getElementById("ek-input").disabled })`), &got)
		if !strings.Contains(got.Notice, "This chat link could not be opened") {
			t.Errorf("notice %q", got.Notice)
		}
		if got.Name != "" || got.Token != "" || got.Chat != "" || got.Messages != 0 || !got.Disabled {
			t.Errorf("after a failed exchange: name %q, token %q, chat %q, %d messages, input disabled %v", got.Name, got.Token, got.Chat, got.Messages, got.Disabled)
		}
		// The refused sessionId needs a new session: the host is told.
		tb.waitFor("the host to get embedkit:session-expired", `document.body.dataset.sessionExpired === "true"`, 20*time.Second)
		// A reload stays signed out.
		tb.eval(chat(`(w.location.reload(), true)`), nil)
		time.Sleep(200 * time.Millisecond)
		tb.waitFor("the page after reload", chat(`d.body && d.getElementById("ek-notice").textContent.includes("This chat has no session")`), 20*time.Second)
		tb.mu.Lock()
		var rest []string
		for _, p := range tb.problems {
			if !strings.Contains(p, "/api/v1/embed/session/token") && !strings.Contains(p, "status of 4") {
				rest = append(rest, p)
			}
		}
		tb.problems = rest
		tb.mu.Unlock()
		tb.noProblems()
	})

	t.Run("a chat opened without a sessionId says it has no session", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		tb.run(chromedp.Navigate(s.base + "/embed/chat"))
		var got struct {
			Notice   string
			Disabled bool
		}
		tb.waitFor("the notice", self(`d.body && !d.getElementById("ek-notice").hidden`), 20*time.Second)
		tb.eval(self(`({ notice: d.getElementById("ek-notice").textContent, disabled: d.getElementById("ek-input").disabled })`), &got)
		if got.Notice != "This chat has no session. Open it from the application to sign in." || !got.Disabled {
			t.Errorf("notice %q, input disabled %v", got.Notice, got.Disabled)
		}
		tb.noProblems()
	})

	t.Run("nothing the model or the data says is markup or fetches anything", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		// The shell loads with no session at all; the page then reports
		// the missing session, and the test drives its renderers.
		tb.openWithoutSession(s.base)
		var got struct {
			Images, Scripts int
			Links           []string
			Markdown        string
			Table           string
			Chart           bool
		}
		tb.eval(probeJS, &got)
		if got.Images != 0 || got.Scripts != 0 {
			t.Errorf("the rendered content made %d img and %d script elements", got.Images, got.Scripts)
		}
		if len(got.Links) != 1 || got.Links[0] != "https://example.com/x" {
			t.Errorf("links %q, want only https://example.com/x", got.Links)
		}
		for _, want := range []string{"<img src=/canary/md-html onerror=alert(1)>", "[image: pic]", "<script>alert(1)</script>", "bad"} {
			if !strings.Contains(got.Markdown, want) {
				t.Errorf("markdown text %q lacks %q", got.Markdown, want)
			}
		}
		if !strings.Contains(got.Table, "<img src=/canary/cell>") || !strings.Contains(got.Table, "<img src=/canary/col onerror=alert(1)>") {
			t.Errorf("table text %q", got.Table)
		}
		if !got.Chart {
			t.Fatal("the chart with a data URL, an image mark and links did not render")
		}
		// In the chart's frame: a click on every mark follows no link,
		// the spec's usermeta added no action menu, and the frame cannot
		// reach the page's storage.
		frame := tb.chartFrames(1)[0]
		var in struct {
			Location, Storage string
			Actions, Images   int
		}
		frame.eval(self(`(async () => {
			for (const p of d.querySelectorAll("svg path")) p.dispatchEvent(new MouseEvent("click", { bubbles: true }));
			await new Promise((r) => setTimeout(r, 500));
			let storage = "";
			try { storage = String(w.sessionStorage.length); } catch (e) { storage = "refused"; }
			try { storage += " " + w.parent.document.body.dataset.meUrl; } catch (e) { storage += " parent refused"; }
			return { location: w.location.href, storage, actions: d.querySelectorAll(".vega-actions, details").length, images: [...d.querySelectorAll("img, svg image, a")].filter((e) => e.getAttribute("src") || e.getAttribute("href") || e.getAttribute("xlink:href")).length };
		})()`), &in)
		if !strings.HasSuffix(in.Location, "/embed/chat/chart") {
			t.Errorf("a click on a chart link navigated the chart to %q", in.Location)
		}
		if in.Storage != "refused parent refused" {
			t.Errorf("the chart frame reads storage or the page: %q", in.Storage)
		}
		if in.Actions != 0 || in.Images != 0 {
			t.Errorf("the chart frame has %d action menus and %d images or links with an address", in.Actions, in.Images)
		}
		var loc string
		tb.eval(`location.href`, &loc)
		if !strings.HasSuffix(loc, "/embed/chat") {
			t.Errorf("the page navigated to %q", loc)
		}
		tb.mu.Lock()
		for _, u := range tb.requests {
			if strings.Contains(u, "canary") {
				t.Errorf("the page requested %s", u)
			}
		}
		tb.mu.Unlock()
		var csp []string
		tb.eval(`window.__cspViolations || []`, &csp)
		frame.eval(self(`window.__cspViolations || []`), &csp)
		if len(csp) > 0 {
			t.Errorf("CSP violations: %q", csp)
		}
	})

	t.Run("readable at 360 px and usable with the keyboard", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		tb.run(chromedp.EmulateViewport(360, 740))
		tb.open("ana")
		// Keyboard only: the question box has the focus; Enter sends.
		tb.run(chromedp.Sleep(100 * time.Millisecond))
		var focused string
		tb.eval(chat(`d.activeElement && d.activeElement.id`), &focused)
		if focused != "ek-input" {
			t.Fatalf("focus on %q, want the question box", focused)
		}
		tb.eval(chat(`(w.focus(), d.getElementById("ek-input").focus(), true)`), nil)
		tb.run(chromedp.KeyEvent("revenue by country"), chromedp.KeyEvent("\r"))
		tb.waitFor("the answer", chat(jsIdle+` && d.querySelector(".ek-table")`), 60*time.Second)
		tb.waitFor("a chart", chat(jsHasChart), 20*time.Second)
		var overflow int
		tb.eval(chat(`d.documentElement.scrollWidth - d.documentElement.clientWidth`), &overflow)
		if overflow > 0 {
			t.Errorf("the page is %d px wider than a 360 px screen", overflow)
		}
		var live string
		tb.eval(chat(`d.getElementById("ek-log").getAttribute("aria-live")`), &live)
		if live != "polite" {
			t.Errorf("aria-live %q on the conversation", live)
		}
		tb.screenshot("360px")
		tb.noProblems()
	})

	t.Run("429 and 409 read as messages a person understands", func(t *testing.T) {
		for _, c := range []struct {
			status  int
			headers map[string]string
			body    string
			want    string
		}{
			{429, map[string]string{"Retry-After": "7"}, `{"error":"too many running turns for this user"}`, "Please wait 7 seconds and try again."},
			{409, nil, `{"error":"thread is full: start a new chat"}`, "This conversation is full. Start a new chat"},
			{409, nil, `{"error":"a turn of this thread is running"}`, "An answer is still being written"},
		} {
			tb := b.newTab(t, s.base)
			tb.open("liam")
			tb.answerStream(c.status, c.headers, c.body)
			tb.ask("revenue by country")
			tb.waitFor(fmt.Sprintf("the %d message", c.status), chat(`d.getElementById("ek-notice").textContent.includes(`+strconvQuote(c.want)+`)`), 20*time.Second)
			tb.waitFor("the question box back", chat(jsIdle+` && !d.getElementById("ek-input").disabled`), 10*time.Second)
		}
	})

	t.Run("works in a cross-site iframe without cookies", func(t *testing.T) {
		// The host is http://localhost:<port>, the chat http://127.0.0.1:<port>:
		// different sites, so the chat's cookies would be third-party.
		ctx := context.Background()
		c := embedsession.NewClient(s.base, "sk-acme-admin")
		sid, err := c.GenerateSession(ctx, embedsession.SessionRequest{DeploymentID: 1, ExternalID: "xsite",
			UserAttributes: []embedsession.UserAttribute{{Name: "country", Value: embedsession.Value("France")}}})
		if err != nil {
			t.Fatal(err)
		}
		host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprintf(w, `<!doctype html><title>other site</title><iframe id="chat" style="width:900px;height:700px" src="%s/embed/chat?sessionId=%s"></iframe>`, s.base, sid)
		}))
		defer host.Close()
		tb := b.newTab(t, s.base)
		tb.run(chromedp.Navigate(strings.Replace(host.URL, "127.0.0.1", "localhost", 1)))
		frame := tb.frameTab("/embed/chat")
		frame.waitFor("the chat page to be ready", self(`d.body && d.body.dataset.ready === "true"`), 30*time.Second)
		frame.ask2("revenue by country")
		frame.waitFor("the answer", self(jsIdle+` && d.querySelector(".ek-table")`+` && `+jsHasChart), 60*time.Second)
		var rows [][]string
		frame.eval(self(jsTable), &rows)
		if len(rows) != 1 || rows[0][0] != "France" {
			t.Errorf("rows %q", rows)
		}
		// A reload works from sessionStorage alone.
		frame.eval(self(`(w.location.reload(), true)`), nil)
		time.Sleep(300 * time.Millisecond)
		frame = tb.frameTab("/embed/chat")
		frame.waitFor("the chat after reload", self(`d.body && d.body.dataset.ready === "true" && d.querySelector(".ek-table")`), 30*time.Second)
		var cookies string
		frame.eval(self(`d.cookie`), &cookies)
		if cookies != "" {
			t.Errorf("the chat has cookies %q", cookies)
		}
		frame.noProblems()
		tb.noProblems()
	})

	t.Run("two embeds in one tab keep their own users across a reload", func(t *testing.T) {
		// Frames of one origin in one tab share sessionStorage: a reloaded
		// frame must find its own token and chat, not the other's.
		ctx := context.Background()
		c := embedsession.NewClient(s.base, "sk-acme-admin")
		sids := map[string]string{}
		for id, user := range map[string][2]string{"a": {"two-alice", "Alice Two"}, "b": {"two-bob", "Bob Two"}} {
			name := user[1]
			sid, err := c.GenerateSession(ctx, embedsession.SessionRequest{DeploymentID: 1, ExternalID: user[0],
				UserProfile:    &embedsession.UserProfile{DisplayName: &name},
				UserAttributes: []embedsession.UserAttribute{{Name: "country", Value: embedsession.Value("France")}}})
			if err != nil {
				t.Fatal(err)
			}
			sids[id] = sid
		}
		host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprintf(w, `<!doctype html><title>two embeds</title>`+
				`<iframe style="width:700px;height:600px" src="%[1]s/embed/chat?frame=a&sessionId=%[2]s"></iframe>`+
				`<iframe style="width:700px;height:600px" src="%[1]s/embed/chat?frame=b&sessionId=%[3]s"></iframe>`, s.base, sids["a"], sids["b"])
		}))
		defer host.Close()
		tb := b.newTab(t, s.base)
		tb.run(chromedp.Navigate(strings.Replace(host.URL, "127.0.0.1", "localhost", 1)))
		ready := self(`d.body && d.body.dataset.ready === "true"`)
		a, bf := tb.frameTab("frame=a"), tb.frameTab("frame=b")
		a.waitFor("frame a", ready, 30*time.Second)
		bf.waitFor("frame b", ready, 30*time.Second)
		a.ask2("revenue by country")
		a.waitFor("a's answer", self(jsIdle+` && d.querySelector(".ek-table")`), 60*time.Second)
		bf.ask2("orders by month")
		bf.waitFor("b's answer", self(jsIdle+` && d.querySelector(".ek-assistant")`), 60*time.Second)
		a.eval(self(`(w.location.reload(), true)`), nil)
		time.Sleep(300 * time.Millisecond)
		a = tb.frameTab("frame=a")
		a.waitFor("frame a after its reload", self(`d.body && d.body.dataset.ready === "true" && d.querySelector(".ek-user-text")`), 30*time.Second)
		var got struct {
			Name      string   `json:"name"`
			Questions []string `json:"questions"`
		}
		a.eval(self(`({ name: d.getElementById("ek-name").textContent, questions: [...d.querySelectorAll(".ek-user-text")].map((p) => p.textContent) })`), &got)
		if got.Name != "Alice Two" || len(got.Questions) != 1 || got.Questions[0] != "revenue by country" {
			t.Errorf("frame a after its reload: %+v, want Alice Two with her own question", got)
		}
		a.noProblems()
		bf.noProblems()
		tb.noProblems()
	})

	t.Run("the CDN files load with integrity, and tampered ones do not run", func(t *testing.T) {
		for _, tampered := range []bool{false, true} {
			cdn := fakeCDN(t, dir, tampered)
			st := memstore.New()
			defer st.Close()
			page := chatpage.New(st, chatpage.FixedAgent("7"), chatpage.WithVegaCDN(cdn.URL+"/npm/"))
			mux := http.NewServeMux()
			for _, rt := range page.Routes() {
				mux.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
			}
			srv := httptest.NewServer(mux)
			defer srv.Close()
			tb := b.newTab(t, srv.URL)
			// The chat runs with or without the chart libraries.
			tb.openWithoutSession(srv.URL)
			var drawn bool
			tb.eval(cdnChartJS, &drawn)
			if tampered {
				var says string
				tb.eval(`document.querySelector(".ek-chart").textContent`, &says)
				if drawn {
					t.Error("a tampered vega.min.js ran")
				}
				// The chart says what failed, from where, and the fix.
				for _, want := range []string{"Charts could not be loaded: vega did not load from " + cdn.URL + "/npm/", "chatpage.LoadVega", "npm ci --prefix .ci/vega", "-vega-dir"} {
					if !strings.Contains(says, want) {
						t.Errorf("the chart box says %q, want %q in it", says, want)
					}
				}
				continue
			}
			if !drawn {
				t.Error("no chart with the CDN files")
			}
			tb.mu.Lock()
			var rest []string
			for _, p := range tb.problems {
				if !strings.Contains(p, "/embed/chat/me") { // 401: this page has no session
					rest = append(rest, p)
				}
			}
			tb.problems = rest
			tb.mu.Unlock()
			tb.noProblems()
		}
	})

	t.Run("a broken picture falls back to initials", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		tb.open("yuki")
		tb.waitFor("initials", chat(`!d.getElementById("ek-initials").hidden && !d.querySelector(".ek-avatar-img")`), 10*time.Second)
		var initials string
		tb.eval(chat(`d.getElementById("ek-initials").textContent`), &initials)
		if initials != "YT" {
			t.Errorf("initials %q, want YT", initials)
		}
	})
}

// finalOfThread reads the thread's history with the page's token and
// returns its final answer.
func finalOfThread(t *testing.T, base, token, chatID string) string {
	t.Helper()
	body := strings.NewReader(`{"chatId":` + strconvQuote(chatID) + `}`)
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/public/acme/agents/7/chat/stream-chat-state", body)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var final string
	dec := json.NewDecoder(res.Body)
	for {
		var m struct {
			ID    string `json:"id"`
			State struct {
				Messages []struct {
					Role      string   `json:"role"`
					Content   string   `json:"content"`
					GraphPath []string `json:"graphPath"`
				} `json:"messages"`
			} `json:"state"`
		}
		if err := dec.Decode(&m); err != nil {
			break
		}
		for _, h := range m.State.Messages {
			if h.Role == "assistant" && len(h.GraphPath) > 0 && h.GraphPath[0] == "final" {
				final = h.Content
			}
		}
	}
	return final
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// probeJS renders hostile model output and data with the page's own
// modules, clicks the chart, and reports what the DOM holds.
const probeJS = `(async () => {
  const { renderMarkdown } = await import("/embed/chat/assets/markdown.js");
  const { renderTool } = await import("/embed/chat/assets/render.js");
  const md = document.createElement("div");
  md.append(renderMarkdown([
    "# Title",
    "<img src=/canary/md-html onerror=alert(1)>",
    "![pic](/canary/md-image) ![](http://127.0.0.1:1/canary/abs)",
    "[bad](javascript:alert(1)) [ok](https://example.com/x) [rel](/canary/rel) **bold** _em_ ` + "`code`" + `",
    "- a",
    "- b",
    "<script>alert(1)</script>",
  ].join("\n")));
  document.body.append(md);
  const spec = {
    $schema: "https://vega.github.io/schema/vega-lite/v5.json",
    usermeta: { embedOptions: { actions: true, editorUrl: "/canary/editor", sourceHeader: "<script>alert(1)</script>", loader: { baseURL: "/canary/" } } },
    // Left out before drawing, as every data source a spec names is (a
    // lookup's too: TestBrowserHostileToolCallsAndCharts).
    data: { url: "/canary/data.json" },
    layer: [
      { mark: "bar", encoding: { x: { field: "label", type: "nominal" }, y: { field: "v", type: "quantitative" }, href: { value: "/canary/href" } } },
      { mark: { type: "image", url: "/canary/image.png", width: 10, height: 10 }, encoding: { x: { field: "label", type: "nominal" }, y: { field: "v", type: "quantitative" } } },
    ],
  };
  const tool = document.createElement("div");
  document.body.append(tool);
  renderTool(tool, { id: "t", role: "assistant", toolCall: { name: "svcSqlApi",
    input: JSON.stringify({ sqlQuery: "<b>SELECT 1</b>", queryTitle: "<i>t</i>" }),
    result: JSON.stringify({ schema: [{ name: "label", column_type: "string" }, { name: "v", column_type: "number" }, { name: "<img src=/canary/col onerror=alert(1)>", column_type: "string" }],
      data: [["<img src=/canary/cell>", 1, "x"], ["b", 2, "y"]], totalRows: 2, vegaSpec: JSON.stringify(spec) }) } });
  for (let i = 0; i < 200 && tool.querySelector(".ek-chart[data-state=loading]"); i++) await new Promise((r) => setTimeout(r, 50));
  return {
    images: document.querySelectorAll("img").length,
    scripts: document.querySelectorAll("body script").length,
    links: [...document.querySelectorAll("body a")].map((a) => a.href),
    markdown: md.textContent,
    table: tool.querySelector("table").textContent,
    chart: !!tool.querySelector(".ek-chart[data-state=drawn]"),
  };
})()`

// answerStream makes the browser answer every chat request of the tab
// with status, headers and body instead of sending it (CDP Fetch domain).
func (tb *tab) answerStream(status int, headers map[string]string, body string) {
	tb.t.Helper()
	paused := make(chan fetch.RequestID, 16)
	if err := chromedp.Listen(tb.ctx, func(ev any) {
		if e, ok := ev.(*fetch.EventRequestPaused); ok {
			select {
			case paused <- e.RequestID:
			default:
			}
		}
	}); err != nil {
		tb.t.Fatal(err)
	}
	hs := []*fetch.HeaderEntry{{Name: "Content-Type", Value: "application/json"}}
	for k, v := range headers {
		hs = append(hs, &fetch.HeaderEntry{Name: k, Value: v})
	}
	go func() {
		for {
			select {
			case id := <-paused:
				_, _ = chromedp.Call(tb.ctx, fetch.FulfillRequest, fetch.FulfillRequestParams{RequestID: id, ResponseCode: int64(status), ResponseHeaders: hs, Body: []byte(body)})
			case <-tb.ctx.Done():
				return
			}
		}
	}()
	if _, err := chromedp.Call(tb.ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/chat/stream-chat-state"}}}); err != nil {
		tb.t.Fatal(err)
	}
}

// fakeCDN serves the npm packages of dir in a CDN's layout
// (/npm/<package>@<version>/<file>), with CORS; tampered adds a byte to
// vega.min.js.
func fakeCDN(t *testing.T, dir string, tampered bool) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, ok := strings.CutPrefix(r.URL.Path, "/npm/")
		pkgAt, file, ok2 := strings.Cut(rest, "/")
		pkg, _, ok3 := strings.Cut(pkgAt, "@")
		if !ok || !ok2 || !ok3 || strings.Contains(file, "..") {
			http.NotFound(w, r)
			return
		}
		b, err := os.ReadFile(filepath.Join(dir, pkg, filepath.FromSlash(file)))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		if tampered && strings.HasSuffix(file, "vega.min.js") {
			b = append(b, ' ')
		}
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Content-Type", "text/javascript")
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// cdnChartJS draws a chart with the page's renderer and reports whether
// an svg appeared.
const cdnChartJS = `(async () => {
  const { renderTool } = await import("/embed/chat/assets/render.js");
  const box = document.createElement("div");
  document.body.append(box);
  renderTool(box, { id: "t", role: "assistant", toolCall: { name: "svcSqlApi", input: "{}",
    result: JSON.stringify({ schema: [{ name: "k", column_type: "string" }, { name: "v", column_type: "number" }], data: [["a", 1], ["b", 2]], totalRows: 2,
      vegaSpec: JSON.stringify({ mark: "bar", encoding: { x: { field: "k", type: "nominal" }, y: { field: "v", type: "quantitative" } } }) }) } });
  for (let i = 0; i < 200 && box.querySelector(".ek-chart[data-state=loading]"); i++) await new Promise((r) => setTimeout(r, 50));
  return !!box.querySelector(".ek-chart[data-state=drawn]");
})()`
