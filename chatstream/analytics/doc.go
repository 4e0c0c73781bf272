// Package analytics provides the two tools of an analytics agent, svcMeta
// and svcSqlApi, as executors that any agent can call over a host's own
// SQLite or PostgreSQL data: a demo agent that reads questions by
// keywords, or a language model that writes its own SQL.
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
// or the SQL, and without recognising names in the SQL. On each connection
// of the *sql.DB it is given, the tool creates temporary views per model
// view: one with the view's name, over one with a secret name that
// applies the row filters to the access of the user of the current call,
// over one with a secret name that holds the view's SQL; the connection
// is set query_only. While a query runs, an authorizer allows SELECT only:
// a table is read only from inside a secret view, and only the tables
// that view read when the tool set it up, so that a common table
// expression, alias or subquery of any name reads nothing it could not
// read through the views. PRAGMA, ATTACH, transactions, schema changes,
// writes, the row-filter functions and functions outside a fixed list of
// SQLite's built-ins are denied. Each query is also compiled over empty
// stand-ins of the views in an in-memory copy of the schema: a query whose
// program opens any table there reads the database by itself (the columns
// of a USING or NATURAL join included, which SQLite does not show to the
// authorizer), and is refused. A refused query is a *[ToolError] naming no
// table outside the model. A statement is compiled first and refused
// unless it is one read-only statement without parameters.
//
// Cost is bounded: a progress handler bounds the work of a query
// ([WithMaxSteps]) and the timeout ([WithTimeout]) or the caller's
// cancellation interrupts it at once. Work inside one SQL function is
// bounded too: values are limited to 1 MiB and LIKE and GLOB patterns to
// 100 bytes, and instr, replace, trim, ltrim and rtrim, whose work grows
// with the product of their arguments' sizes, are replaced by versions
// that charge their work to the budget and stop when the query is
// interrupted. Compiling is bounded too: SQLite's query flattener, which
// copies a subquery's expressions into every reference to them (a chain
// of common table expressions can compile to exponentially many terms), is
// off on the tool's connections, and once the query is interrupted the
// authorizer, which the compiler calls for every SELECT and column it
// resolves, refuses everything, which ends the compilation (an interrupt
// alone does not reach the compiler). SQLite copies a common table
// expression into every place that reads it before any of that can stop
// it, so a query whose common table expressions and views would be copied
// more than a few hundred times over (an upper bound read from its
// tokens) is refused as too complex. A result holds at most [WithRowLimit] rows (100 by
// default; totalRows counts them all), 100 columns and 4 MiB of JSON; a
// larger one is the tool error "result too large", found while the rows
// are read, before any large value is copied.
//
// Give the tool a *sql.DB of its own, opened on the host's SQLite file
// (read-only, mode=ro, is best), through github.com/mattn/go-sqlite3. A
// *gorm.DB's pool is reached with its DB method, but a second handle is
// better: the tool's connections keep their temporary views, query_only
// and lower limits. A view's SQL must read the host's tables directly
// (not through a common table expression or a view of the database):
// [NewSQLTool] refuses one that does not.
//
// # PostgreSQL
//
// On PostgreSQL, [SetupPostgres] creates the views (owned by an owner role,
// security_barrier, applying the row filters to the access recorded for
// the current transaction) and [NewPostgresSQLTool] runs queries through a
// pool that logs in as a reader role, which can read those views and
// nothing else. Each query runs in a read-only transaction with
// statement_timeout; nothing it does (set_config, SET ROLE, any spelling of
// a name) changes the access the views read, since it is recorded by a
// function that writes, which a read-only transaction cannot call. The
// reader can execute no function whose effects outlive the transaction or
// reach other sessions (advisory locks, WAL messages, stopping another
// session): SetupPostgres revokes them from PUBLIC, and NewPostgresSQLTool
// refuses a reader that can. When the query ends, the transaction is
// rolled back.
//
// # The data behind a result
//
// SQLTool implements [chatstream.DataSource]: [SQLTool.QueryData] streams
// every row of a query through the same executor, for the data query API.
package analytics
