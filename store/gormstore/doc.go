// Package gormstore implements [store.Store] on SQLite and PostgreSQL
// through GORM: every statement runs through the *gorm.DB the host hands to
// [OpenDB], under the context of the call, so the host's logger, callbacks
// and plugins (tracing, metrics, gorm.io/plugin/dbresolver) see it.
//
//	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: myLogger})
//	st, err := gormstore.OpenDB(db) // migrates embedkit's tables
//	defer st.Close()                // leaves db open
//
// The sub-packages sqlite (cgo) and postgres (pgx) open a store from a DSN;
// this package registers no driver and needs no cgo.
//
// The tables are the models of tables.go, named embedkit_<name> so that
// they sit beside a host's own. A user's attribute values and group
// memberships are JSON columns of embedkit_users (attribute ID to value;
// embed tenant ID, "0" for the account's catalog, to group IDs), merged by
// the database (json_patch on SQLite, jsonb || on PostgreSQL); reads
// resolve the IDs against the definitions that exist.
//
// Statements use GORM's query API; hand-written SQL is kept to what GORM
// cannot say (the Lookup's UNION ALL, JSON merges, migration DDL). A
// generate-session costs 4 statements for a returning user and 6 for a new
// one; docs/storage.md lists them.
//
// The store uses the handle's pool as it is; the postgres sub-package
// sizes it from GOMAXPROCS. On SQLite the transactions of concurrent
// calls share one SQLite transaction (group commit, group.go), each in a
// savepoint of its own; readers run beside it (WAL).
// [Migrate] brings a database of any earlier schema version to the
// current one, keeping every row (docs/storage.md).
package gormstore
