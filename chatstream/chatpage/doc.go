// Package chatpage serves an embeddable chat page: a user of a host
// application chats with an analytics agent inside an iframe, with
// answers streamed as they are written, Markdown rendered safely, tool
// calls as collapsible steps showing their SQL, results as HTML tables
// (with Download CSV, every row through the data query API, and Show
// SQL) and Vega-Lite specs as charts.
//
// The page is built for a hostile environment. The shell carries no user
// data and needs no cookie, so it loads in a cross-site iframe whose
// third-party cookies the browser blocks; its script exchanges the
// single-use ?sessionId= of the embed URL for a token at the
// embed-session API (embedsession.PathSessionToken), removes the id from
// the address bar, keeps the token in sessionStorage (so a reload works)
// and calls the chat API with Authorization: Bearer. No API key reaches
// the browser. A strict Content-Security-Policy allows no inline script
// and no eval; nothing that the model or the data says can make the
// browser fetch anything. Each chart is drawn in a frame sandboxed with
// allow-scripts only, of an opaque origin: a chart spec cannot read the
// token, cookies or storage, replace the page's vega-embed options or
// make a request (the frame's policy allows the chart libraries' scripts
// and nothing else; its expressions run with vega-interpreter, its
// tooltips are text).
//
// Mount it next to the embed-session and chat handlers, on the same
// origin:
//
//	st, _ := sqlite.Open("embed.db") // store/gormstore/sqlite
//	page := chatpage.New(st, chatpage.FixedAgent("7"),
//		chatpage.WithTitle("Ask your data"),
//		chatpage.WithFrameAncestors("https://app.example.com"))
//	mux := http.NewServeMux()
//	for _, rt := range embedsession.NewHandler(st).Routes() {
//		mux.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
//	}
//	for _, rt := range chatstream.NewHandler(st, agent).Routes() {
//		mux.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
//	}
//	for _, rt := range page.Routes() {
//		mux.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
//	}
//
// The host's back end then generates a session for its user and puts
// <iframe src="https://embed.example.com/embed/chat?sessionId=..."> in its
// own page. When the token expires (or is revoked), the page posts
// {"type": "embedkit:session-expired"} to its parent window, so the host
// can mint a new session.
//
// The chart libraries (vega, vega-lite, vega-embed, vega-interpreter, at
// the versions of the Version constants) load from a public CDN with
// Subresource Integrity, or, with [WithVega], from a node_modules folder
// that [LoadVega] read and that the handler serves itself. The script, the style sheet and
// the shell are embedded in the binary.
package chatpage
