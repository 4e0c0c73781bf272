package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
)

// The hostile-output browser test: a language model (a fake
// OpenAI-compatible endpoint behind the example server's -agent llm)
// writes a chart spec and Markdown built to steal the session token, to
// make the browser send requests and to freeze the page. Every request
// of the browser, from every frame, goes through a recording proxy, so
// that a request to any other origin is seen even when nothing shows it.

// proxyLog is a proxy that forwards requests for one host (the example
// server) and refuses, and records, everything else.
type proxyLog struct {
	host string // host:port forwarded
	addr string // the proxy's own URL
	rp   *httputil.ReverseProxy

	mu   sync.Mutex
	reqs []proxied
}

type proxied struct {
	method, url string
	header      http.Header
}

func newProxyLog(t *testing.T, base string) *proxyLog {
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxyLog{host: u.Host}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme = "http"
			r.Out.URL.Host = p.host
			r.Out.Host = r.In.Host
		},
		FlushInterval: -1, // the chat streams
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	p.addr = srv.URL
	return p
}

func (p *proxyLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u := r.URL.String()
	if r.Method == http.MethodConnect {
		u = "https://" + r.Host
	}
	p.mu.Lock()
	p.reqs = append(p.reqs, proxied{r.Method, u, r.Header.Clone()})
	p.mu.Unlock()
	if r.Method == http.MethodConnect || r.URL.Host != p.host {
		http.Error(w, "the test proxy refuses requests to other origins", http.StatusBadGateway)
		return
	}
	p.rp.ServeHTTP(w, r)
}

func (p *proxyLog) requests() []proxied {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]proxied(nil), p.reqs...)
}

// adversarialMarkdown is a 100 KB message built to make a backtracking
// Markdown renderer take quadratic time or worse.
func adversarialMarkdown() string {
	parts := []string{
		"# " + strings.Repeat(" ", 6000) + "x y #",
		strings.Repeat("[x](", 3000),
		strings.Repeat("*_", 3000) + "a",
		strings.Repeat("**", 2000),
		strings.Repeat(" ``", 1500) + "`",
		strings.Repeat("![", 2000),
		strings.Repeat("[[[[", 1000) + "]",
		strings.Repeat("_a ", 2000),
		"- " + strings.Repeat(" ", 5000) + "x",
		"```" + strings.Repeat(" ", 5000) + "x y",
		"```",
	}
	s := strings.Join(parts, "\n")
	for len(s) < 100*1024 {
		s += "\n" + strings.Repeat("*a _b [c](d **e `f ", 50)
	}
	return s[:100*1024]
}

const hostileMarkdown = "Here is what I found.\n\n" +
	"<img src=http://evil.example/md-html onerror=alert(1)> ![t](http://evil.example/md-image) " +
	"[click](javascript:alert(document.cookie)) [site](http://evil.example/link) <script>alert(1)</script>\n\n"

// hostileSpec is the chart spec of the model: it tries to replace the
// page's vega-embed options, load data and images from another origin,
// show an image in a tooltip, follow a link, and read the token.
var hostileSpec = map[string]any{
	"$schema": "https://vega.github.io/schema/vega-lite/v5.json",
	"usermeta": map[string]any{"embedOptions": map[string]any{
		"actions":   map[string]any{"export": true, "source": true, "editor": true, "compiled": true},
		"editorUrl": "http://evil.example/editor", "sourceHeader": "<script>alert(1)</script>",
		"i18n":   map[string]any{"EDITOR_ACTION": "Open securely"},
		"loader": map[string]any{"baseURL": "http://evil.example/"},
	}},
	"data": map[string]any{"url": "http://evil.example/data.json"},
	"params": []any{map[string]any{"name": "leak", "value": "",
		"on": []any{map[string]any{"events": "click", "update": "event.view.sessionStorage['embedkit.token']"}}}},
	"layer": []any{
		map[string]any{"mark": "bar", "encoding": map[string]any{
			"x":       map[string]any{"field": "country", "type": "nominal"},
			"y":       map[string]any{"field": "orders", "type": "quantitative"},
			"href":    map[string]any{"field": "image"},
			"tooltip": []any{map[string]any{"field": "country"}, map[string]any{"field": "image", "title": "image"}},
		}},
		map[string]any{"mark": map[string]any{"type": "image", "width": 10, "height": 10},
			"encoding": map[string]any{"x": map[string]any{"field": "country", "type": "nominal"}, "url": map[string]any{"field": "image"}}},
		map[string]any{"mark": "text", "encoding": map[string]any{"text": map[string]any{"value": map[string]any{"expr": "leak"}}}},
	},
}

func TestBrowserHostileModel(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("browser tests are not short")
	}
	dir := vegaDir(t)
	spec, _ := json.Marshal(hostileSpec)
	query, _ := json.Marshal(map[string]string{
		"sqlQuery":    "SELECT country, COUNT(DISTINCT order_id) AS orders, 'http://evil.example/img.png' AS image FROM orders GROUP BY country",
		"queryTitle":  "Orders <b>by</b> country",
		"description": "<img src=http://evil.example/desc>",
		"userRequest": "orders", "vegaSpec": string(spec),
	})
	adv := adversarialMarkdown()
	answer := []string{sseChunk(map[string]any{"role": "assistant", "content": hostileMarkdown}, nil)}
	for i := 0; i < len(adv); i += 10 * 1024 { // streamed in pieces: rendered while it grows
		answer = append(answer, sseChunk(map[string]any{"content": adv[i:min(i+10*1024, len(adv))]}, nil))
	}
	answer = append(answer, sseChunk(map[string]any{}, "stop"))
	orders, _ := json.Marshal(map[string]string{"sqlQuery": "SELECT DISTINCT order_id FROM orders ORDER BY order_id", "queryTitle": "My orders", "description": "d", "userRequest": "u"})
	f := &fakeModel{replies: [][]string{
		{sseToolCalls([2]string{"svcSqlApi", string(query)}), sseChunk(map[string]any{}, "tool_calls")},
		answer,
		// A second question: more rows than the table shows.
		{sseToolCalls([2]string{"svcSqlApi", string(orders)}), sseChunk(map[string]any{}, "tool_calls")},
		{sseChunk(map[string]any{"role": "assistant", "content": "Here they are."}, nil), sseChunk(map[string]any{}, "stop")},
	}}
	endpoint := httptest.NewServer(f)
	defer endpoint.Close()
	t.Setenv("OPENAI_BASE_URL", endpoint.URL+"/v1")
	t.Setenv("OPENAI_API_KEY", "sk-model-key")
	s := startServer(t, "-db", ":memory:", "-agent", "llm", "-llm-model", "test-model", "-vega-dir", dir)
	proxy := newProxyLog(t, s.base)
	b := newBrowser(t, chromedp.ProxyServer(proxy.addr), chromedp.Flag("proxy-bypass-list", "<-loopback>"))

	tb := b.newTab(t, s.base)
	tb.open("ana")
	var token string
	tb.eval(chat(`w.sessionStorage.getItem("embedkit.token." + w.location.hash.slice(4))`), &token)
	if len(token) < 16 {
		t.Fatalf("token %q", token)
	}
	// Long tasks of the chat page while the answer streams in.
	tb.eval(chat(`(w.__longTasks = [], new w.PerformanceObserver((l) => { for (const e of l.getEntries()) w.__longTasks.push(e.duration); }).observe({ type: "longtask" }), true)`), nil)
	tb.ask("orders by country")
	tb.waitFor("the answer", chat(jsIdle+` && d.querySelector(".ek-table") && d.querySelector(".ek-chart:not([data-state=loading])")`), 90*time.Second)

	var state string
	tb.eval(chat(`d.querySelector(".ek-chart").dataset.state`), &state)
	if state != "drawn" {
		var says string
		tb.eval(chat(`d.querySelector(".ek-chart").textContent`), &says)
		t.Fatalf("the hostile chart is %s: %q", state, says)
	}
	frame := tb.chartFrames(1)[0]
	// Move over every bar (tooltips, the leak handler), then click them.
	var bars int
	frame.eval(self(`d.querySelectorAll("svg path.mark-rect, svg g.mark-rect path").length`), &bars)
	if bars == 0 {
		t.Fatal("no bars in the chart")
	}
	tb.hover(frame, `d.querySelector("svg path.mark-rect, svg g.mark-rect path")`)
	frame.waitFor("the tooltip", self(`(() => { const t = d.querySelector(".ek-chart-tooltip"); return t && !t.hidden; })()`), 10*time.Second)
	var in struct {
		Tooltip, Text, Location string
		Actions, Addresses      int
	}
	frame.eval(self(`(async () => {
		const tip = d.querySelector(".ek-chart-tooltip").textContent;
		for (const p of d.querySelectorAll("svg path")) p.dispatchEvent(new MouseEvent("click", { bubbles: true }));
		await new Promise((r) => setTimeout(r, 500));
		return { tooltip: tip, text: d.documentElement.textContent, location: w.location.href,
			actions: d.querySelectorAll(".vega-actions, details, a").length,
			addresses: [...d.querySelectorAll("#chart *, .ek-chart-tooltip *")].filter((e) => e.getAttribute("src") || e.getAttribute("href") || e.getAttribute("xlink:href")).length };
	})()`), &in)
	if strings.Contains(in.Tooltip, "evil.example") || !strings.Contains(in.Tooltip, "Germany") {
		t.Errorf("tooltip %q: want the country as text and no image", in.Tooltip)
	}
	if in.Actions != 0 || in.Addresses != 0 {
		t.Errorf("the chart frame has %d action menus or links and %d elements with an address", in.Actions, in.Addresses)
	}
	if strings.Contains(in.Text, token) || strings.Contains(in.Text, "Open securely") {
		t.Errorf("the chart frame shows the token or the spec's action menu: %q", in.Text)
	}
	if !strings.HasSuffix(in.Location, "/embed/chat/chart") {
		t.Errorf("the chart frame navigated to %q", in.Location)
	}

	// The page: the Markdown is text, nothing is loaded, the token is
	// nowhere on screen.
	var page struct {
		Text            string
		Images, Scripts int
		Links           []string
		RenderMS        float64
		LayoutMS        float64
		LongTasks       []float64
	}
	tb.eval(chat(`(async () => {
		const { renderMarkdown } = await import("/embed/chat/assets/markdown.js");
		const text = [...Object.values(JSON.parse(w.sessionStorage.getItem("embedkit.chat." + w.location.hash.slice(4))).msgs)].map((m) => m.content || "").sort((a, b) => b.length - a.length)[0];
		const t0 = w.performance.now();
		const frag = renderMarkdown(text);
		const renderMS = w.performance.now() - t0;
		const art = d.createElement("article");
		art.className = "ek-msg ek-assistant";
		const box = d.createElement("div");
		box.className = "ek-md";
		art.append(box);
		d.getElementById("ek-log").append(art);
		box.append(frag);
		void box.offsetHeight; // lay it out
		const layoutMS = w.performance.now() - t0;
		art.remove();
		return { text: d.body.innerText, images: d.querySelectorAll("img:not(.ek-avatar-img)").length, scripts: d.querySelectorAll("body script").length,
			links: [...d.querySelectorAll(".ek-log a")].map((a) => a.href), renderMS, layoutMS, longTasks: w.__longTasks };
	})()`), &page)
	if strings.Contains(page.Text, token) {
		t.Error("the page shows the token")
	}
	if page.Images != 0 || page.Scripts != 0 {
		t.Errorf("the answer made %d images and %d scripts", page.Images, page.Scripts)
	}
	for _, l := range page.Links {
		if !strings.HasPrefix(l, "http://evil.example/link") {
			t.Errorf("link %q", l)
		}
	}
	for _, want := range []string{"<img src=http://evil.example/md-html onerror=alert(1)>", "[image: t]", "<script>alert(1)</script>", "Orders <b>by</b> country"} {
		if !strings.Contains(page.Text, want) {
			t.Errorf("the page does not show %q as text", want)
		}
	}
	longest := 0.0
	for _, d := range page.LongTasks {
		longest = max(longest, d)
	}
	t.Logf("100 KB adversarial Markdown: renderMarkdown %.1f ms, with layout %.1f ms; longest task of the page while it streamed in: %.0f ms (%d long tasks)", page.RenderMS, page.LayoutMS, longest, len(page.LongTasks))
	// Generous bounds for a busy CI machine (two shared cores can slow
	// the page tenfold); a backtracking renderer takes minutes on this
	// message.
	if page.RenderMS > 3000 || longest > 8000 {
		t.Errorf("the adversarial message froze the page: render %.0f ms, longest task %.0f ms", page.RenderMS, longest)
	}

	// Download CSV gets every row of a result the table shows 100 of.
	dl := t.TempDir()
	if _, err := chromedp.CallBrowser(tb.ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
		Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dl}); err != nil {
		t.Fatal(err)
	}
	tb.ask("all my orders")
	tb.waitFor("the orders", chat(jsIdle+` && d.querySelectorAll(".ek-table").length === 2`), 60*time.Second)
	var caption string
	tb.eval(chat(`(() => { const t = [...d.querySelectorAll(".ek-table")].at(-1); [...d.querySelectorAll(".ek-download")].at(-1).click(); return t.caption.textContent; })()`), &caption)
	recs := downloadedCSV(t, dl)
	var total int
	if _, err := fmt.Sscanf(caption[strings.Index(caption, "first"):], "first 100 of %d rows", &total); err != nil || total <= 100 {
		t.Fatalf("caption %q: want more than 100 rows", caption)
	}
	if len(recs) != total+1 || recs[0][0] != "order_id" {
		t.Errorf("the CSV has %d lines (header %q), want a header and %d rows", len(recs), recs[0], total)
	}
	t.Logf("Download CSV: %d rows, the table shows 100", len(recs)-1)

	// Every request of every frame: none to another origin, and the
	// token only in the Authorization header of the chat API and /me.
	for _, r := range proxy.requests() {
		u, _ := url.Parse(r.url)
		if u != nil && browserService(u.Hostname()) {
			continue
		}
		if u == nil || u.Host != proxy.host {
			t.Errorf("the browser requested another origin: %s %s", r.method, r.url)
			continue
		}
		if strings.Contains(r.url, token) {
			t.Errorf("the token is in a URL: %s", r.url)
		}
		for k, vs := range r.header {
			for _, v := range vs {
				if strings.Contains(v, token) && (k != "Authorization" || (!strings.HasPrefix(u.Path, "/api/v1/public/") && u.Path != "/embed/chat/me")) {
					t.Errorf("the token went to %s %s in %s", r.method, r.url, k)
				}
			}
		}
	}
	if n := len(proxy.requests()); n < 5 {
		t.Errorf("the proxy saw %d requests: is the browser using it?", n)
	}
}

// browserService reports whether host is one that Chromium itself calls
// (component updates, sign-in, time): no page content names them.
func browserService(host string) bool {
	for _, d := range []string{"google.com", "googleapis.com", "gvt1.com", "gstatic.com"} {
		if host == d || strings.HasSuffix(host, "."+d) {
			return true
		}
	}
	return false
}
