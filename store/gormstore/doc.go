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
// Statements use GORM's query API; hand-written SQL is kept to what GORM
// cannot say (the Lookup's UNION ALL, JSON merges, migration DDL). The
// store uses the handle's pool as it is. On SQLite the transactions of
// concurrent calls share one SQLite transaction (group commit, group.go),
// each in a savepoint of its own; readers run beside it (WAL).
// docs/storage.md describes the tables, the statements of each call and
// the migrations.
package gormstore
