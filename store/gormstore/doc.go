// Package gormstore implements [store.Store] on SQLite and PostgreSQL
// through GORM: every statement runs through the *gorm.DB the host hands to
// [OpenDB], under the context of the call, so the host's logger, callbacks
// and plugins (tracing, metrics, gorm.io/plugin/dbresolver) see it.
//
//	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: myLogger})
//	if err != nil { ... }
//	st, err := gormstore.OpenDB(db) // migrates embedkit's tables
//	if err != nil { ... }
//	defer st.Close() // leaves db open
//
// The sub-packages open a store from a DSN: [github.com/embedkit/embedkit/store/gormstore/sqlite]
// (cgo, mattn/go-sqlite3) and [github.com/embedkit/embedkit/store/gormstore/postgres]
// (pgx, no cgo). This package registers no driver and needs no cgo.
//
// # Tables
//
// The tables are the exported models of tables.go, named embedkit_<name>,
// so that they sit beside a host's own tables; a host may read and join
// them. Each model pins its table and column names. Times are Unix
// nanoseconds in BIGINT columns, and deleting a user cascades to
// everything it owns. A user's attribute values and group memberships are
// two JSON text columns of embedkit_users: attribute_values maps attribute
// IDs to values, group_ids maps embed tenant IDs ("0" for the account's own
// catalog) to group IDs. Provisioning writes them in the user's own row,
// merged by the database (json_patch on SQLite, jsonb || on PostgreSQL);
// reads resolve the IDs against the definitions that exist, so deleting a
// definition deletes only its row (IDs are never reused).
//
// # Statements
//
// Statements are GORM's query API (Create with ON CONFLICT and RETURNING,
// Where/Find, Updates); hand-written SQL only where GORM has no words: the
// Lookup's UNION ALL, the JSON merge expressions, migrations. A
// generate-session costs, for a returning user, 4 statements: the API key
// joined with its account, the Lookup (deployment and definitions in one
// statement), the user's UPDATE ... RETURNING (profile, values and groups
// at once) and the session's INSERT. A new user costs 2 more: the INSERT
// ... ON CONFLICT DO NOTHING after the UPDATE found no row, and the upsert
// of the counter row that holds the account's persistent users (or the
// minute's new ephemeral users), whose row lock makes the limit exact.
//
// # Connections
//
// The store uses the handle's pool as it is. The postgres sub-package sizes
// it from GOMAXPROCS ([github.com/embedkit/embedkit/store/gormstore/postgres.PoolSize]).
// On SQLite every transaction begins with BEGIN IMMEDIATE, so writers queue
// on the database's write lock (busy timeout) instead of failing to
// upgrade a read lock, and in WAL mode reads outside transactions run
// beside the writer; the sqlite sub-package opens a pool of one writer's
// worth of connections plus readers. Neither an in-process writer queue
// nor kept-prepared statements earned their keep in an interleaved A/B of
// generate-session (docs/storage.md).
//
// # Migrations
//
// [Migrate] creates the tables with GORM's migrator and records each
// applied version in embedkit_schema_versions; on PostgreSQL it holds an
// advisory lock, so replicas starting together migrate one after the
// other. It brings a database of any earlier version to the current one
// keeping every row: version 4 renames the unprefixed tables of earlier
// releases, version 6 folds the tables embedkit_attribute_values and
// embedkit_group_members into the users' JSON columns. Migrations touch no
// other table.
package gormstore
