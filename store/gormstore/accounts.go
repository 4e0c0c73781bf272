package gormstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"

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

// list reads the rows of R that scopes select in order, converted by conv.
func list[R, T any](t *txn, ctx context.Context, op string, conv func(R) T, order string, scopes ...func(*gorm.DB) *gorm.DB) ([]T, error) {
	var rows []R
	_, err := t.do(ctx, op, func(db *gorm.DB) *gorm.DB { return db.Scopes(scopes...).Order(order).Find(&rows) })
	return convert(rows, conv), err
}

func whereSQL(query string, args ...any) func(*gorm.DB) *gorm.DB {
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

// account converts a row read or written with err.
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
