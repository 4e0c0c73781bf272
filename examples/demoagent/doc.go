// Package demoagent is a demo analytics agent for [chatstream]: it answers
// questions about a sample shop with real SQL over a data set it generates
// itself.
//
// [New] builds the data set from a fixed seed (800 customers in 12
// countries, 160 products in 8 categories, 4,000 orders from 2024-01-01 to
// 2025-12-31 with about 8,000 order lines) and loads it into an in-memory
// SQLite database private to the returned [Agent]. No file is read and
// nothing is downloaded.
//
// For a question it understands ("revenue by country", "orders per month",
// "top 5 products by revenue", "top 3 categories by quantity", "average
// order value by category in 2025"), a turn goes:
//
//  1. thinking: what the question asks for;
//  2. content: a first sentence;
//  3. tool call svcMeta with the question's key words, answered with the
//     matching views of the data model ([MetaResult]);
//  4. tool call svcSqlApi with the SQL query, a title, a description and a
//     Vega-Lite v5 spec ([SQLInput]), answered with the rows ([SQLResult]):
//     at most 100 of them (see [WithRowLimit]), with totalRows counting all;
//  5. content: a summary of the top rows, streamed a word at a time with
//     [WithDelay] between words.
//
// A question it does not understand gets a help text listing
// [ExampleQuestions], without tool calls. A follow-up such as "and by
// month?" reuses the metric and filters of the thread's previous question.
//
// Row-level security: when the user's "country" attribute is set (a string
// or a list of strings; names such as "Germany", ISO codes such as "DE"),
// every query only sees the customers of those countries, through bound
// parameters. When the turn names a branch (Turn.ActiveBranchName) that is
// not among Turn.Branches, the svcSqlApi call fails with
// `branch "x" not found` and the answer says the branch is unknown.
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
