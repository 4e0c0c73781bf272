// Package gormstore implements [store.Store] on SQLite and PostgreSQL
// through GORM: every statement embedkit runs goes through the *gorm.DB the
// host hands to [OpenDB], so the host's logger, callbacks and plugins
// (tracing, metrics, gorm.io/plugin/dbresolver) see it.
//
//	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: myLogger})
//	if err != nil { ... }
//	st, err := gormstore.OpenDB(db) // migrates embedkit's tables
//	if err != nil { ... }
//	defer st.Close() // leaves db open
//
// The sub-packages open a store from a DSN: [github.com/embedkit/embedkit/store/gormstore/sqlite]
// (cgo, through mattn/go-sqlite3) and [github.com/embedkit/embedkit/store/gormstore/postgres]
// (pgx, no cgo). This package registers and opens no database driver (the
// host picks the dialector); it imports pgx, pure Go, only to pipeline
// PostgreSQL transactions, so a host on PostgreSQL builds with
// CGO_ENABLED=0.
//
// # Tables and migrations
//
// The tables are the exported models of tables.go ([Account], [User],
// [Session], [Thread], ...), named embedkit_<name> (embedkit_users,
// embedkit_sessions, ...) with their indexes and sequences, so that they
// sit beside a host's own tables of the same schema; a host may query and
// join them with its own handle. Each pins its table and column names, so a host's naming
// strategy or table prefix changes nothing, and none has a soft-delete
// field. [Migrate] creates them with GORM's migrator and records each
// applied version in embedkit_schema_versions; on PostgreSQL it holds an
// advisory lock, so replicas starting together migrate one after the other.
// A database created by a release before versioned migrations is recorded
// as version 1 and keeps its data; version 4 renames the unprefixed tables
// of earlier versions, keeping every row. Migrations touch no other table. Times
// are Unix nanoseconds in BIGINT columns (exact on both databases), and
// deleting a user cascades to everything it owns.
//
// # How statements run
//
// Statements are hand-written SQL (upserts with ON CONFLICT, RETURNING,
// row locks where the contract needs them) run through the callback
// chains of GORM's Exec and Raw(...).Rows() (the Raw and Row processors),
// with the statement's SQL and Vars filled as Exec and Raw fill them but
// without GORM's byte-by-byte builder; rows are scanned without
// reflection. Reads outside a
// transaction may be served by a dbresolver replica, except those that must
// see the latest write: API keys, tokens, users, thread state, which ask
// for the primary (dbresolver.Write). Writes and everything inside
// [Store.InTx] run in a GORM transaction on the primary. Driver errors are
// read through GORM's error translation and their SQLSTATE or SQLite
// result code, without importing a driver.
//
// Three pieces exist because measurements asked for them:
//
//   - SQLite has one writer connection, taken from the pool for the store's
//     lifetime and kept prepared statement by statement (preparing is most
//     of a small statement's cost: without it generate-session ran at a
//     third of the throughput). Transactions get it in arrival order and,
//     when several wait, commit as a group: the first runs them all in one
//     database transaction, each in its own savepoint and each under its
//     own caller's context (a host's tracing sees every statement under
//     its request), and one COMMIT makes the group durable (without it
//     generate-session was markedly slower; docs/storage.md). Reads outside transactions use the pool's other
//     connections (WAL mode) with GORM's prepared statement cache. The
//     writer connection presents itself to plugins as a transaction, so
//     dbresolver never moves its statements.
//   - PostgreSQL transactions are pipelined on the pgx connection: BEGIN
//     travels with the first statement, writes whose result is not needed
//     travel with the next statement or COMMIT, and Lookup's queries go
//     together. A returning user's generate-session takes 2 round trips
//     instead of 8; without it generate-session was about 18% slower over
//     HTTP. This is the one place statements bypass GORM's callbacks: the
//     host's GORM logger still sees each one (Logger.Trace), its callbacks
//     do not. [WithoutPipelining] turns it off.
//   - PostgreSQL callers wait for a connection in arrival order, at most as
//     many as the pool has connections (database/sql hands a freed
//     connection to a random waiter, which doubled the p99 latency of
//     generate-session under load).
//
// The other exception is chatstream/pgcluster's LISTEN connection, which
// is not part of the store.
//
// On SQLite, a generate-session's lists and attribute upsert make SQLite
// build no temporary b-tree (each one mallocs and frees a page cache, which
// under load cost more in page faults than the statement): a list
// parameter drives a json_each(?) CROSS JOIN instead of an IN subquery, and
// attribute values are upserted from plain VALUES (docs/storage.md).
//
// # Transactions
//
// [Store.InTx] retries transient failures (busy, serialization failure,
// deadlock). A statement that fails aborts the transaction on both
// databases: InTx returns its error and commits nothing.
package gormstore
