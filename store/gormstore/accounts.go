package gormstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/embedkit/embedkit/store"
)

func columns(names ...string) []clause.Column {
	return convert(names, func(n string) clause.Column { return clause.Column{Name: n} })
}

func upsert(conflict []string, set ...string) clause.OnConflict {
	return clause.OnConflict{Columns: columns(conflict...), DoUpdates: clause.AssignmentColumns(set)}
}

// first reads the first row of R that scopes select; none is [store.ErrNotFound].
func first[R any](t *txn, ctx context.Context, op string, scopes ...func(*gorm.DB) *gorm.DB) (R, error) {
	var row R
	n, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB { return db.Scopes(scopes...).Limit(1).Find(&row) })
	return row, someRow(op, n, err)
}

func list[R, T any](t *txn, ctx context.Context, op string, conv func(R) T, order string, scopes ...func(*gorm.DB) *gorm.DB) ([]T, error) {
	var rows []R
	_, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB { return db.Scopes(scopes...).Order(order).Find(&rows) })
	return convert(rows, conv), err
}

func whereSQL(query any, args ...any) func(*gorm.DB) *gorm.DB {
	return func(db *gorm.DB) *gorm.DB { return db.Where(query, args...) }
}

func someRow(op string, n int64, err error) error {
	if err == nil && n == 0 {
		return wrapErr(op, store.ErrNotFound)
	}
	return err
}

func (t *txn) SaveAccount(ctx context.Context, a store.Account) (store.Account, error) {
	branches, _ := json.Marshal(append([]string{}, a.Branches...)) // [] for none
	limits, _ := json.Marshal(a.Limits)
	row := Account{Name: a.Name, Plan: string(cmp.Or(a.Plan, store.PlanFree)), UseCreatorMode: a.UseCreatorMode,
		MaxExternalUsers: int64(a.MaxExternalUsers), Branches: string(branches), Limits: string(limits)}
	_, err := t.write(ctx, "save account", func(db *gorm.DB) *gorm.DB {
		return db.Clauses(upsert([]string{"name"}, "plan", "use_creator_mode", "max_external_users", "branches", "limits"),
			clause.Returning{}).Create(&row)
	})
	return account(row, err)
}

func account(r Account, err error) (store.Account, error) {
	if err != nil {
		return store.Account{}, err
	}
	a := store.Account{ID: r.ID, Name: r.Name, Plan: store.Plan(r.Plan), UseCreatorMode: r.UseCreatorMode,
		MaxExternalUsers: int(r.MaxExternalUsers)}
	err = errors.Join(json.Unmarshal([]byte(r.Branches), &a.Branches), json.Unmarshal([]byte(r.Limits), &a.Limits))
	return a, wrapErr("account", err)
}

func (t *txn) AccountByID(ctx context.Context, id int64) (store.Account, error) {
	return account(first[Account](t, ctx, "account by id", whereSQL("id = ?", id)))
}

func (t *txn) AccountByName(ctx context.Context, name string) (store.Account, error) {
	return account(first[Account](t, ctx, "account by name", whereSQL("name = ?", name)))
}

func (t *txn) SaveAPIKey(ctx context.Context, k store.APIKey) error {
	const op = "save api key"
	row := APIKey{Hash: k.Hash, AccountID: k.AccountID, Admin: k.Admin, Origin: string(cmp.Or(k.Origin, store.OriginAPI)), Name: k.Name}
	if !k.CreatedAt.IsZero() {
		row.CreatedAt = k.CreatedAt.UnixNano()
	}
	up := upsert([]string{"hash"}, "admin", "origin", "name")
	up.Where = clause.Where{Exprs: []clause.Expression{clause.Expr{SQL: "embedkit_api_keys.account_id = excluded.account_id"}}}
	n, err := t.write(ctx, op, func(db *gorm.DB) *gorm.DB {
		return db.Select("*").Clauses(up).Create(&row) // Select: zero fields too
	})
	if err == nil && n == 0 {
		err = t.fail(wrapErr(op, store.ErrConflict))
	}
	return err
}

func (r APIKey) key() store.APIKey {
	k := store.APIKey{Hash: r.Hash, AccountID: r.AccountID, Admin: r.Admin, Origin: store.KeyOrigin(r.Origin), Name: r.Name}
	if r.CreatedAt != 0 {
		k.CreatedAt = fromNanos(r.CreatedAt)
	}
	return k
}

// APIKeyByHash reads the key and its account in one statement (a join).
func (t *txn) APIKeyByHash(ctx context.Context, hash []byte) (store.APIKey, store.Account, error) {
	row, err := first[APIKey](t, ctx, "api key", primary, func(db *gorm.DB) *gorm.DB {
		return db.InnerJoins("Account").Where("embedkit_api_keys.hash = ?", hash)
	})
	if err != nil || row.Account == nil {
		return store.APIKey{}, store.Account{}, someRow("api key", 0, err)
	}
	a, err := account(*row.Account, nil)
	return row.key(), a, err
}

func (t *txn) APIKeys(ctx context.Context, accountID int64) ([]store.APIKey, error) {
	return list(t, ctx, "api keys", APIKey.key, "created_at, hash", whereSQL("account_id = ?", accountID))
}

func convert[R, T any](rows []R, f func(R) T) []T {
	out := make([]T, len(rows))
	for i, r := range rows {
		out[i] = f(r)
	}
	return out
}

func (t *txn) DeleteAPIKey(ctx context.Context, accountID int64, hash []byte) error {
	return t.deleteRows(ctx, "delete api key", &APIKey{}, "hash = ? AND account_id = ?", hash, accountID)
}

// deleteRows deletes what query selects; none is [store.ErrNotFound].
func (t *txn) deleteRows(ctx context.Context, op string, model any, query string, args ...any) error {
	n, err := t.write(ctx, op, func(db *gorm.DB) *gorm.DB { return db.Where(query, args...).Delete(model) })
	return someRow(op, n, err)
}

func (t *txn) SaveDeployment(ctx context.Context, d store.Deployment) error {
	return t.save(ctx, "save deployment", &Deployment{AccountID: d.AccountID, ID: d.ID, Name: d.Name}, "name")
}

func (t *txn) SaveAgent(ctx context.Context, a store.Agent) error {
	return t.save(ctx, "save agent", &Agent{AccountID: a.AccountID, ID: a.ID, DeploymentID: a.DeploymentID}, "deployment_id")
}

// save upserts row, of an account's own ID; Select: zero fields too.
func (t *txn) save(ctx context.Context, op string, row any, set string) error {
	_, err := t.write(ctx, op, func(db *gorm.DB) *gorm.DB {
		return db.Select("*").Clauses(upsert([]string{"account_id", "id"}, set)).Create(row)
	})
	return err
}

func (t *txn) Agent(ctx context.Context, accountID int64, id string) (store.Agent, error) {
	r, err := first[Agent](t, ctx, "agent", whereSQL("account_id = ? AND id = ?", accountID, id))
	return store.Agent{AccountID: r.AccountID, ID: r.ID, DeploymentID: r.DeploymentID}, err
}

func (r EmbedTenant) tenant() store.EmbedTenant {
	return store.EmbedTenant{ID: r.ID, AccountID: r.AccountID, Name: r.Name, CreatedAt: fromNanos(r.CreatedAt)}
}

func (t *txn) EmbedTenantByName(ctx context.Context, accountID int64, name string) (store.EmbedTenant, error) {
	row, err := first[EmbedTenant](t, ctx, "embed tenant", whereSQL("account_id = ? AND name = ?", accountID, name))
	return row.tenant(), err
}

// EnsureEmbedTenant creating under a limit locks the account's row on
// PostgreSQL (FOR NO KEY UPDATE: foreign key checks do not wait), so that
// the creators of one account count one after the other.
func (t *txn) EnsureEmbedTenant(ctx context.Context, accountID int64, name string, max int) (store.EmbedTenant, error) {
	const op = "ensure embed tenant"
	return atomically(t, ctx, func(t *txn) (store.EmbedTenant, error) {
		if max > 0 {
			if t.s.pg {
				if _, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
					return db.Model(&Account{}).Select("id").Where("id = ?", accountID).
						Clauses(clause.Locking{Strength: "NO KEY UPDATE"}).Find(&[]int64{})
				}); err != nil {
					return store.EmbedTenant{}, err
				}
			}
			// Created by a transaction that counted before this one?
			if et, err := t.EmbedTenantByName(ctx, accountID, name); !errors.Is(err, store.ErrNotFound) {
				return et, err
			}
			var n int64
			if _, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
				return db.Model(&EmbedTenant{}).Where("account_id = ?", accountID).Count(&n)
			}); err != nil || n >= int64(max) {
				return store.EmbedTenant{}, cmp.Or(err, wrapErr(op, store.ErrLimit))
			}
		}
		row := EmbedTenant{AccountID: accountID, Name: name, CreatedAt: time.Now().UnixNano()}
		n, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB {
			return db.Clauses(clause.OnConflict{DoNothing: true}, clause.Returning{}).Create(&row)
		})
		if err != nil || n > 0 {
			return row.tenant(), err
		}
		return t.EmbedTenantByName(ctx, accountID, name) // created meanwhile
	})
}

func str(p *string) string { return *cmp.Or(p, new(string)) }

// differs reports whether want asks for a visible change of have.
func differs(want, have *string) bool { return want != nil && *want != str(have) }

// UpsertDefinitions writes only missing or changed definitions: most
// requests resend what is stored, and on PostgreSQL ON CONFLICT DO UPDATE
// locks a row even when it changes nothing, queueing concurrent requests.
func (t *txn) UpsertDefinitions(ctx context.Context, s store.Scope, groups []store.GroupDef, attrs []store.AttributeDef) error {
	rows, err := t.lookupRows(ctx, store.Lookup{Scope: s,
		GroupNames: convert(groups, func(g store.GroupDef) string { return g.Name }),
		AttrNames:  convert(attrs, func(a store.AttributeDef) string { return a.Name })}, primary)
	have := make(map[string]catalogRow, len(rows)) // by kind and name
	for _, r := range rows {
		have[r.Kind+r.Name] = r
	}
	now := time.Now().UnixNano()
	var gs []CatalogGroup
	var as []CatalogAttribute
	for _, g := range groups {
		if g.Description != nil && *g.Description == "" {
			g.Description = nil // never clears a description
		}
		if h, ok := have["g"+g.Name]; !ok || differs(g.Description, h.Description) {
			gs = append(gs, CatalogGroup{AccountID: s.AccountID, EmbedTenantID: s.EmbedTenantID, Name: g.Name,
				Description: g.Description, CreatedAt: now, UpdatedAt: now})
		}
	}
	for _, a := range attrs {
		if h, ok := have["a"+a.Name]; !ok || differs(a.DisplayName, h.DisplayName) || differs(a.DefaultValue, h.DefaultValue) ||
			differs(a.Description, h.Description) {
			as = append(as, CatalogAttribute{AccountID: s.AccountID, EmbedTenantID: s.EmbedTenantID, Name: a.Name,
				Type: string(a.Type), DisplayName: a.DisplayName, DefaultValue: a.DefaultValue, Description: a.Description,
				CreatedAt: now, UpdatedAt: now})
		}
	}
	if err != nil || len(gs)+len(as) == 0 {
		return err
	}
	// A nil field keeps the stored value: COALESCE with the inserted one.
	upsert := func(t *txn, op, table string, rows any, cols ...string) error {
		set := map[string]any{"updated_at": gorm.Expr("excluded.updated_at")}
		for _, c := range cols {
			set[c] = gorm.Expr("COALESCE(excluded." + c + ", " + table + "." + c + ")")
		}
		up := clause.OnConflict{Columns: columns("account_id", "embed_tenant_id", "name"), DoUpdates: clause.Assignments(set)}
		_, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB { return db.Clauses(up).Create(rows) })
		return err
	}
	return t.atomic(ctx, func(t *txn) (err error) {
		gs, as := slices.Clone(gs), slices.Clone(as) // not the IDs a failed attempt returned
		if len(gs) > 0 {
			err = upsert(t, "upsert groups", "embedkit_catalog_groups", &gs, "description")
		}
		if len(as) > 0 && err == nil {
			err = upsert(t, "upsert attributes", "embedkit_catalog_attributes", &as, "display_name", "default_value", "description")
		}
		return err
	})
}

// catalogRow is a definition or a row of the Lookup: a deployment (kind
// "d"), an embed tenant ("t"), an attribute ("a") or a group ("g"), in an attribute's columns;
// of UserData, with the user's value of an attribute.
type catalogRow struct {
	Kind string `gorm:"column:kind"`
	CatalogAttribute
	Value *string `gorm:"column:value"`
}

const (
	attrSelect   = "SELECT 'a' AS kind, id, account_id, embed_tenant_id, name, type, display_name, default_value, description, created_at, updated_at FROM embedkit_catalog_attributes WHERE account_id = ? AND embed_tenant_id = ? AND name IN ?"
	groupSelect  = "SELECT 'g' AS kind, id, account_id, embed_tenant_id, name, '' AS type, NULL AS display_name, NULL AS default_value, description, created_at, updated_at FROM embedkit_catalog_groups WHERE account_id = ? AND embed_tenant_id = ? AND name IN ?"
	deplSelect   = "SELECT 'd' AS kind, id, account_id, 0 AS embed_tenant_id, name, '' AS type, NULL AS display_name, NULL AS default_value, NULL AS description, 0 AS created_at, 0 AS updated_at FROM embedkit_deployments WHERE account_id = ? AND id = ?"
	tenantSelect = "SELECT 't' AS kind, id, account_id, 0 AS embed_tenant_id, name, '' AS type, NULL AS display_name, NULL AS default_value, NULL AS description, created_at, 0 AS updated_at FROM embedkit_embed_tenants WHERE account_id = ? AND name = ?"
)

// lookupRows reads what l names in one statement. Hand-written SQL: GORM has no UNION.
func (t *txn) lookupRows(ctx context.Context, l store.Lookup, scopes ...func(*gorm.DB) *gorm.DB) ([]catalogRow, error) {
	var parts []string
	var args []any
	tenant := any(l.Scope.EmbedTenantID)
	if l.EmbedTenantName != "" {
		parts, args = append(parts, tenantSelect), append(args, l.Scope.AccountID, l.EmbedTenantName)
		if l.InEmbedTenant { // NULL when it does not exist: no definition
			tenant = gorm.Expr("(SELECT id FROM embedkit_embed_tenants WHERE account_id = ? AND name = ?)", l.Scope.AccountID, l.EmbedTenantName)
		}
	}
	for i, names := range [][]string{l.AttrNames, l.GroupNames} {
		if len(names) > 0 {
			parts, args = append(parts, []string{attrSelect, groupSelect}[i]), append(args, l.Scope.AccountID, tenant, names)
		}
	}
	if l.DeploymentID != 0 {
		parts, args = append(parts, deplSelect), append(args, l.Scope.AccountID, l.DeploymentID)
	}
	var rows []catalogRow
	if len(parts) == 0 {
		return nil, nil
	}
	_, err := t.do(ctx, "lookup", func(db *gorm.DB) *gorm.DB {
		return db.Scopes(scopes...).Raw(strings.Join(parts, " UNION ALL "), args...).Find(&rows)
	})
	return rows, err
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

func (t *txn) Lookup(ctx context.Context, l store.Lookup) (store.LookupResult, error) {
	rows, err := t.lookupRows(ctx, l, primary) // a write uses what it finds
	var res store.LookupResult
	for _, r := range rows {
		switch r.Kind {
		case "a":
			res.Attributes = append(res.Attributes, r.attribute())
		case "g":
			res.Groups = append(res.Groups, r.group())
		case "d":
			res.Deployment, res.DeploymentFound = store.Deployment{AccountID: r.AccountID, ID: r.ID, Name: r.Name}, true
		case "t":
			res.EmbedTenant, res.EmbedTenantFound = EmbedTenant{ID: r.ID, AccountID: r.AccountID, Name: r.Name, CreatedAt: r.CreatedAt}.tenant(), true
		}
	}
	return res, err
}

const inScope = "account_id = ? AND embed_tenant_id = ?"

// after selects a page of model's definitions in s (limit at least 0: GORM would drop a negative LIMIT).
func after(model any, s store.Scope, afterID int64, limit int) func(*gorm.DB) *gorm.DB {
	return func(db *gorm.DB) *gorm.DB {
		return db.Model(model).Select("*").Where(inScope+" AND id > ?", s.AccountID, s.EmbedTenantID, afterID).Limit(max(limit, 0))
	}
}

func (t *txn) ListGroups(ctx context.Context, s store.Scope, afterID int64, limit int) ([]store.Group, error) {
	return list(t, ctx, "definitions", catalogRow.group, "id", after(&CatalogGroup{}, s, afterID, limit))
}

func (t *txn) ListAttributes(ctx context.Context, s store.Scope, afterID int64, limit int) ([]store.Attribute, error) {
	return list(t, ctx, "definitions", catalogRow.attribute, "id", after(&CatalogAttribute{}, s, afterID, limit))
}

// DeleteGroup deletes the definition only: reads ignore its ID in the users' JSON columns.
func (t *txn) DeleteGroup(ctx context.Context, s store.Scope, id int64) error {
	return t.deleteRows(ctx, "delete group", &CatalogGroup{}, inScope+" AND id = ?", s.AccountID, s.EmbedTenantID, id)
}

func (t *txn) DeleteAttribute(ctx context.Context, s store.Scope, id int64) error {
	return t.deleteRows(ctx, "delete attribute", &CatalogAttribute{}, inScope+" AND id = ?", s.AccountID, s.EmbedTenantID, id)
}
