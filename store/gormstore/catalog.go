package gormstore

import (
	"context"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/embedkit/embedkit/store"
)

func (r EmbedTenant) tenant() store.EmbedTenant {
	return store.EmbedTenant{ID: r.ID, AccountID: r.AccountID, Name: r.Name, CreatedAt: fromNanos(r.CreatedAt)}
}

func (t *txn) tenantByName(ctx context.Context, accountID int64, name string) (store.EmbedTenant, bool, error) {
	var row EmbedTenant
	n, err := t.do(ctx, "embed tenant", func(db *gorm.DB) *gorm.DB {
		return db.Where("account_id = ? AND name = ?", accountID, name).Limit(1).Find(&row)
	})
	return row.tenant(), n > 0, err
}

// EnsureEmbedTenant reads the tenant (one statement when it exists). To
// create one under a limit, the transaction locks the account's row on
// PostgreSQL (FOR NO KEY UPDATE, which foreign key checks do not wait
// for), so that creators of one account count one after the other.
func (t *txn) EnsureEmbedTenant(ctx context.Context, accountID int64, name string, max int) (store.EmbedTenant, error) {
	const op = "ensure embed tenant"
	if et, ok, err := t.tenantByName(ctx, accountID, name); err != nil || ok {
		return et, err
	}
	var out store.EmbedTenant
	err := t.atomic(ctx, func(t *txn) error {
		if max > 0 {
			if t.s.pg {
				if _, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
					return db.Model(&Account{}).Select("id").Where("id = ?", accountID).
						Clauses(clause.Locking{Strength: "NO KEY UPDATE"}).Find(&[]int64{})
				}); err != nil {
					return err
				}
				et, ok, err := t.tenantByName(ctx, accountID, name)
				if err != nil || ok {
					out = et
					return err
				}
			}
			var n int64
			if _, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
				return db.Model(&EmbedTenant{}).Where("account_id = ?", accountID).Count(&n)
			}); err != nil {
				return err
			}
			if n >= int64(max) {
				return newErr(op, store.ErrLimit)
			}
		}
		row := EmbedTenant{AccountID: accountID, Name: name, CreatedAt: nanos(time.Now())}
		n, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
			return db.Clauses(clause.OnConflict{DoNothing: true}, clause.Returning{}).Create(&row)
		})
		if err != nil {
			return err
		}
		if n > 0 {
			out = row.tenant()
			return nil
		}
		et, _, err := t.tenantByName(ctx, accountID, name) // created meanwhile
		out = et
		return err
	})
	return out, err
}

func (t *txn) EmbedTenantByName(ctx context.Context, accountID int64, name string) (store.EmbedTenant, error) {
	et, ok, err := t.tenantByName(ctx, accountID, name)
	if err == nil && !ok {
		err = newErr("embed tenant", store.ErrNotFound)
	}
	return et, err
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// differs reports whether a definition's optional field asks for a change.
func differs(want, have *string) bool { return want != nil && (have == nil || *want != *have) }

// UpsertDefinitions reads the named definitions first and writes only the
// missing or changed ones: most requests resend what is stored, and on
// PostgreSQL an ON CONFLICT DO UPDATE locks the conflicting row even when
// it changes nothing, which would queue concurrent requests of one scope.
func (t *txn) UpsertDefinitions(ctx context.Context, s store.Scope, groups []store.GroupDef, attrs []store.AttributeDef) error {
	const op = "upsert definitions"
	if len(groups) == 0 && len(attrs) == 0 {
		return nil
	}
	l := store.Lookup{Scope: s}
	for _, g := range groups {
		l.GroupNames = append(l.GroupNames, g.Name)
	}
	for _, a := range attrs {
		l.AttrNames = append(l.AttrNames, a.Name)
	}
	have, err := t.catalogByName(ctx, l)
	if err != nil {
		return err
	}
	now := nanos(time.Now())
	var newGroups []CatalogGroup
	for _, g := range groups {
		h, ok := have["g"+g.Name]
		if !ok || differs(g.Description, h.Description) {
			newGroups = append(newGroups, CatalogGroup{AccountID: s.AccountID, EmbedTenantID: s.EmbedTenantID,
				Name: g.Name, Description: g.Description, CreatedAt: now, UpdatedAt: now})
		}
	}
	var newAttrs []CatalogAttribute
	for _, a := range attrs {
		h, ok := have["a"+a.Name]
		if !ok || differs(a.DisplayName, h.DisplayName) || differs(a.DefaultValue, h.DefaultValue) || differs(a.Description, h.Description) {
			newAttrs = append(newAttrs, CatalogAttribute{AccountID: s.AccountID, EmbedTenantID: s.EmbedTenantID,
				Name: a.Name, Type: string(a.Type), DisplayName: a.DisplayName, DefaultValue: a.DefaultValue,
				Description: a.Description, CreatedAt: now, UpdatedAt: now})
		}
	}
	// A nil field keeps the stored value: COALESCE with the inserted one.
	keep := func(table string, cols ...string) clause.OnConflict {
		set := clause.Set{{Column: clause.Column{Name: "updated_at"}, Value: clause.Expr{SQL: "excluded.updated_at"}}}
		for _, c := range cols {
			set = append(set, clause.Assignment{Column: clause.Column{Name: c},
				Value: clause.Expr{SQL: "COALESCE(excluded." + c + ", " + table + "." + c + ")"}})
		}
		return clause.OnConflict{Columns: columns("account_id", "embed_tenant_id", "name"), DoUpdates: set}
	}
	if len(newGroups) > 0 {
		if _, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
			return db.Clauses(keep("embedkit_catalog_groups", "description")).Create(&newGroups)
		}); err != nil {
			return err
		}
	}
	if len(newAttrs) > 0 {
		if _, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
			return db.Clauses(keep("embedkit_catalog_attributes", "display_name", "default_value", "description")).Create(&newAttrs)
		}); err != nil {
			return err
		}
	}
	return nil
}

// catalogRow is a row of the Lookup's UNION ALL: a deployment (kind "d"),
// an attribute definition ("a") or a group definition ("g").
type catalogRow struct {
	Kind          string
	ID            int64
	AccountID     int64
	EmbedTenantID int64
	Name          string
	Type          string
	DisplayName   *string
	DefaultValue  *string
	Description   *string
	CreatedAt     int64
	UpdatedAt     int64
}

const (
	attrSelect  = "SELECT 'a' AS kind, id, account_id, embed_tenant_id, name, type, display_name, default_value, description, created_at, updated_at FROM embedkit_catalog_attributes WHERE account_id = ? AND embed_tenant_id = ? AND name IN ?"
	groupSelect = "SELECT 'g' AS kind, id, account_id, embed_tenant_id, name, '' AS type, NULL AS display_name, NULL AS default_value, description, created_at, updated_at FROM embedkit_catalog_groups WHERE account_id = ? AND embed_tenant_id = ? AND name IN ?"
	deplSelect  = "SELECT 'd' AS kind, id, account_id, 0 AS embed_tenant_id, name, '' AS type, NULL AS display_name, NULL AS default_value, NULL AS description, 0 AS created_at, 0 AS updated_at FROM embedkit_deployments WHERE account_id = ? AND id = ?"
)

// lookupRows reads what l names in one statement. Hand-written SQL: GORM
// has no UNION; one statement instead of three is what keeps a
// generate-session at its statement count.
func (t *txn) lookupRows(ctx context.Context, l store.Lookup) ([]catalogRow, error) {
	var parts []string
	var args []any
	s := l.Scope
	if len(l.AttrNames) > 0 {
		parts, args = append(parts, attrSelect), append(args, s.AccountID, s.EmbedTenantID, l.AttrNames)
	}
	if len(l.GroupNames) > 0 {
		parts, args = append(parts, groupSelect), append(args, s.AccountID, s.EmbedTenantID, l.GroupNames)
	}
	if l.DeploymentID != 0 {
		parts, args = append(parts, deplSelect), append(args, s.AccountID, l.DeploymentID)
	}
	var rows []catalogRow
	if len(parts) == 0 {
		return nil, nil
	}
	_, err := t.do(ctx, "lookup", func(db *gorm.DB) *gorm.DB {
		return db.Raw(strings.Join(parts, " UNION ALL "), args...).Scan(&rows)
	})
	return rows, err
}

// catalogByName returns the definitions l names, keyed by "a" or "g" and
// the name.
func (t *txn) catalogByName(ctx context.Context, l store.Lookup) (map[string]catalogRow, error) {
	rows, err := t.lookupRows(ctx, l)
	m := make(map[string]catalogRow, len(rows))
	for _, r := range rows {
		m[r.Kind+r.Name] = r
	}
	return m, err
}

func (r catalogRow) attribute() store.Attribute {
	return store.Attribute{ID: r.ID, Scope: store.Scope{AccountID: r.AccountID, EmbedTenantID: r.EmbedTenantID},
		Name: r.Name, Type: store.AttributeType(r.Type), DisplayName: str(r.DisplayName), DefaultValue: str(r.DefaultValue),
		Description: str(r.Description), CreatedAt: fromNanos(r.CreatedAt), UpdatedAt: fromNanos(r.UpdatedAt)}
}

func (r catalogRow) group() store.Group {
	return store.Group{ID: r.ID, Scope: store.Scope{AccountID: r.AccountID, EmbedTenantID: r.EmbedTenantID},
		Name: r.Name, Description: str(r.Description), CreatedAt: fromNanos(r.CreatedAt), UpdatedAt: fromNanos(r.UpdatedAt)}
}

// Lookup reads the deployment and the definitions in one statement.
func (t *txn) Lookup(ctx context.Context, l store.Lookup) (store.LookupResult, error) {
	rows, err := t.lookupRows(ctx, l)
	if err != nil {
		return store.LookupResult{}, err
	}
	var res store.LookupResult
	for _, r := range rows {
		switch r.Kind {
		case "a":
			res.Attributes = append(res.Attributes, r.attribute())
		case "g":
			res.Groups = append(res.Groups, r.group())
		case "d":
			res.Deployment, res.DeploymentFound = store.Deployment{AccountID: r.AccountID, ID: r.ID, Name: r.Name}, true
		}
	}
	return res, nil
}

func (r CatalogGroup) group() store.Group {
	return catalogRow{ID: r.ID, AccountID: r.AccountID, EmbedTenantID: r.EmbedTenantID, Name: r.Name,
		Description: r.Description, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}.group()
}

func (r CatalogAttribute) attribute() store.Attribute {
	return catalogRow{ID: r.ID, AccountID: r.AccountID, EmbedTenantID: r.EmbedTenantID, Name: r.Name, Type: r.Type,
		DisplayName: r.DisplayName, DefaultValue: r.DefaultValue, Description: r.Description,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}.attribute()
}

// inScope selects the definitions of s.
func inScope(db *gorm.DB, s store.Scope) *gorm.DB {
	return db.Where("account_id = ? AND embed_tenant_id = ?", s.AccountID, s.EmbedTenantID)
}

func (t *txn) ListGroups(ctx context.Context, s store.Scope, afterID int64, limit int) ([]store.Group, error) {
	var rows []CatalogGroup
	_, err := t.do(ctx, "list groups", func(db *gorm.DB) *gorm.DB {
		return inScope(db, s).Where("id > ?", afterID).Order("id").Limit(limit).Find(&rows)
	})
	out := make([]store.Group, len(rows))
	for i, r := range rows {
		out[i] = r.group()
	}
	return out, err
}

func (t *txn) ListAttributes(ctx context.Context, s store.Scope, afterID int64, limit int) ([]store.Attribute, error) {
	var rows []CatalogAttribute
	_, err := t.do(ctx, "list attributes", func(db *gorm.DB) *gorm.DB {
		return inScope(db, s).Where("id > ?", afterID).Order("id").Limit(limit).Find(&rows)
	})
	out := make([]store.Attribute, len(rows))
	for i, r := range rows {
		out[i] = r.attribute()
	}
	return out, err
}

// DeleteGroup deletes the definition only: the users' JSON columns keep
// its ID, which reads ignore (IDs are never reused).
func (t *txn) DeleteGroup(ctx context.Context, s store.Scope, id int64) error {
	return t.deleteDef(ctx, "delete group", &CatalogGroup{}, s, id)
}

// DeleteAttribute deletes the definition only, as DeleteGroup.
func (t *txn) DeleteAttribute(ctx context.Context, s store.Scope, id int64) error {
	return t.deleteDef(ctx, "delete attribute", &CatalogAttribute{}, s, id)
}

func (t *txn) deleteDef(ctx context.Context, op string, model any, s store.Scope, id int64) error {
	n, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB { return inScope(db, s).Where("id = ?", id).Delete(model) })
	if err == nil && n == 0 {
		err = newErr(op, store.ErrNotFound)
	}
	return err
}
