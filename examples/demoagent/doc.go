// Package demoagent is a demo analytics agent for [chatstream]: it answers
// questions about a sample shop with real SQL over a data set it generates
// itself, through the svcMeta and svcSqlApi executors of package
// [analytics].
//
// [New] builds the data set from a fixed seed (800 customers in 12
// countries, 160 products in 8 categories, 4,000 orders from 2024-01-01 to
// 2025-12-31 with about 8,000 order lines) and loads it into an in-memory
// SQLite database private to the returned [Agent]. No file is read and
// nothing is downloaded. On PostgreSQL, [SetupPostgres] loads the same rows
// into the schema embedkit_demo (once, safe when several processes start at
// once) and sets up the analytics views; New with [WithPostgres] then
// answers over them, with SQL written for both databases (only the week
// breakdown is spelled differently), and gives the same numbers. [Model] is its data model: the views orders (one
// row per order line), products and customers, with a row filter on the
// user attribute "country". [Agent.Tools] hands the executors to another
// agent, such as one driven by a language model.
//
// For a question it understands ("revenue by country", "orders per week",
// "top 5 products last month", "average order value by category in 2025"),
// a turn goes:
//
//  1. thinking: what the question asks for;
//  2. content: a first sentence;
//  3. tool call svcMeta with the question's key words, answered with the
//     matching views of the data model;
//  4. tool call svcSqlApi with the SQL query, a title, a description and a
//     Vega-Lite v5 spec, answered with the rows: at most 100 of them (see
//     [WithRowLimit]), with totalRows counting all;
//  5. content: a summary of the top rows, streamed a word at a time with
//     [WithDelay] between words.
//
// Questions are read by keywords, not by a language model, and the agent
// never answers a different question than the one asked. It knows the
// metrics revenue (also "sales"), orders, quantity ("units"), average order
// value and ordering customers; the breakdowns country, category, product,
// customer, day, week, month, quarter and year; "top N" and "bottom N";
// filters naming countries or categories, also excluded ("excluding
// Germany"), where several countries or categories give one row each; and
// periods: years, months, quarters, and "this" or "last" month, quarter,
// year or week, "last 30 days", "yesterday", read with the data's last day
// (31 December 2025) as today. Every part it cannot honour
// is named in the answer:
//
//   - a measure the data lacks (profit, margin, churn, returns, ...): when
//     it is all the question asks for, svcMeta is searched for it and the
//     answer says it is not in the data, without running SQL; next to a
//     measure the data has, the answer says that part is not answered;
//   - a breakdown it does not offer (hour, weekday): said, no SQL;
//   - a calculation it does not make (median, percentile, price): said;
//     next to a measure it has, the answer names the measure shown;
//   - two periods that exclude each other: the answer says which one it
//     used;
//   - a second breakdown: the answer says which one it used;
//   - words it did not understand ("paris", "new"): quoted as ignored;
//   - how a relative period was read ("last month" as November 2025).
//
// A message that is an SQL statement ("DROP TABLE orders; --") is passed to
// svcSqlApi unchanged; the tool runs only a single read-only SELECT over the
// data model's views, so anything else ends in a tool error that the answer
// reports. A question it does not understand at all gets a help text
// listing [ExampleQuestions], without tool calls. A follow-up such as "and
// by month?", "what about orders?" or "and Germany?" reuses what the
// thread's previous question asked for.
//
// Row-level security: an external user sees the orders and customers of
// the countries in their "country" attribute (a string or a list; names such
// as "Germany" or ISO codes such as "DE", any case). A user without a
// country sees no rows: the agent still calls its tools (svcSqlApi returns
// no rows, totalRows 0) and the answer says why. An internal user sees every
// row. The filter is applied by the views underneath, so the sqlQuery shown
// is the same for everyone.
//
// Branches: when the turn names a branch (Turn.ActiveBranchName) that is
// not among Turn.Branches, the svcSqlApi call fails with
// `branch "x" not found` and the answer says the branch is unknown. Every
// known branch queries the same sample data.
//
// Speed: the data never changes, so svcSqlApi results are cached by query
// and row access; a repeated question costs no SQL.
//
// The agent is a [chatstream.DataAgent]: the chat handler's data query API
// runs a result's sqlQuery with the agent's svcSqlApi executor, so it
// returns every row under the same row access.
//
// Mounting it on a chat handler:
//
//	agent, err := demoagent.New()
//	if err != nil {
//		return err
//	}
//	defer agent.Close()
//	h := chatstream.NewHandler(st, agent)
package demoagent
