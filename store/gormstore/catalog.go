package gormstore

import (
	"context"
	"strings"
	"time"

	"github.com/embedkit/embedkit/store"
)

func (t *txn) EnsureEmbedTenant(ctx context.Context, accountID int64, name string) (store.EmbedTenant, error) {
	et, err := t.EmbedTenantByName(ctx, accountID, name)
	if err == nil || !isNotFound(err) {
		return et, err
	}
	if _, err := t.exec(ctx, "ensure embed tenant",
		"INSERT INTO embedkit_embed_tenants (account_id, name, created_at) VALUES (?, ?, ?) ON CONFLICT (account_id, name) DO NOTHING",
		accountID, name, time.Now().UnixNano()); err != nil {
		return store.EmbedTenant{}, err
	}
	return t.EmbedTenantByName(ctx, accountID, name)
}

func (t *txn) EmbedTenantByName(ctx context.Context, accountID int64, name string) (store.EmbedTenant, error) {
	var row tenantRow
	n, err := t.find(ctx, "embed tenant", &row,
		"SELECT "+tenantCols+" FROM embedkit_embed_tenants WHERE account_id = ? AND name = ?", accountID, name)
	if err != nil {
		return store.EmbedTenant{}, err
	}
	if n == 0 {
		return store.EmbedTenant{}, newErr("embed tenant", store.ErrNotFound)
	}
	return row.tenant(), nil
}

// typedRows returns "(?::t1, ?::t2), (?::t1, ?::t2)" for rows rows of the
// given PostgreSQL types (parameters in VALUES need their types spelled out).
func typedRows(rows int, types ...string) string {
	var row strings.Builder
	row.WriteByte('(')
	for i, ty := range types {
		if i > 0 {
			row.WriteString(", ")
		}
		row.WriteString("?::" + ty)
	}
	row.WriteByte(')')
	r := row.String()
	var b strings.Builder
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(r)
	}
	return b.String()
}

// nonEmpty maps an empty group description to NULL: group descriptions are
// never cleared.
func nonEmpty(p *string) any {
	if p == nil || *p == "" {
		return nil
	}
	return *p
}

// On PostgreSQL, INSERT ... ON CONFLICT DO UPDATE locks every conflicting
// row even when its WHERE clause leaves it unchanged, so concurrent requests
// that resend the same definitions (creator mode is meant to be idempotent)
// would queue on the catalog rows until each other's commit. There the
// upserts are one statement of another shape: insert the missing names (ON
// CONFLICT DO NOTHING locks nothing) and update only the rows that differ.

func (t *txn) UpsertGroups(ctx context.Context, s store.Scope, defs []store.GroupDef) error {
	now := time.Now().UnixNano()
	if t.pg() {
		for chunk := range chunks(defs, batchRows) {
			args := make([]any, 0, 2*len(chunk)+8)
			for _, d := range chunk {
				args = append(args, d.Name, nonEmpty(d.Description))
			}
			args = append(args, s.AccountID, s.EmbedTenantID, now, now, now, s.AccountID, s.EmbedTenantID)
			if _, err := t.exec(ctx, "upsert groups",
				`WITH v (name, description) AS (VALUES `+typedRows(len(chunk), "text", "text")+`),
				ins AS (INSERT INTO embedkit_catalog_groups (account_id, embed_tenant_id, name, description, created_at, updated_at)
					SELECT ?, ?, name, description, ?, ? FROM v
					ON CONFLICT (account_id, embed_tenant_id, name) DO NOTHING)
				UPDATE embedkit_catalog_groups g SET description = v.description, updated_at = ?
				FROM v WHERE g.account_id = ? AND g.embed_tenant_id = ? AND g.name = v.name
					AND v.description IS NOT NULL AND g.description IS DISTINCT FROM v.description`,
				args...); err != nil {
				return err
			}
		}
		return nil
	}
	for chunk := range chunks(defs, batchRows) {
		args := make([]any, 0, 6*len(chunk))
		for _, d := range chunk {
			args = append(args, s.AccountID, s.EmbedTenantID, d.Name, nonEmpty(d.Description), now, now)
		}
		// One statement: insert the missing groups; for existing ones set a
		// supplied, different description (updated_at moves only then).
		if _, err := t.exec(ctx, "upsert groups",
			`INSERT INTO embedkit_catalog_groups (account_id, embed_tenant_id, name, description, created_at, updated_at)
			VALUES `+placeholders(len(chunk), 6)+`
			ON CONFLICT (account_id, embed_tenant_id, name) DO UPDATE SET
				description = excluded.description, updated_at = excluded.updated_at
			WHERE excluded.description IS NOT NULL
				AND (embedkit_catalog_groups.description IS NULL OR embedkit_catalog_groups.description <> excluded.description)`,
			args...); err != nil {
			return err
		}
	}
	return nil
}

func (t *txn) UpsertAttributes(ctx context.Context, s store.Scope, defs []store.AttributeDef) error {
	now := time.Now().UnixNano()
	if t.pg() {
		for chunk := range chunks(defs, batchRows) {
			args := make([]any, 0, 5*len(chunk)+8)
			for _, d := range chunk {
				args = append(args, d.Name, string(d.Type), optString(d.DisplayName), optString(d.DefaultValue), optString(d.Description))
			}
			args = append(args, s.AccountID, s.EmbedTenantID, now, now, now, s.AccountID, s.EmbedTenantID)
			if _, err := t.exec(ctx, "upsert attributes",
				`WITH v (name, type, display_name, default_value, description) AS (VALUES `+
					typedRows(len(chunk), "text", "text", "text", "text", "text")+`),
				ins AS (INSERT INTO embedkit_catalog_attributes (account_id, embed_tenant_id, name, type, display_name, default_value, description, created_at, updated_at)
					SELECT ?, ?, name, type, display_name, default_value, description, ?, ? FROM v
					ON CONFLICT (account_id, embed_tenant_id, name) DO NOTHING)
				UPDATE embedkit_catalog_attributes a SET
					display_name = COALESCE(v.display_name, a.display_name),
					default_value = COALESCE(v.default_value, a.default_value),
					description = COALESCE(v.description, a.description),
					updated_at = ?
				FROM v WHERE a.account_id = ? AND a.embed_tenant_id = ? AND a.name = v.name AND (
					COALESCE(a.display_name, '') <> COALESCE(v.display_name, a.display_name, '')
					OR COALESCE(a.default_value, '') <> COALESCE(v.default_value, a.default_value, '')
					OR COALESCE(a.description, '') <> COALESCE(v.description, a.description, ''))`,
				args...); err != nil {
				return err
			}
		}
		return nil
	}
	for chunk := range chunks(defs, batchRows) {
		args := make([]any, 0, 9*len(chunk))
		for _, d := range chunk {
			args = append(args, s.AccountID, s.EmbedTenantID, d.Name, string(d.Type),
				optString(d.DisplayName), optString(d.DefaultValue), optString(d.Description), now, now)
		}
		// One statement. The type of an existing attribute is never
		// changed; nil fields keep the stored value; updated_at moves only
		// when a value visibly changes (NULL and '' both read as "").
		if _, err := t.exec(ctx, "upsert attributes",
			`INSERT INTO embedkit_catalog_attributes (account_id, embed_tenant_id, name, type, display_name, default_value, description, created_at, updated_at)
			VALUES `+placeholders(len(chunk), 9)+`
			ON CONFLICT (account_id, embed_tenant_id, name) DO UPDATE SET
				display_name = COALESCE(excluded.display_name, embedkit_catalog_attributes.display_name),
				default_value = COALESCE(excluded.default_value, embedkit_catalog_attributes.default_value),
				description = COALESCE(excluded.description, embedkit_catalog_attributes.description),
				updated_at = excluded.updated_at
			WHERE COALESCE(embedkit_catalog_attributes.display_name, '') <> COALESCE(excluded.display_name, embedkit_catalog_attributes.display_name, '')
				OR COALESCE(embedkit_catalog_attributes.default_value, '') <> COALESCE(excluded.default_value, embedkit_catalog_attributes.default_value, '')
				OR COALESCE(embedkit_catalog_attributes.description, '') <> COALESCE(excluded.description, embedkit_catalog_attributes.description, '')`,
			args...); err != nil {
			return err
		}
	}
	return nil
}

// The catalog entries of a scope by name: account_id, embed_tenant_id, and a
// list of names. GroupsByName, AttributesByName and Lookup run them.
const (
	groupsByNameSQL     = "SELECT " + groupCols + " FROM embedkit_catalog_groups WHERE account_id = ? AND embed_tenant_id = ? AND name IN ?"
	attributesByNameSQL = "SELECT " + attributeCols + " FROM embedkit_catalog_attributes WHERE account_id = ? AND embed_tenant_id = ? AND name IN ?"
	// catalogByNameSQL is both in one statement (attributes' arguments,
	// then the groups'), read into catalogRows: a group is a row of kind 1
	// with empty attribute columns.
	catalogByNameSQL = "SELECT 0 AS kind, " + attributeCols + " FROM embedkit_catalog_attributes WHERE account_id = ? AND embed_tenant_id = ? AND name IN ?" +
		" UNION ALL SELECT 1, id, account_id, embed_tenant_id, name, '', '', '', COALESCE(description, ''), created_at, updated_at" +
		" FROM embedkit_catalog_groups WHERE account_id = ? AND embed_tenant_id = ? AND name IN ?"
	// catalogByNameLite is catalogByNameSQL for SQLite, with each list (a
	// JSON array, listArg) joined instead of read by IN: see liteList.
	// Arguments: the attribute names, account, embed tenant, the group
	// names, account, embed tenant.
	catalogByNameLite = "SELECT 0 AS kind, a.id, a.account_id, a.embed_tenant_id, a.name, a.type, COALESCE(a.display_name, ''), " +
		"COALESCE(a.default_value, ''), COALESCE(a.description, ''), a.created_at, a.updated_at" +
		" FROM json_each(?) AS j CROSS JOIN embedkit_catalog_attributes a WHERE a.account_id = ? AND a.embed_tenant_id = ? AND a.name = j.value" +
		" UNION ALL SELECT 1, g.id, g.account_id, g.embed_tenant_id, g.name, '', '', '', COALESCE(g.description, ''), g.created_at, g.updated_at" +
		" FROM json_each(?) AS j CROSS JOIN embedkit_catalog_groups g WHERE g.account_id = ? AND g.embed_tenant_id = ? AND g.name = j.value"
)

func (t *txn) GroupsByName(ctx context.Context, s store.Scope, names []string) ([]store.Group, error) {
	if len(names) == 0 {
		return nil, nil
	}
	var rows groupRows
	if _, err := t.find(ctx, "groups by name", &rows, groupsByNameSQL, s.AccountID, s.EmbedTenantID, names); err != nil {
		return nil, err
	}
	return groups(rows), nil
}

func (t *txn) AttributesByName(ctx context.Context, s store.Scope, names []string) ([]store.Attribute, error) {
	if len(names) == 0 {
		return nil, nil
	}
	var rows attributeRows
	if _, err := t.find(ctx, "attributes by name", &rows, attributesByNameSQL, s.AccountID, s.EmbedTenantID, names); err != nil {
		return nil, err
	}
	return attributes(rows), nil
}

func (t *txn) ListGroups(ctx context.Context, s store.Scope, afterID int64, limit int) ([]store.Group, error) {
	if limit <= 0 {
		return nil, nil
	}
	var rows groupRows
	if _, err := t.find(ctx, "list groups", &rows,
		"SELECT "+groupCols+" FROM embedkit_catalog_groups WHERE account_id = ? AND embed_tenant_id = ? AND id > ? ORDER BY id LIMIT ?",
		s.AccountID, s.EmbedTenantID, afterID, limit); err != nil {
		return nil, err
	}
	return groups(rows), nil
}

func (t *txn) ListAttributes(ctx context.Context, s store.Scope, afterID int64, limit int) ([]store.Attribute, error) {
	if limit <= 0 {
		return nil, nil
	}
	var rows attributeRows
	if _, err := t.find(ctx, "list attributes", &rows,
		"SELECT "+attributeCols+" FROM embedkit_catalog_attributes WHERE account_id = ? AND embed_tenant_id = ? AND id > ? ORDER BY id LIMIT ?",
		s.AccountID, s.EmbedTenantID, afterID, limit); err != nil {
		return nil, err
	}
	return attributes(rows), nil
}

func (t *txn) DeleteGroup(ctx context.Context, s store.Scope, id int64) error {
	// Memberships go with the group (ON DELETE CASCADE).
	n, err := t.exec(ctx, "delete group",
		"DELETE FROM embedkit_catalog_groups WHERE id = ? AND account_id = ? AND embed_tenant_id = ?", id, s.AccountID, s.EmbedTenantID)
	if err != nil {
		return err
	}
	if n == 0 {
		return newErr("delete group", store.ErrNotFound)
	}
	return nil
}

func (t *txn) DeleteAttribute(ctx context.Context, s store.Scope, id int64) error {
	// Values go with the definition (ON DELETE CASCADE).
	n, err := t.exec(ctx, "delete attribute",
		"DELETE FROM embedkit_catalog_attributes WHERE id = ? AND account_id = ? AND embed_tenant_id = ?", id, s.AccountID, s.EmbedTenantID)
	if err != nil {
		return err
	}
	if n == 0 {
		return newErr("delete attribute", store.ErrNotFound)
	}
	return nil
}

// EnsureEmbedTenant implements [store.Catalog]. It reads first and writes
// only when the tenant is missing.
func (s *Store) EnsureEmbedTenant(ctx context.Context, accountID int64, name string) (store.EmbedTenant, error) {
	if et, err := read(ctx, s, func(t *txn) (store.EmbedTenant, error) { return t.EmbedTenantByName(ctx, accountID, name) }); err == nil {
		return et, nil
	}
	return write(ctx, s, func(t *txn) (store.EmbedTenant, error) { return t.EnsureEmbedTenant(ctx, accountID, name) })
}

// EmbedTenantByName implements [store.Catalog].
func (s *Store) EmbedTenantByName(ctx context.Context, accountID int64, name string) (store.EmbedTenant, error) {
	return read(ctx, s, func(t *txn) (store.EmbedTenant, error) { return t.EmbedTenantByName(ctx, accountID, name) })
}

// UpsertGroups implements [store.Catalog] in its own transaction.
func (s *Store) UpsertGroups(ctx context.Context, sc store.Scope, defs []store.GroupDef) error {
	return write0(ctx, s, func(t *txn) error { return t.UpsertGroups(ctx, sc, defs) })
}

// UpsertAttributes implements [store.Catalog] in its own transaction.
func (s *Store) UpsertAttributes(ctx context.Context, sc store.Scope, defs []store.AttributeDef) error {
	return write0(ctx, s, func(t *txn) error { return t.UpsertAttributes(ctx, sc, defs) })
}

// GroupsByName implements [store.Catalog].
func (s *Store) GroupsByName(ctx context.Context, sc store.Scope, names []string) ([]store.Group, error) {
	return read(ctx, s, func(t *txn) ([]store.Group, error) { return t.GroupsByName(ctx, sc, names) })
}

// AttributesByName implements [store.Catalog].
func (s *Store) AttributesByName(ctx context.Context, sc store.Scope, names []string) ([]store.Attribute, error) {
	return read(ctx, s, func(t *txn) ([]store.Attribute, error) { return t.AttributesByName(ctx, sc, names) })
}

// ListGroups implements [store.Catalog].
func (s *Store) ListGroups(ctx context.Context, sc store.Scope, afterID int64, limit int) ([]store.Group, error) {
	return read(ctx, s, func(t *txn) ([]store.Group, error) { return t.ListGroups(ctx, sc, afterID, limit) })
}

// ListAttributes implements [store.Catalog].
func (s *Store) ListAttributes(ctx context.Context, sc store.Scope, afterID int64, limit int) ([]store.Attribute, error) {
	return read(ctx, s, func(t *txn) ([]store.Attribute, error) { return t.ListAttributes(ctx, sc, afterID, limit) })
}

// DeleteGroup implements [store.Catalog] in its own transaction.
func (s *Store) DeleteGroup(ctx context.Context, sc store.Scope, id int64) error {
	return write0(ctx, s, func(t *txn) error { return t.DeleteGroup(ctx, sc, id) })
}

// DeleteAttribute implements [store.Catalog] in its own transaction.
func (s *Store) DeleteAttribute(ctx context.Context, sc store.Scope, id int64) error {
	return write0(ctx, s, func(t *txn) error { return t.DeleteAttribute(ctx, sc, id) })
}
