package gormstore

import (
	"context"
	"fmt"
	"regexp"
	"strings"
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
	// Version 4's renames run before the others (see migrate); a fresh
	// database has prefixed tables from version 1 on.
	{4, "the embedkit_ prefix on every table, index and sequence", func(*gorm.DB) error { return nil }},
	{5, "the API key that minted each session id and token", addKeyHash},
	{6, "attribute values and group memberships as JSON columns of embedkit_users", foldUserData},
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
			legacy := !m.HasTable(&Account{})
			for _, name := range legacyTables[:len(legacyTables)-1] { // version 1's
				legacy = legacy && m.HasTable(name)
			}
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
		if current > 0 && current < 4 {
			// Versions 2 and 3 change the current models, whose tables
			// carry the prefix: rename first, as version 4.
			if err := prefixNames(tx); err != nil {
				return fmt.Errorf("version 4: %w", err)
			}
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

// legacyTables are the names of embedkit's tables before version 4, in
// creation order. Only a database that embedkit_schema_versions (or the
// whole set of these tables, for a release before versioned migrations)
// marks as embedkit's has its tables renamed: a host's own users or
// sessions table is never touched.
var legacyTables = []string{
	"accounts", "account_user_slots", "api_keys", "deployments", "agents", "users", "embed_tenants",
	"catalog_groups", "catalog_attributes", "group_members", "attribute_values", "sessions", "tokens",
	"threads", "thread_messages", "account_quotas",
}

// prefixNames is version 4, run before versions 2 and 3: it renames embedkit's tables of a previous
// release to embedkit_<name>, with their indexes (embedkit_<index>) and,
// on PostgreSQL, their sequences (embedkit_<sequence>) and foreign keys
// (fk_embedkit_<table>_<field>, GORM's name for them), so that the schema
// is the one a fresh start creates. Renames keep every row. It is
// idempotent: a table whose new name exists is left alone.
//
// Hand-written DDL: GORM's migrator renames tables and indexes but
// neither sequences nor constraints, and on SQLite renames an index by
// dropping and re-creating it only from the model, not from the
// database's own definition.
func prefixNames(tx *gorm.DB) error {
	m := tx.Migrator()
	var renamed []string
	for _, old := range legacyTables {
		if !m.HasTable(old) || m.HasTable("embedkit_"+old) {
			continue
		}
		if err := tx.Exec("ALTER TABLE " + quoteIdent(old) + " RENAME TO " + quoteIdent("embedkit_"+old)).Error; err != nil {
			return err
		}
		renamed = append(renamed, old)
	}
	for _, old := range renamed {
		var err error
		if tx.Dialector.Name() == "postgres" {
			err = prefixPostgres(tx, "embedkit_"+old)
		} else {
			err = prefixSQLite(tx, "embedkit_"+old)
		}
		if err != nil {
			return fmt.Errorf("table %s: %w", old, err)
		}
	}
	return nil
}

// prefixPostgres renames the indexes (primary keys and unique constraints
// included), owned sequences and foreign keys of table.
func prefixPostgres(tx *gorm.DB, table string) error {
	var renames []struct{ Kind, Name string }
	err := tx.Raw(`SELECT 'INDEX' AS kind, i.relname AS name
		FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
		WHERE x.indrelid = (quote_ident(current_schema()) || '.' || quote_ident(?))::regclass
		UNION ALL
		SELECT 'SEQUENCE', s.relname FROM pg_depend d JOIN pg_class s ON s.oid = d.objid
		WHERE d.refobjid = (quote_ident(current_schema()) || '.' || quote_ident(?))::regclass AND s.relkind = 'S' AND d.deptype IN ('a', 'i')
		UNION ALL
		SELECT 'CONSTRAINT', conname FROM pg_constraint
		WHERE conrelid = (quote_ident(current_schema()) || '.' || quote_ident(?))::regclass AND contype = 'f'`,
		table, table, table).Scan(&renames).Error
	if err != nil {
		return err
	}
	for _, r := range renames {
		var stmt string
		switch {
		case r.Kind == "CONSTRAINT" && strings.HasPrefix(r.Name, "fk_") && !strings.HasPrefix(r.Name, "fk_embedkit_"):
			stmt = fmt.Sprintf(`ALTER TABLE %s RENAME CONSTRAINT %s TO %s`, quoteIdent(table), quoteIdent(r.Name), quoteIdent("fk_embedkit_"+r.Name[3:]))
		case r.Kind != "CONSTRAINT" && !strings.HasPrefix(r.Name, "embedkit_"):
			stmt = fmt.Sprintf(`ALTER %s %s RENAME TO %s`, r.Kind, quoteIdent(r.Name), quoteIdent("embedkit_"+r.Name))
		default:
			continue
		}
		if err := tx.Exec(stmt).Error; err != nil {
			return err
		}
	}
	return nil
}

// createIndex matches the head of an index's definition in sqlite_master.
var createIndex = regexp.MustCompile(`(?is)^CREATE\s+(UNIQUE\s+)?INDEX\s+(IF\s+NOT\s+EXISTS\s+)?("(?:[^"]|"")+"|` + "`[^`]+`" + `|\[[^\]]+\]|\S+)`)

// prefixSQLite re-creates the indexes of table under prefixed names from
// their own definitions (SQLite cannot rename an index). ALTER TABLE has
// already rewritten the references of other tables and sqlite_sequence.
func prefixSQLite(tx *gorm.DB, table string) error {
	var idx []struct{ Name, SQL string }
	if err := tx.Raw(`SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL`, table).
		Scan(&idx).Error; err != nil {
		return err
	}
	for _, ix := range idx {
		if strings.HasPrefix(ix.Name, "embedkit_") {
			continue
		}
		loc := createIndex.FindStringSubmatchIndex(ix.SQL)
		if loc == nil {
			return fmt.Errorf("index %s: unexpected definition", ix.Name)
		}
		unique := ""
		if loc[2] >= 0 {
			unique = "UNIQUE "
		}
		def := "CREATE " + unique + "INDEX " + quoteIdent("embedkit_"+ix.Name) + ix.SQL[loc[1]:]
		if err := tx.Exec("DROP INDEX " + quoteIdent(ix.Name)).Error; err != nil {
			return err
		}
		if err := tx.Exec(def).Error; err != nil {
			return err
		}
	}
	return nil
}

// quoteIdent quotes an SQL identifier for both databases.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// addKeyHash is version 5: sessions and tokens record the API key that
// minted them, a foreign key that deletes them with the key. Hand-written
// ALTER TABLE: GORM's SQLite migrator adds a foreign key by rebuilding the
// table, which drops its indexes; SQLite adds a nullable column with its
// REFERENCES clause in place. The constraint gets GORM's name, as a fresh
// start creates it.
func addKeyHash(tx *gorm.DB) error {
	m := tx.Migrator()
	typ := "BLOB"
	if tx.Dialector.Name() == "postgres" {
		typ = "BYTEA"
	}
	for _, t := range []struct {
		model any
		table string
	}{{&Session{}, "embedkit_sessions"}, {&Token{}, "embedkit_tokens"}} {
		if m.HasColumn(t.model, "KeyHash") {
			continue
		}
		ddl := "ALTER TABLE " + t.table + " ADD COLUMN key_hash " + typ + " CONSTRAINT fk_" + t.table +
			"_api_key REFERENCES embedkit_api_keys (hash) ON DELETE CASCADE"
		if err := tx.Exec(ddl).Error; err != nil {
			return err
		}
		if err := m.CreateIndex(t.model, t.table+"_key"); err != nil {
			return err
		}
	}
	return nil
}

// addAPIKeyColumns is version 2: the origin, name and creation time of API
// keys.
func addAPIKeyColumns(tx *gorm.DB) error {
	return addColumns(tx, &APIKey{}, "Origin", "Name", "CreatedAt")
}

func addColumns(tx *gorm.DB, model any, fields ...string) error {
	m := tx.Migrator()
	for _, f := range fields {
		if m.HasColumn(model, f) {
			continue
		}
		if err := m.AddColumn(model, f); err != nil {
			return err
		}
	}
	return nil
}

// addLimits is version 3: the accounts' limits column, the quota counters
// and the indexes that the deletion of expired session ids and tokens
// uses.
func addLimits(tx *gorm.DB) error {
	m := tx.Migrator()
	if err := addColumns(tx, &Account{}, "Limits"); err != nil {
		return err
	}
	if !m.HasTable(&AccountQuota{}) {
		if err := m.CreateTable(&AccountQuota{}); err != nil {
			return err
		}
	}
	for _, ix := range []struct {
		model any
		name  string
	}{{&Session{}, "embedkit_sessions_expiry"}, {&Token{}, "embedkit_tokens_expiry"}} {
		if !m.HasIndex(ix.model, ix.name) {
			if err := m.CreateIndex(ix.model, ix.name); err != nil {
				return err
			}
		}
	}
	return nil
}

// foldUserData is version 6: a user's attribute values and memberships
// move from the tables embedkit_attribute_values and embedkit_group_members
// into the JSON columns attribute_values and group_ids of embedkit_users,
// and the two tables are dropped. It also recounts the persistent external
// users of each account into one counter row. Hand-written SQL: the
// aggregation into JSON objects is per dialect and beyond GORM's API.
func foldUserData(tx *gorm.DB) error {
	m := tx.Migrator()
	if err := addColumns(tx, &User{}, "AttributeValues", "GroupIDs"); err != nil {
		return err
	}
	pg := tx.Dialector.Name() == "postgres"
	if m.HasTable("embedkit_attribute_values") {
		q := `UPDATE embedkit_users SET attribute_values = (SELECT json_group_object(CAST(v.attribute_id AS TEXT), json(v.value))
			FROM embedkit_attribute_values v WHERE v.user_id = embedkit_users.id)
			WHERE id IN (SELECT user_id FROM embedkit_attribute_values)`
		if pg {
			q = `UPDATE embedkit_users u SET attribute_values = s.o FROM (
				SELECT user_id, jsonb_object_agg(attribute_id::text, value::jsonb)::text AS o
				FROM embedkit_attribute_values GROUP BY user_id) s WHERE u.id = s.user_id`
		}
		if err := tx.Exec(q).Error; err != nil {
			return err
		}
		if err := m.DropTable("embedkit_attribute_values"); err != nil {
			return err
		}
	}
	if m.HasTable("embedkit_group_members") {
		q := `UPDATE embedkit_users SET group_ids = (SELECT json_group_object(tid, json(ids)) FROM (
				SELECT CAST(g.embed_tenant_id AS TEXT) AS tid, json_group_array(g.id) AS ids
				FROM embedkit_group_members gm JOIN embedkit_catalog_groups g ON g.id = gm.group_id
				WHERE gm.user_id = embedkit_users.id GROUP BY g.embed_tenant_id))
			WHERE id IN (SELECT user_id FROM embedkit_group_members)`
		if pg {
			q = `UPDATE embedkit_users u SET group_ids = s.o FROM (
				SELECT user_id, jsonb_object_agg(tid, ids)::text AS o FROM (
					SELECT gm.user_id, g.embed_tenant_id::text AS tid, jsonb_agg(g.id ORDER BY g.id) AS ids
					FROM embedkit_group_members gm JOIN embedkit_catalog_groups g ON g.id = gm.group_id
					GROUP BY gm.user_id, g.embed_tenant_id) x GROUP BY user_id) s
			WHERE u.id = s.user_id`
		}
		if err := tx.Exec(q).Error; err != nil {
			return err
		}
		if err := m.DropTable("embedkit_group_members"); err != nil {
			return err
		}
	}
	if err := tx.Where("1 = 1").Delete(&AccountUserSlot{}).Error; err != nil {
		return err
	}
	return tx.Exec(`INSERT INTO embedkit_account_user_slots (account_id, shard, n)
		SELECT account_id, 0, COUNT(*) FROM embedkit_users WHERE external_id IS NOT NULL AND NOT ephemeral GROUP BY account_id`).Error
}
