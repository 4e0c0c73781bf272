package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// answerStreams answers the tab's chat requests in order with the given
// bodies (status 200, NDJSON; "FAIL" refuses the connection); requests
// past the list go to the server.
func (tb *tab) answerStreams(bodies ...string) {
	tb.t.Helper()
	var mu sync.Mutex
	n := 0
	paused := make(chan fetch.RequestID, 16)
	if err := chromedp.Listen(tb.ctx, func(ev any) {
		if e, ok := ev.(*fetch.EventRequestPaused); ok {
			paused <- e.RequestID
		}
	}); err != nil {
		tb.t.Fatal(err)
	}
	go func() {
		for {
			select {
			case id := <-paused:
				mu.Lock()
				i := n
				n++
				mu.Unlock()
				if i < len(bodies) && bodies[i] == "FAIL" {
					_, _ = chromedp.Call(tb.ctx, fetch.FailRequest, fetch.FailRequestParams{RequestID: id, ErrorReason: network.ErrorReasonConnectionRefused})
				} else if i < len(bodies) {
					_, _ = chromedp.Call(tb.ctx, fetch.FulfillRequest, fetch.FulfillRequestParams{RequestID: id, ResponseCode: 200,
						ResponseHeaders: []*fetch.HeaderEntry{{Name: "Content-Type", Value: "application/x-ndjson"}}, Body: []byte(bodies[i])})
				} else {
					_, _ = chromedp.Call(tb.ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: id})
				}
			case <-tb.ctx.Done():
				return
			}
		}
	}()
	if _, err := chromedp.Call(tb.ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/chat/stream-chat-state"}}}); err != nil {
		tb.t.Fatal(err)
	}
}

// answerOnce answers the tab's first request whose URL matches pattern
// with status and body (status 0: the connection fails), and lets every
// later one through.
func (tb *tab) answerOnce(pattern string, status int, body string) {
	tb.t.Helper()
	paused := make(chan fetch.RequestID, 16)
	if err := chromedp.Listen(tb.ctx, func(ev any) {
		if e, ok := ev.(*fetch.EventRequestPaused); ok {
			paused <- e.RequestID
		}
	}); err != nil {
		tb.t.Fatal(err)
	}
	go func() {
		first := true
		for {
			select {
			case id := <-paused:
				switch {
				case !first:
					_, _ = chromedp.Call(tb.ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: id})
				case status == 0:
					_, _ = chromedp.Call(tb.ctx, fetch.FailRequest, fetch.FailRequestParams{RequestID: id, ErrorReason: network.ErrorReasonConnectionReset})
				default:
					_, _ = chromedp.Call(tb.ctx, fetch.FulfillRequest, fetch.FulfillRequestParams{RequestID: id, ResponseCode: int64(status),
						ResponseHeaders: []*fetch.HeaderEntry{{Name: "Content-Type", Value: "application/json"}}, Body: []byte(body)})
				}
				first = false
			case <-tb.ctx.Done():
				return
			}
		}
	}()
	if _, err := chromedp.Call(tb.ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: pattern}}}); err != nil {
		tb.t.Fatal(err)
	}
}

// The lines of a fake turn of chat "c1".
const (
	fakeCutoff = `{"id":"__cutoff__","role":"assistant","content":"","isDelta":false,"isInProcess":false,"sort":0,"state":{"chatId":"c1","isStreaming":true}}` + "\n"
	fakeUser   = `{"id":"u1","role":"user","content":"q","isDelta":false,"isInProcess":false,"sort":1}` + "\n"
	fakeDelta  = `{"id":"a1","role":"assistant","content":"Hello ","graphPath":["agent"],"isDelta":true,"isInProcess":true,"isStructuredResponse":false,"sort":2}` + "\n"
	fakeFinal  = `{"id":"a1","role":"assistant","content":"Hello world","graphPath":["final","agent"],"isDelta":false,"isInProcess":false,"isStructuredResponse":false,"sort":3}` + "\n"
)

func fakeState(extra string) string {
	return `{"id":"__state__","role":"assistant","content":"","isDelta":false,"isInProcess":false,"sort":4,"state":{"chatId":"c1","isStreaming":false,"messages":[` +
		`{"id":"u1","role":"user","content":"q","isDelta":false,"isInProcess":false,"sort":1},` +
		`{"id":"a1","role":"assistant","content":"Hello world","graphPath":["final","agent"],"isDelta":false,"isInProcess":false,"isStructuredResponse":false,"sort":3}]` + extra + `}}` + "\n"
}

// TestChatPageFailures: what the chat page shows when a turn does not go
// the plain way: every failure is shown, a question that was not asked
// goes back into the box, and a reload of the host page keeps the
// conversation.
func TestChatPageFailures(t *testing.T) {
	dir := vegaDir(t)
	b := newBrowser(t)
	s := startServer(t, "-db", ":memory:", "-vega-dir", dir, "-agent-delay", "100ms")

	notice := func(tb *tab) (text string) {
		tb.eval(chat(`d.getElementById("ek-notice").hidden ? "" : d.getElementById("ek-notice").textContent`), &text)
		return text
	}
	inputText := func(tb *tab) (text string) {
		tb.eval(chat(`d.getElementById("ek-input").value`), &text)
		return text
	}

	// A stream that drops (no __state__), then a rejoin that ends
	// normally: the answer is complete and "Reconnecting…" is gone.
	t.Run("a rejoin that ends well clears the reconnecting notice", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		tb.open("ana")
		tb.answerStreams(fakeCutoff+fakeUser+fakeDelta, fakeCutoff+fakeFinal+fakeState(""))
		tb.ask("q")
		tb.waitFor("the rejoined turn to end", chat(jsIdle+` && d.querySelector(".ek-assistant") && d.querySelector(".ek-assistant").innerText.includes("Hello world")`), 20*time.Second)
		if n := notice(tb); n != "" {
			t.Errorf("the answer is complete and the page idle, but the notice says %q", n)
			tb.screenshot("stale-reconnecting")
		}
	})

	// A shutdown ends the stream aborted, with an error: the user did not
	// press Stop and learns why it ended.
	t.Run("an abort with an error shows the error", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		tb.open("ana")
		tb.answerStreams(fakeCutoff + fakeUser + fakeFinal + fakeState(`,"aborted":true,"error":"the server is shutting down"`))
		tb.ask("q")
		tb.waitFor("the turn to end", chat(jsIdle+` && !d.getElementById("ek-notice").hidden`), 20*time.Second)
		if n := notice(tb); !strings.Contains(n, "shutting down") {
			t.Errorf("notice %q, want the server's error", n)
			tb.screenshot("shutdown-as-stopped")
		}
	})

	// A refused question (here 409: another tab's answer is being
	// written) goes back into the box.
	t.Run("a refused question goes back into the box", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		tb.open("ana")
		tb.answerStream(409, nil, `{"error":"a turn of this chat is running: wait for it to end or abort it"}`)
		tb.ask("my question")
		tb.waitFor("the notice", chat(jsIdle+` && !d.getElementById("ek-notice").hidden`), 20*time.Second)
		if in := inputText(tb); in != "my question" {
			t.Errorf("after a 409 the box holds %q (notice %q), want the question back", in, notice(tb))
			tb.screenshot("409-question-lost")
		}
	})

	// The server cannot be reached when the question is sent: the question
	// was not asked; it goes back into the box, and the page says so.
	t.Run("a question sent while the server is unreachable goes back into the box", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		tb.open("ana")
		tb.answerStreams("FAIL")
		tb.ask("revenue by country")
		tb.waitFor("the page to settle", chat(jsIdle+` && !d.getElementById("ek-notice").hidden`), 30*time.Second)
		if in, n := inputText(tb), notice(tb); in != "revenue by country" || !strings.Contains(n, "could not be sent") {
			t.Errorf("box %q, notice %q: want the question back and a notice that it was not sent", in, n)
			tb.screenshot("question-lost")
		}
	})

	// The session expires during a turn (here: the abort answers 401): the
	// turn's end does not take the notice away.
	t.Run("an expired session stays said when the turn ends", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		tb.open("ana")
		tb.answerOnce("*/chat/abort", 401, `{"error":"invalid or expired token"}`)
		tb.ask("revenue by country")
		tb.waitFor("the answer to stream", chat(`!d.getElementById("ek-stop").hidden`), 20*time.Second)
		tb.run(chromedp.Sleep(300 * time.Millisecond))
		tb.eval(chat(`(d.getElementById("ek-stop").click(), true)`), nil)
		tb.waitFor("the expired notice", chat(`d.getElementById("ek-notice").textContent.includes("expired")`), 20*time.Second)
		tb.waitFor("the answer to end", chat(`d.querySelector(".ek-assistant") && !d.querySelector('.ek-msg[aria-busy="true"]')`), 60*time.Second)
		tb.run(chromedp.Sleep(300 * time.Millisecond))
		if n := notice(tb); !strings.Contains(n, "expired") {
			t.Errorf("notice %q after the turn ended, want the expired session said", n)
			tb.screenshot("expiry-cleared")
		}
	})

	// /me fails (the page says to reload); the reload keeps the
	// conversation, which the page that failed did not overwrite.
	t.Run("a failed load keeps the conversation for the reload", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		tb.open("ana")
		tb.ask("revenue by country")
		tb.waitFor("the turn to end", chat(jsIdle+` && d.querySelector(".ek-assistant")`), 60*time.Second)
		tb.answerOnce("*/embed/chat/me", 0, "")
		tb.run(chromedp.Navigate(tb.base + "/?user=ana"))
		tb.waitFor("the failure", chat(`d.getElementById("ek-notice").textContent.includes("Reload")`), 20*time.Second)
		tb.open("ana")
		tb.waitFor("the conversation after the reload", chat(`d.querySelectorAll(".ek-msg").length > 0`), 20*time.Second)
	})

	// A proxy that cuts long responses: each stream drops after a line
	// more, five times in a row, more than the retries of a turn that
	// makes no progress; the page follows the turn to its end.
	t.Run("a stream cut again and again while it progresses is followed to its end", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		tb.open("ana")
		delta := func(sort int, text string) string {
			return fmt.Sprintf(`{"id":"a1","role":"assistant","content":%q,"graphPath":["agent"],"isDelta":true,"isInProcess":true,"isStructuredResponse":false,"sort":%d}`+"\n", text, sort)
		}
		bodies := []string{fakeCutoff + fakeUser + delta(2, "one ")}
		for i := 3; i <= 6; i++ {
			bodies = append(bodies, fakeCutoff+delta(i, "more "))
		}
		final := `{"id":"a1","role":"assistant","content":"one more more more more done","graphPath":["final","agent"],"isDelta":false,"isInProcess":false,"isStructuredResponse":false,"sort":7}` + "\n"
		state := `{"id":"__state__","role":"assistant","content":"","isDelta":false,"isInProcess":false,"sort":8,"state":{"chatId":"c1","isStreaming":false,"messages":[` +
			`{"id":"u1","role":"user","content":"q","isDelta":false,"isInProcess":false,"sort":1},` +
			`{"id":"a1","role":"assistant","content":"one more more more more done","graphPath":["final","agent"],"isDelta":false,"isInProcess":false,"isStructuredResponse":false,"sort":7}]}}` + "\n"
		tb.answerStreams(append(bodies, fakeCutoff+final+state)...)
		tb.ask("q")
		tb.waitFor("the turn to end", chat(jsIdle+` && d.querySelector(".ek-assistant") && d.querySelector(".ek-assistant").innerText.includes("done")`), 40*time.Second)
		if n := notice(tb); n != "" {
			t.Errorf("the answer is complete, but the notice says %q", n)
			tb.screenshot("cut-streams")
		}
	})

	// The chat the page remembers no longer exists (deleted, or its user
	// expired): the reload's rejoin answers 404, and the page forgets it
	// rather than asking for it on every load.
	t.Run("a remembered chat that is gone is forgotten", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		tb.open("ana")
		tb.ask("revenue by country")
		tb.waitFor("the turn to end", chat(jsIdle+` && d.querySelector(".ek-assistant")`), 60*time.Second)
		tb.answerOnce("*/chat/stream-chat-state", 404, `{"error":"chat not found"}`)
		tb.run(chromedp.Reload())
		tb.waitFor("the notice", chat(`d.body && d.body.dataset.ready === "true" && !d.getElementById("ek-notice").hidden`), 30*time.Second)
		var got struct {
			Notice   string
			Messages int
			Stored   string
			Busy     bool
		}
		tb.eval(chat(`({ notice: d.getElementById("ek-notice").textContent, messages: d.querySelectorAll(".ek-msg").length,
			stored: JSON.parse(w.sessionStorage.getItem("embedkit.chat." + w.location.hash.slice(4)) || "{}").chatId || "", busy: !d.getElementById("ek-stop").hidden })`), &got)
		if !strings.Contains(got.Notice, "no longer available") || got.Messages != 0 || got.Stored != "" || got.Busy {
			t.Errorf("after a 404 for the remembered chat: notice %q, %d messages, stored chat %q, busy %v", got.Notice, got.Messages, got.Stored, got.Busy)
			tb.screenshot("gone-chat")
		}
		tb.ask("revenue by country") // a new chat
		tb.waitFor("the new chat's answer", chat(jsIdle+` && d.querySelector(".ek-assistant")`), 60*time.Second)
	})

	// A 404 of another kind (a route the page was given wrong, which every
	// request would meet) keeps the chat for when it works.
	t.Run("a remembered chat survives a 404 of its route", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		tb.open("ana")
		tb.ask("revenue by country")
		tb.waitFor("the turn to end", chat(jsIdle+` && d.querySelector(".ek-assistant")`), 60*time.Second)
		tb.answerOnce("*/chat/stream-chat-state", 404, `{"error":"no such endpoint: POST /api/v1/public/acme/agents/7/chat/stream-chat-state"}`)
		tb.run(chromedp.Reload())
		tb.waitFor("the notice", chat(`d.body && d.body.dataset.ready === "true" && !d.getElementById("ek-notice").hidden`), 30*time.Second)
		var kept struct {
			Messages int
			Stored   string
		}
		tb.eval(chat(`({ messages: d.querySelectorAll(".ek-msg").length, stored: JSON.parse(w.sessionStorage.getItem("embedkit.chat." + w.location.hash.slice(4)) || "{}").chatId || "" })`), &kept)
		if n := notice(tb); kept.Messages == 0 || kept.Stored == "" || !strings.Contains(n, "no such endpoint") {
			t.Errorf("after a 404 of the route: %+v, notice %q; want the chat kept and the error said", kept, n)
			tb.screenshot("route-404")
		}
	})

	// The host page mints a new session on every load: reloading it keeps
	// the conversation of the same user, and another user never sees it.
	t.Run("reloading the host page keeps the conversation", func(t *testing.T) {
		tb := b.newTab(t, s.base)
		tb.open("ana")
		tb.ask("revenue by country")
		tb.waitFor("the turn to end", chat(jsIdle+` && d.querySelector(".ek-assistant")`), 60*time.Second)
		tb.run(chromedp.Reload())
		tb.waitFor("the conversation after the reload", chat(`d.body && d.body.dataset.ready === "true" && d.querySelectorAll(".ek-msg").length > 0`), 30*time.Second)
		tb.open("liam")
		tb.waitFor("the chat of another user", chat(`d.body && d.body.dataset.ready === "true"`), 30*time.Second)
		var n int
		tb.eval(chat(`d.querySelectorAll(".ek-msg").length`), &n)
		if n != 0 {
			t.Errorf("another user's page shows %d messages of Ana's conversation", n)
			tb.screenshot("other-user-sees-chat")
		}
	})
}
