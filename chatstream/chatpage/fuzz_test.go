package chatpage_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/embedkit/embedkit/chatstream/chatpage"
	"github.com/embedkit/embedkit/store/memstore"
)

// FuzzTheme checks that whatever WithTheme accepts (without a panic) stays one declaration
// of theme.css: no way out of the rule, no second property, no URL.
func FuzzTheme(f *testing.F) {
	f.Add("--ek-accent", "#0f766e")
	f.Add("--ek-font", `"Inter", sans-serif`)
	f.Add("--ek-bg", "url(https://evil.example/x.png)")
	f.Add("--ek-bg", "red; } body { display: none")
	f.Add("--ek-bg", "red\\3b x")
	f.Add("--x", "/* */ red")
	f.Add("--ek-font", `"Inter, sans-serif`)
	f.Add("ek-accent", "red")
	st := memstore.New()
	defer st.Close()
	f.Fuzz(func(t *testing.T, name, value string) {
		opt, ok := theme(name, value)
		if !ok {
			return
		}
		h := chatpage.New(st, chatpage.FixedAgent("7"), opt)
		var css string
		for _, rt := range h.Routes() {
			if strings.HasSuffix(rt.Pattern, "/theme.css") {
				rec := httptest.NewRecorder()
				rt.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, rt.Pattern, nil))
				css = rec.Body.String()
			}
		}
		body, ok := strings.CutPrefix(css, ":root {\n  ")
		body, ok2 := strings.CutSuffix(body, ";\n}\n")
		if !ok || !ok2 {
			t.Fatalf("theme.css %q", css)
		}
		if strings.ContainsAny(body, "{};\\<>\n") || strings.Contains(strings.ToLower(body), "url(") || strings.Count(body, ":") != 1 ||
			strings.Count(body, `"`)%2 != 0 || strings.Count(body, "'")%2 != 0 {
			t.Fatalf("accepted %q: %q; theme.css %q", name, value, css)
		}
	})
}

// theme returns WithTheme's option, or false when WithTheme refuses the
// variable (it panics).
func theme(name, value string) (opt chatpage.Option, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return chatpage.WithTheme(map[string]string{name: value}), true
}
