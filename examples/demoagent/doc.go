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
// Questions are read by keywords, not by a language model. The agent knows
// the metrics revenue (also "sales"), orders, quantity ("units", "items
// sold"), average order value, customers and products sold; the breakdowns
// country, category, product, customer, day, month ("monthly", "over
// time"), quarter and year; "top N" and "bottom N" rankings; and filters
// naming a country, a category or a year. A question it does not
// understand gets a help text listing [ExampleQuestions], without tool
// calls. A follow-up such as "and by month?", "what about orders?" or "and
// Germany?" reuses what the thread's previous question asked for.
//
// Row-level security: when the user's "country" attribute is set (a string
// or a list of strings; names such as "Germany" or ISO codes such as "DE",
// any case), every query only sees the customers of those countries; any
// other value sees nothing. The countries are bound parameters of a common
// table expression that shadows the customers table, so the sqlQuery shown
// to the user is the same for everyone, as with a semantic layer that
// applies access policies underneath.
//
// Branches: when the turn names a branch (Turn.ActiveBranchName) that is
// not among Turn.Branches, the svcSqlApi call fails with
// `branch "x" not found` and the answer says the branch is unknown. Every
// known branch queries the same sample data.
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
