package gormstore

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
)

// schema is the DDL of the store, idempotent so that it runs at every open.
// {{id}} and {{blob}} are replaced per dialect. Times are Unix nanoseconds.
// Every reference to a user cascades, so deleting a user deletes everything
// it owns in one statement.
const schema = `
CREATE TABLE IF NOT EXISTS accounts (
	id {{id}},
	name TEXT NOT NULL UNIQUE,
	plan TEXT NOT NULL DEFAULT 'free',
	use_creator_mode BOOLEAN NOT NULL DEFAULT FALSE,
	max_external_users BIGINT NOT NULL DEFAULT 0,
	branches TEXT NOT NULL DEFAULT '[]',
	limits TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS account_user_slots (
	account_id BIGINT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
	shard INTEGER NOT NULL,
	n BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (account_id, shard)
);
CREATE TABLE IF NOT EXISTS api_keys (
	hash {{blob}} PRIMARY KEY,
	account_id BIGINT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
	admin BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX IF NOT EXISTS api_keys_account ON api_keys (account_id);
CREATE TABLE IF NOT EXISTS deployments (
	account_id BIGINT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
	id BIGINT NOT NULL,
	name TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (account_id, id)
);
CREATE TABLE IF NOT EXISTS agents (
	account_id BIGINT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
	id TEXT NOT NULL,
	deployment_id BIGINT NOT NULL,
	PRIMARY KEY (account_id, id)
);
CREATE TABLE IF NOT EXISTS users (
	id {{id}},
	account_id BIGINT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
	external_id TEXT,
	internal_id TEXT,
	email TEXT NOT NULL DEFAULT '',
	display_name TEXT NOT NULL DEFAULT '',
	picture TEXT NOT NULL DEFAULT '',
	security_context TEXT,
	ephemeral BOOLEAN NOT NULL DEFAULT FALSE,
	expires_at BIGINT,
	created_at BIGINT NOT NULL,
	updated_at BIGINT NOT NULL,
	UNIQUE (account_id, external_id),
	UNIQUE (account_id, internal_id)
);
CREATE INDEX IF NOT EXISTS users_expiry ON users (expires_at) WHERE ephemeral;
CREATE TABLE IF NOT EXISTS embed_tenants (
	id {{id}},
	account_id BIGINT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
	name TEXT NOT NULL,
	created_at BIGINT NOT NULL,
	UNIQUE (account_id, name)
);
CREATE TABLE IF NOT EXISTS catalog_groups (
	id {{id}},
	account_id BIGINT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
	embed_tenant_id BIGINT NOT NULL DEFAULT 0,
	name TEXT NOT NULL,
	description TEXT,
	created_at BIGINT NOT NULL,
	updated_at BIGINT NOT NULL,
	UNIQUE (account_id, embed_tenant_id, name)
);
CREATE INDEX IF NOT EXISTS catalog_groups_keyset ON catalog_groups (account_id, embed_tenant_id, id);
CREATE TABLE IF NOT EXISTS catalog_attributes (
	id {{id}},
	account_id BIGINT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
	embed_tenant_id BIGINT NOT NULL DEFAULT 0,
	name TEXT NOT NULL,
	type TEXT NOT NULL,
	display_name TEXT,
	default_value TEXT,
	description TEXT,
	created_at BIGINT NOT NULL,
	updated_at BIGINT NOT NULL,
	UNIQUE (account_id, embed_tenant_id, name)
);
CREATE INDEX IF NOT EXISTS catalog_attributes_keyset ON catalog_attributes (account_id, embed_tenant_id, id);
CREATE TABLE IF NOT EXISTS group_members (
	user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
	group_id BIGINT NOT NULL REFERENCES catalog_groups(id) ON DELETE CASCADE,
	PRIMARY KEY (user_id, group_id)
);
CREATE INDEX IF NOT EXISTS group_members_group ON group_members (group_id);
CREATE TABLE IF NOT EXISTS attribute_values (
	user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
	attribute_id BIGINT NOT NULL REFERENCES catalog_attributes(id) ON DELETE CASCADE,
	value TEXT NOT NULL,
	PRIMARY KEY (user_id, attribute_id)
);
CREATE INDEX IF NOT EXISTS attribute_values_attribute ON attribute_values (attribute_id);
CREATE TABLE IF NOT EXISTS sessions (
	hash {{blob}} PRIMARY KEY,
	account_id BIGINT NOT NULL,
	user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
	deployment_id BIGINT NOT NULL,
	embed_tenant_id BIGINT NOT NULL DEFAULT 0,
	embed_tenant_name TEXT NOT NULL DEFAULT '',
	creator_mode BOOLEAN NOT NULL DEFAULT FALSE,
	created_at BIGINT NOT NULL,
	expires_at BIGINT NOT NULL,
	used_at BIGINT
);
CREATE INDEX IF NOT EXISTS sessions_user ON sessions (user_id);
CREATE TABLE IF NOT EXISTS tokens (
	hash {{blob}} PRIMARY KEY,
	account_id BIGINT NOT NULL,
	user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
	deployment_id BIGINT NOT NULL,
	embed_tenant_id BIGINT NOT NULL DEFAULT 0,
	embed_tenant_name TEXT NOT NULL DEFAULT '',
	creator_mode BOOLEAN NOT NULL DEFAULT FALSE,
	created_at BIGINT NOT NULL,
	expires_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS tokens_user ON tokens (user_id);
CREATE TABLE IF NOT EXISTS threads (
	account_id BIGINT NOT NULL,
	chat_id TEXT NOT NULL,
	agent_id TEXT NOT NULL,
	user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
	last_sort BIGINT NOT NULL DEFAULT 0,
	created_at BIGINT NOT NULL,
	updated_at BIGINT NOT NULL,
	PRIMARY KEY (account_id, chat_id)
);
CREATE INDEX IF NOT EXISTS threads_user ON threads (user_id);
CREATE TABLE IF NOT EXISTS thread_messages (
	account_id BIGINT NOT NULL,
	chat_id TEXT NOT NULL,
	id TEXT NOT NULL,
	sort BIGINT NOT NULL,
	body TEXT NOT NULL,
	PRIMARY KEY (account_id, chat_id, id),
	FOREIGN KEY (account_id, chat_id) REFERENCES threads(account_id, chat_id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS thread_messages_sort ON thread_messages (account_id, chat_id, sort);
`

func (s *Store) ddl() []string {
	id, blob := "INTEGER PRIMARY KEY AUTOINCREMENT", "BLOB"
	if s.dialect == postgresDialect {
		id, blob = "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", "BYTEA"
	}
	text := strings.NewReplacer("{{id}}", id, "{{blob}}", blob).Replace(schema + quotaSchema)
	var out []string
	for stmt := range strings.SplitSeq(text, ";") {
		if stmt = strings.TrimSpace(stmt); stmt != "" {
			out = append(out, stmt)
		}
	}
	return out
}

// migrate creates the schema. On PostgreSQL it holds an advisory lock so
// that several processes opening one database do not race on CREATE TABLE.
func (s *Store) migrate() error {
	if s.migrated {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.cfg.queryTimeout)
	defer cancel()
	var err error
	if s.dialect == postgresDialect {
		err = s.migratePostgres(ctx)
	} else {
		err = s.migrateSQLite(ctx)
	}
	if err != nil {
		return wrapErr("migrate", err)
	}
	s.migrated = true
	return nil
}

func (s *Store) migratePostgres(ctx context.Context) error {
	return s.withPgx(ctx, func(pc *pgx.Conn) error {
		tx, err := pc.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(7318002119)"); err != nil {
			return err
		}
		// One round trip: a statement without arguments goes with the
		// simple protocol, which accepts several statements.
		if _, err := tx.Exec(ctx, strings.Join(s.ddl(), ";\n")); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, addLimitsPostgres); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
}

func (s *Store) migrateSQLite(ctx context.Context) error {
	w, err := s.acquireWriter(ctx)
	if err != nil {
		return err
	}
	defer s.releaseWriter()
	c := w.conn
	if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	for _, stmt := range s.ddl() {
		if _, err := c.ExecContext(ctx, stmt); err != nil {
			_, _ = c.ExecContext(context.Background(), "ROLLBACK")
			return err
		}
	}
	if err := addLimitsSQLite(ctx, c); err != nil {
		_, _ = c.ExecContext(context.Background(), "ROLLBACK")
		return err
	}
	if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
		_, _ = c.ExecContext(context.Background(), "ROLLBACK")
		return err
	}
	return nil
}
