package main

import (
	"github.com/embedkit/embedkit/store/gormstore"
	"github.com/embedkit/embedkit/store/gormstore/postgres"
	"github.com/embedkit/embedkit/store/gormstore/sqlite"
)

// openStore opens the store named by -db: PostgreSQL for a PostgreSQL DSN
// (see isPostgres), otherwise a SQLite file or :memory:.
func openStore(db string) (*gormstore.Store, error) {
	if isPostgres(db) {
		return postgres.Open(db)
	}
	return sqlite.Open(db)
}
