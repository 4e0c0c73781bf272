package gormstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"gorm.io/gorm"
)

// schemaVersion is the version of the current models; each version is a
// row of embedkit_schema_versions (docs/storage.md describes them).
const schemaVersion = 6

const migrationLock = 7318002119

// Migrate brings embedkit's tables in db up to date, and only them; [OpenDB]
// calls it, a host may call it as a step of its own, also inside a
// transaction of its own (db a transaction: the migration is then a
// savepoint of it). Processes starting at once take turns (an advisory
// lock on PostgreSQL, the write lock on SQLite). A database older than
// version 3 is refused: embedkit b908add migrates it to version 3.
func Migrate(ctx context.Context, db *gorm.DB) error {
	// Deletions rely on the foreign keys (ON DELETE CASCADE), whatever a host's settings say.
	db = db.Session(&gorm.Session{Context: ctx})
	db.Config.DisableForeignKeyConstraintWhenMigrating, db.Config.IgnoreRelationshipsWhenMigrating = false, false
	_, inHostTx := db.Statement.ConnPool.(gorm.TxCommitter)
	return wrapErr("migrate", db.Transaction(func(tx *gorm.DB) error {
		if tx.Dialector.Name() == "postgres" {
			// READ COMMITTED: what the lock's last holder did is seen. A
			// host's transaction keeps its own level: one may be set only
			// before its first query.
			var err error
			if !inHostTx {
				err = tx.Exec("SET TRANSACTION ISOLATION LEVEL READ COMMITTED").Error
			}
			if err = cmp.Or(err, tx.Exec("SELECT pg_advisory_xact_lock(?)", migrationLock).Error); err != nil {
				return err
			}
		}
		m := tx.Migrator()
		var current int64
		if !m.HasTable(&SchemaVersion{}) {
			current = 1 // if it holds version 1's tables: a release before versioned migrations
			if slices.ContainsFunc(legacyTables[:len(legacyTables)-1], func(name string) bool { return !m.HasTable(name) }) {
				current = 0
			}
		} else if err := tx.Raw("SELECT COALESCE(MAX(version), 0) FROM embedkit_schema_versions").Row().Scan(&current); err != nil {
			return err
		}
		var err error
		switch {
		case current == 0: // the foreign key of a has-many relation comes with the table on PostgreSQL, on demand on SQLite
			if err = m.CreateTable(append(Models(), &SchemaVersion{})...); err == nil && !m.HasConstraint(&Thread{}, "Messages") {
				err = m.CreateConstraint(&Thread{}, "Messages")
			}
		case current < 3:
			return fmt.Errorf("schema version %d is older than 3: upgrade through embedkit b908add first", current)
		case current == 3: // the current models' tables carry the prefix: rename first
			err = prefixNames(tx)
		}
		if err == nil && current > 0 && current < schemaVersion {
			if err = upgrade(tx); err == nil {
				err = foldUserData(tx)
			}
		}
		for v := current + 1; err == nil && v <= schemaVersion; v++ {
			err = tx.Create(&SchemaVersion{Version: v, AppliedAt: time.Now().UnixNano()}).Error
		}
		return err
	}))
}

// legacyTables are embedkit's tables before version 4, renamed only in a
// database whose embedkit_schema_versions says 3: never a host's own.
var legacyTables = []string{
	"accounts", "account_user_slots", "api_keys", "deployments", "agents", "users", "embed_tenants",
	"catalog_groups", "catalog_attributes", "group_members", "attribute_values", "sessions", "tokens",
	"threads", "thread_messages", "account_quotas",
}

// prefixNames is version 4: it renames embedkit's tables to embedkit_<name>
// with their indexes and, on PostgreSQL, sequences and foreign keys, as a
// fresh start names them, keeping every row. Hand-written DDL: GORM's
// migrator renames neither sequences nor constraints.
func prefixNames(tx *gorm.DB) error {
	m, q := tx.Migrator(), renames[tx.Dialector.Name() == "postgres"]
	for _, old := range legacyTables {
		if err := m.RenameTable(old, "embedkit_"+old); err != nil {
			return err
		}
		var stmts []string
		err := tx.Raw(q, "embedkit_"+old).Scan(&stmts).Error
		for i := 0; err == nil && i < len(stmts); i++ {
			err = tx.Exec(stmts[i]).Error
		}
		if err != nil {
			return fmt.Errorf("table %s: %w", old, err)
		}
	}
	return nil
}

// renames lists, by PostgreSQL, the statements that rename a table's indexes
// (primary keys and unique constraints included), owned sequences and foreign
// keys; on SQLite, that drop its old indexes (SQLite cannot rename an index):
// upgrade, next, creates the model's.
var renames = map[bool]string{
	true: `WITH t AS (SELECT (quote_ident(current_schema()) || '.' || quote_ident(?))::regclass AS oid)
	SELECT format('ALTER INDEX %I RENAME TO %I', i.relname, 'embedkit_' || i.relname) FROM t, pg_index x
	JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = t.oid AND i.relname NOT LIKE 'embedkit\_%'
	UNION ALL SELECT format('ALTER SEQUENCE %I RENAME TO %I', s.relname, 'embedkit_' || s.relname) FROM t, pg_depend d
	JOIN pg_class s ON s.oid = d.objid WHERE d.refobjid = t.oid AND s.relkind = 'S' AND d.deptype IN ('a', 'i') AND s.relname NOT LIKE 'embedkit\_%'
	UNION ALL SELECT format('ALTER TABLE %s RENAME CONSTRAINT %I TO %I', t.oid, conname, 'fk_embedkit_' || substr(conname, 4)) FROM t, pg_constraint
	WHERE conrelid = t.oid AND contype = 'f' AND conname LIKE 'fk\_%' AND conname NOT LIKE 'fk\_embedkit\_%'`,
	false: `SELECT 'DROP INDEX "' || replace(name, '"', '""') || '"' FROM sqlite_master
	WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL AND name NOT LIKE 'embedkit\_%' ESCAPE '\'`,
}

// upgrade adds the columns and indexes of the current models that a
// database of version 3 to 5 lacks. The API key of sessions and
// tokens (version 5) is added by hand-written ALTER TABLE: GORM's SQLite
// migrator adds a foreign key by rebuilding the table, which drops its
// indexes, where SQLite adds a nullable column with its REFERENCES clause
// in place (under GORM's name for the constraint, as a fresh start).
func upgrade(tx *gorm.DB) (err error) {
	m := tx.Migrator()
	for _, model := range Models() {
		stmt := &gorm.Statement{DB: tx}
		if err := stmt.Parse(model); err != nil {
			return err
		}
		for _, col := range stmt.Schema.DBNames {
			switch table := stmt.Schema.Table; {
			case err != nil, m.HasColumn(model, col):
			case col == "key_hash":
				err = tx.Exec("ALTER TABLE " + table + " ADD COLUMN key_hash " + tx.Dialector.DataTypeOf(stmt.Schema.LookUpField(col)) +
					" CONSTRAINT fk_" + table + "_api_key REFERENCES embedkit_api_keys (hash) ON DELETE CASCADE").Error
			default:
				err = m.AddColumn(model, col)
			}
		}
		for _, idx := range stmt.Schema.ParseIndexes() {
			if err == nil && !m.HasIndex(model, idx.Name) {
				err = m.CreateIndex(model, idx.Name)
			}
		}
	}
	return err
}

// foldUserData is version 6: the rows of embedkit_attribute_values and
// embedkit_group_members move into the users' JSON columns and the tables
// are dropped; the persistent users of each account are recounted into one
// counter row. Hand-written SQL: JSON aggregation is per dialect.
func foldUserData(tx *gorm.DB) error {
	m, pg := tx.Migrator(), tx.Dialector.Name() == "postgres"
	for _, f := range []struct{ table, sqlite, postgres string }{
		{"embedkit_attribute_values", `UPDATE embedkit_users SET attribute_values = (
			SELECT json_group_object(CAST(v.attribute_id AS TEXT), json(v.value)) FROM embedkit_attribute_values v
			WHERE v.user_id = embedkit_users.id) WHERE id IN (SELECT user_id FROM embedkit_attribute_values)`,
			`UPDATE embedkit_users u SET attribute_values = s.o FROM (
			SELECT user_id, jsonb_object_agg(attribute_id::text, value::jsonb)::text AS o
			FROM embedkit_attribute_values GROUP BY user_id) s WHERE u.id = s.user_id`},
		{"embedkit_group_members", `UPDATE embedkit_users SET group_ids = (SELECT json_group_object(tid, json(ids)) FROM (
			SELECT CAST(g.embed_tenant_id AS TEXT) AS tid, json_group_array(g.id) AS ids
			FROM embedkit_group_members gm JOIN embedkit_catalog_groups g ON g.id = gm.group_id
			WHERE gm.user_id = embedkit_users.id GROUP BY g.embed_tenant_id))
			WHERE id IN (SELECT user_id FROM embedkit_group_members)`,
			`UPDATE embedkit_users u SET group_ids = s.o FROM (SELECT user_id, jsonb_object_agg(tid, ids)::text AS o FROM (
			SELECT gm.user_id, g.embed_tenant_id::text AS tid, jsonb_agg(g.id ORDER BY g.id) AS ids
			FROM embedkit_group_members gm JOIN embedkit_catalog_groups g ON g.id = gm.group_id
			GROUP BY gm.user_id, g.embed_tenant_id) x GROUP BY user_id) s WHERE u.id = s.user_id`},
	} {
		if err := errors.Join(tx.Exec(map[bool]string{false: f.sqlite, true: f.postgres}[pg]).Error, m.DropTable(f.table)); err != nil {
			return err
		}
	}
	return errors.Join(tx.Where("1 = 1").Delete(&AccountUserSlot{}).Error, tx.Exec(`INSERT INTO embedkit_account_user_slots (account_id, shard, n)
		SELECT account_id, 0, COUNT(*) FROM embedkit_users WHERE external_id IS NOT NULL AND NOT ephemeral GROUP BY account_id`).Error)
}
