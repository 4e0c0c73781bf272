package main

import (
	"os"
	"testing"
)

// TestBrowserMarkdownElementBudget: a message made of little else than
// markup makes about 20,000 elements at most, whatever its size; the rest
// shows as plain text (its line breaks as spaces: laying out half a
// million short lines holds the page too). Without the bound, 3 MiB of "*a* " made 800,000
// elements and held the page (and its Stop button) for about 10 s.
func TestBrowserMarkdownElementBudget(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("browser tests are not short")
	}
	s := startServer(t, "-db", ":memory:")
	b := newBrowser(t)
	tb := b.newTab(t, s.base)
	tb.openWithoutSession(s.base)
	var got []struct {
		Name               string
		Elements, TextLen  int
		Tail               bool
		RenderMS, LayoutMS float64
	}
	tb.eval(`(async () => {
  const { renderMarkdown } = await import("/embed/chat/assets/markdown.js");
  const out = [];
  for (const [name, text] of [
    ["emphasis", "*a* ".repeat(786432) + "end *x*"],
    ["lines", "a\n".repeat(500000) + "end *x*"],
    ["list", "- *a* [b](https://example.test/b)\n".repeat(100000) + "- end *x*"],
    ["headings", "# *a*\n".repeat(100000) + "end *x*"],
  ]) {
    const t0 = performance.now();
    const frag = renderMarkdown(text);
    const renderMS = performance.now() - t0;
    const box = document.createElement("div");
    box.className = "ek-md";
    document.body.append(box);
    box.append(frag);
    void box.offsetHeight; // lay it out
    const layoutMS = performance.now() - t0;
    out.push({ name, elements: box.querySelectorAll("*").length, textLen: box.textContent.length,
      tail: box.textContent.endsWith("*x*"), renderMS, layoutMS });
    box.remove();
  }
  return out;
})()`, &got)
	if len(got) != 4 {
		t.Fatalf("results %+v", got)
	}
	for _, g := range got {
		t.Logf("%s: %d elements, render %.0f ms, with layout %.0f ms", g.Name, g.Elements, g.RenderMS, g.LayoutMS)
		if g.Elements > 20010 {
			t.Errorf("%s: %d elements, want about 20,000 at most", g.Name, g.Elements)
		}
		// The end is past the budget: it shows as plain text.
		if !g.Tail || g.TextLen == 0 {
			t.Errorf("%s: the message's end is not shown as written (text of %d characters)", g.Name, g.TextLen)
		}
	}
}
