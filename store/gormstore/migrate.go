package gormstore

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// Migrations are versioned: embedkit_schema_versions holds one row per
// applied version, and Migrate applies the missing ones in order, each in
// the one transaction that records it. They create and change embedkit's
// own tables (the models of tables.go) and nothing else.

// migration is one version of the schema.
type migration struct {
	version int64
	name    string
	up      func(tx *gorm.DB) error
}

var migrations = []migration{
	{1, "create embedkit's tables", createTables},
	{2, "origin, name and creation time of API keys", addAPIKeyColumns},
	{3, "account limits, quota counters, expiry indexes of sessions and tokens", addLimits},
}

// migrationLock is the key of the PostgreSQL advisory lock held while
// migrating, so that replicas starting at once migrate one after the other.
const migrationLock = 7318002119

// Migrate brings embedkit's tables in db up to date: it creates them with
// GORM's migrator on an empty database and applies the versions a database
// lacks. [OpenDB] calls it; a host that runs its migrations as a separate
// step may call it there too. It is safe when several processes start at
// once: on PostgreSQL they take turns on an advisory lock, and SQLite
// serializes write transactions. A database created before versioned
// migrations (hand-written schema, the same tables) is recorded as version 1
// and keeps its data. Migrate never touches tables other than embedkit's.
func Migrate(ctx context.Context, db *gorm.DB) error {
	if err := migrate(ctx, db); err != nil {
		return wrapErr("migrate", err)
	}
	return nil
}

func migrate(ctx context.Context, db *gorm.DB) error {
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if tx.Dialector.Name() == "postgres" {
			if err := tx.Exec("SELECT pg_advisory_xact_lock(?)", migrationLock).Error; err != nil {
				return err
			}
		}
		m := tx.Migrator()
		if !m.HasTable(&SchemaVersion{}) {
			legacy := m.HasTable(&Account{}) && m.HasTable(&ThreadMessage{})
			if err := m.CreateTable(&SchemaVersion{}); err != nil {
				return err
			}
			if legacy {
				// The schema of releases before versioned migrations
				// is version 1, created by hand-written DDL.
				if err := record(tx, 1); err != nil {
					return err
				}
			}
		}
		var current int64
		if err := tx.Raw("SELECT COALESCE(MAX(version), 0) FROM embedkit_schema_versions").Row().Scan(&current); err != nil {
			return err
		}
		for _, mg := range migrations {
			if mg.version <= current {
				continue
			}
			if err := mg.up(tx); err != nil {
				return fmt.Errorf("version %d (%s): %w", mg.version, mg.name, err)
			}
			if err := record(tx, mg.version); err != nil {
				return err
			}
		}
		return nil
	})
}

func record(tx *gorm.DB, version int64) error {
	return tx.Exec("INSERT INTO embedkit_schema_versions (version, applied_at) VALUES (?, ?)", version, time.Now().UnixNano()).Error
}

// createTables is version 1: every table of tables.go with its keys,
// indexes and cascades.
func createTables(tx *gorm.DB) error {
	m := tx.Migrator()
	if err := m.CreateTable(Models()...); err != nil {
		return err
	}
	// A has-many relation's foreign key lives on the child table, whose
	// model does not name its parent: the PostgreSQL migrator creates it
	// with the child table, the SQLite one needs it asked for.
	if m.HasConstraint(&Thread{}, "Messages") {
		return nil
	}
	return m.CreateConstraint(&Thread{}, "Messages")
}

// migrate runs Migrate on the store's handle; on SQLite on the writer
// connection (the only one of an in-memory database).
func (s *Store) migrate() error {
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.cfg.queryTimeout)
	defer cancel()
	if s.dialect == postgresDialect {
		return Migrate(ctx, s.db)
	}
	if err := s.acquireWriter(ctx); err != nil {
		return err
	}
	defer s.releaseWriter()
	// Begin explicitly: GORM takes the pinned writer connection for a
	// transaction already (see pinnedConn).
	tx := s.on(ctx, s.writer).Begin()
	if tx.Error != nil {
		return wrapErr("migrate", tx.Error)
	}
	if err := Migrate(ctx, tx); err != nil {
		_ = tx.Rollback().Error
		return err
	}
	return wrapErr("migrate", tx.Commit().Error)
}
