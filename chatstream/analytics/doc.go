// Package analytics provides the two tools of an analytics agent, svcMeta
// and svcSqlApi, as executors that any agent can call over a host's own
// SQLite data: a demo agent that reads questions by keywords, or a
// language model that writes its own SQL.
//
// # The data model
//
// A [Model] lists views over the host's tables. Each [View] has an SQL name,
// the SELECT that defines it, its members (measures and dimensions, as
// svcMeta describes them) and its row filters. A [RowFilter] ties a column
// of the view to a user attribute: an external user sees a row only when
// the column's value is one of their attribute's values. A user without a
// value sees no rows (the filter fails closed); an internal user sees every
// row.
//
//	model := &analytics.Model{Views: []analytics.View{{
//		Name:    "orders",
//		Title:   "Orders",
//		SQL:     "SELECT o.id, o.amount, o.created_at, c.country FROM main.orders o JOIN main.customers c ON c.id = o.customer_id",
//		Filters: []analytics.RowFilter{{Attribute: "country", Column: "country"}},
//		Members: []analytics.Member{{Name: "orders.amount", Title: "Amount", Type: "number", AggType: "sum"}},
//	}}}
//
// [Model.Search] answers svcMeta. [Model.Describe] and [Model.UserContext]
// render the model and the asking user for a language model's system
// prompt.
//
// # The executors
//
// [NewMetaTool] and [NewSQLTool] return the executors. Both have the
// methods Name, Description, Parameters (the JSON Schema of the spec's
// inputs) and Call(ctx, turn, args), so that an agent can offer them to a
// model and run what the model asks for; [SQLTool.Run] is the typed form.
// A failure that may be shown (not a single SELECT, a denied table, a
// syntax error, the timeout) is a *[ToolError]: the agent reports it as
// the tool call's {"error": ...} result.
//
// # Safety of svcSqlApi
//
// Row security is enforced by the executor and SQLite, never by the prompt
// or the SQL. On each connection of the *sql.DB it is given, the tool
// creates a temporary view per model view (applying the row filters to the
// access of the user of the current call) and sets the connection
// query_only. While a query runs, an authorizer allows SELECT only: a table
// may be read only from inside one of those views; PRAGMA, ATTACH,
// transactions, schema changes, writes and the row-filter functions are
// denied; a common table expression may not take the name of a view. A
// statement is compiled first and refused unless it is one read-only
// statement without parameters. A progress handler bounds the work of a
// query ([WithMaxSteps]) and the timeout ([WithTimeout]) interrupts it;
// values are limited to 8 MiB. A query that reads no table, such as
// SELECT 1, runs as usual. Results hold at most [WithRowLimit] rows (100
// by default); totalRows counts them all.
//
// Give the tool a *sql.DB of its own, opened on the host's SQLite file
// (read-only, mode=ro, is best), through github.com/mattn/go-sqlite3. A
// *gorm.DB's pool is reached with its DB method, but a second handle is
// better: the tool's connections keep their temporary views and
// query_only. PostgreSQL is not supported: [NewSQLTool] refuses any driver
// other than SQLite's.
package analytics
