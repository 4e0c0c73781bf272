// Package chatstream serves the AI agent chat streaming API
// (stream-chat-state and abort) over newline-delimited JSON, driving a
// host-supplied [Agent], and the data query API that returns every row of
// an agent's SQL; it provides a Go [Client] for both.
//
// # Mounting
//
// [NewHandler] takes a store and an agent; [Handler.Routes] returns the
// three endpoints, stream-chat-state, abort and the data query API (/sql),
// with authentication applied (Authorization: Api-Key <key>, or Bearer
// <token> of an embed session):
//
//	h := chatstream.NewHandler(st, myAgent, chatstream.WithTurnTimeout(2*time.Minute))
//	// at shutdown, before srv.Shutdown (which waits for open streams):
//	//	h.Shutdown(ctx)
//
//	// net/http
//	sm := http.NewServeMux()
//	for _, rt := range h.Routes() {
//		sm.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
//	}
//
//	// gorilla/mux: a router of embedkit's own that matches the encoded
//	// path, behind a ServeMux that sends it the prefix, so that the host's
//	// router keeps its decoded mux.Vars (the README's "Add embedkit to
//	// your server", step 4)
//	host := mux.NewRouter()               // the host's router, unchanged
//	r := mux.NewRouter().UseEncodedPath() // embedkit's routes only
//	front := http.NewServeMux()           // what the server serves
//	front.Handle("/analytics/", r)
//	front.Handle("/", host)
//	api := r.PathPrefix("/analytics").Subrouter()
//	api.Use(middleware.EncodedPathValues(mux.Vars))
//	for _, rt := range h.Routes() {
//		api.Handle(rt.Pattern, rt.Handler).Methods(rt.Method)
//	}
//
// Streams last as long as turns: leave http.Server.WriteTimeout at zero (or
// above the turn timeout) on the server that mounts the routes.
//
// Ephemeral users (the default for users created by chat) become invisible
// when their TTL passes; a [Reaper], the store's janitor, deletes them with
// their threads, and deletes expired session ids, tokens and quota counters:
//
//	reaper := chatstream.NewReaper(st, time.Minute)
//	reaper.Start()
//	defer reaper.Close()
//
// # Writing an agent
//
// An [Agent] answers one turn. It receives the [Turn] (input, the thread's
// history, the user's identity, attributes, groups and security context, the
// branch) and an [Emitter], through which it emits thinking, content pieces
// and tool calls, in order. The library, not the agent, builds the wire
// messages, so no agent can produce a stream that breaks the protocol:
//
//	agent := chatstream.AgentFunc(func(ctx context.Context, t chatstream.Turn, e chatstream.Emitter) error {
//		call, err := e.ToolCall("svcSqlApi", map[string]string{"sqlQuery": q})
//		if err != nil {
//			return err
//		}
//		rows, err := run(ctx, q)
//		if err != nil {
//			return call.Fail(err.Error()) // {"error": ...} in toolCall.result
//		}
//		if err := call.Result(rows); err != nil {
//			return err
//		}
//		return e.Content("Here are the results.")
//	})
//
// ctx ends when the turn is aborted, reaches its deadline or the server shuts
// down; every Emitter method then returns an error wrapping [ErrTurnOver]
// and the agent should return. A returned error (or a panic) ends the turn
// with a final message saying the answer could not be produced and
// state.error in __state__; the error itself is only logged.
// [github.com/embedkit/embedkit/chatstream/chatstreamtest.ScriptedAgent]
// replays a fixed script for tests.
//
// # The turn model
//
// A turn belongs to the server, not to the connection. A request with input
// provisions the user from sessionSettings, finds or creates the thread,
// stores the user echo (one transaction), and starts the turn on a goroutine
// owned by the handler's registry of running turns (one per thread). The
// turn's lines are encoded once into an append-only log that any number of
// streams read: the request that started it, and requests without input for
// the same chatId, which rejoin it (__cutoff__ with state.isStreaming true,
// the log so far, then live lines; resumeAfterSort skips what the client has).
// A client that disconnects leaves the turn running (unless
// [WithCancelOnDisconnect]); abort ends it at once, completing the
// in-process message and ending every stream with state.aborted. A turn's
// completed messages are stored when it ends, in one transaction, whatever
// the number of content pieces. Input for a thread whose turn is running is
// 409.
//
// # Several replicas
//
// The running-turn registry is in-process. Replicas that share one
// PostgreSQL database share their running turns through a [Cluster]
// ([WithCluster]; package
// [github.com/embedkit/embedkit/chatstream/pgcluster] implements it with
// LISTEN/NOTIFY), with no sticky routing: at most one turn runs per thread
// across all of them (input for a thread whose turn runs elsewhere is 409,
// or 403 for another user), a request without input on any replica rejoins
// the turn where it runs, and an abort received by any replica stops it
// (typically within tens of milliseconds; a poll covers a lost
// notification). A turn's lines reach the database only once a stream on
// another replica asked for them, then in batches (one write per publish
// interval, 50 ms by default). Close the cluster after
// [Handler.Shutdown]:
//
//	cl, err := pgcluster.New(ctx, dsn)
//	if err != nil {
//		return err
//	}
//	h := chatstream.NewHandler(st, myAgent, chatstream.WithCluster(cl))
//	// at shutdown:
//	//	h.Shutdown(ctx)
//	//	cl.Close()
//
// Without a Cluster (the default, and what SQLite needs) rejoin and abort
// reach turns running in the same process only.
//
// # The stream
//
// Each line is a [Message]. For one turn: __cutoff__ (sort 0, state.chatId),
// the user echo, the assistant start (empty, isInProcess), thinking
// (development mode only), content deltas (only the new piece), tool calls
// (initiated with toolCall.input, then completed with toolCall.result, both
// JSON strings), the final message (full content, graphPath ["final",
// "agent"]) and __state__ (state.messages: the thread's history in final
// form). sort strictly increases after __cutoff__ and continues across the
// turns of a thread. [Conversation] merges lines by id and applies the
// spec's final-answer rule.
//
// # The data query API
//
// A svcSqlApi tool result holds at most 100 rows; the caller loads all of
// them by sending its sqlQuery to POST .../agents/{agentId}/sql, one of the
// routes of [Handler.Routes]. The handler runs it with the agent's
// [DataSource], the same executor the agent's svcSqlApi tool uses, so the
// rows and the row access are the same. A host registers the source once,
// on its agent: an agent that implements [DataAgent] names the source of
// each of its agents (demoagent.Agent and llmagent.Agent do, with their SQL
// tool, an analytics.SQLTool):
//
//	// myAgent's svcSqlApi tool is a.sqlTool, an analytics.SQLTool
//	func (a myAgent) DataSource(accountName, agentID string) chatstream.DataSource { return a.sqlTool }
//
// An agent without a source answers 404 "agent has no data source". The
// rows stream as NDJSON (a schema line, data lines of at most 1,000 rows, a
// totalRows line) or, with Accept: text/csv, as CSV with the trailers
// Embedkit-Total-Rows and Embedkit-Truncated; at most [WithDataRowLimit]
// rows (100,000) within [WithDataTimeout] (30 s). [Client.QueryData] reads
// them as an iterator:
//
//	res, err := client.QueryData(ctx, "acme", "7", chatstream.DataRequest{SQLQuery: q, SessionSettings: &s})
//	if err != nil {
//		return err // a refused query: *httperr.Error, 400, with the tool's message
//	}
//	for row, err := range res.Rows() {
//		...
//	}
//
// # Observability
//
// The handler records a span per request, per turn ("invoke_agent") and per
// tool call ("execute_tool {name}"), and metrics of requests by route and
// status, turn durations, running turns, streamed lines and tool calls,
// through OpenTelemetry's API on the providers of [WithTracerProvider] and
// [WithMeterProvider] (by default the global ones). It logs faults to
// [WithLogger]'s logger, with ?sessionId= values scrubbed. The names and
// attributes are in the repository's docs/observability.md.
package chatstream
