package gormstore

import (
	"context"
	"encoding/json"

	"github.com/embedkit/embedkit/store"
)

func (t *txn) SaveAccount(ctx context.Context, a store.Account) (store.Account, error) {
	branches := "[]"
	if len(a.Branches) > 0 {
		b, err := json.Marshal(a.Branches)
		if err != nil {
			return store.Account{}, wrapErr("save account", err)
		}
		branches = string(b)
	}
	limits, err := json.Marshal(a.Limits)
	if err != nil {
		return store.Account{}, wrapErr("save account", err)
	}
	plan := a.Plan
	if plan == "" {
		plan = store.PlanFree
	}
	var row accountRow
	_, err = t.find(ctx, "save account", &row,
		`INSERT INTO embedkit_accounts (name, plan, use_creator_mode, max_external_users, branches, limits) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET plan = excluded.plan, use_creator_mode = excluded.use_creator_mode,
		max_external_users = excluded.max_external_users, branches = excluded.branches, limits = excluded.limits
		RETURNING `+accountCols,
		a.Name, string(plan), a.UseCreatorMode, a.MaxExternalUsers, branches, string(limits))
	if err != nil {
		return store.Account{}, err
	}
	// The rows that count persistent external users (see countPersistent).
	// Shard 0 starts from the users already there, so that a database
	// written before the count existed is counted right.
	shards := 1
	if t.pg() {
		shards = slotShards
	}
	if _, err := t.exec(ctx, "save account",
		`INSERT INTO embedkit_account_user_slots (account_id, shard, n)
		SELECT ?, 0, COUNT(*) FROM embedkit_users WHERE account_id = ? AND external_id IS NOT NULL AND NOT ephemeral
		ON CONFLICT (account_id, shard) DO NOTHING`, row.ID, row.ID); err != nil {
		return store.Account{}, err
	}
	if shards > 1 {
		args := make([]any, 0, 2*(shards-1))
		for i := 1; i < shards; i++ {
			args = append(args, row.ID, i)
		}
		if _, err := t.exec(ctx, "save account",
			"INSERT INTO embedkit_account_user_slots (account_id, shard) VALUES "+placeholders(shards-1, 2)+
				" ON CONFLICT (account_id, shard) DO NOTHING", args...); err != nil {
			return store.Account{}, err
		}
	}
	return row.account(), nil
}

func (t *txn) AccountByID(ctx context.Context, id int64) (store.Account, error) {
	var row accountRow
	n, err := t.find(ctx, "account by id", &row, "SELECT "+accountCols+" FROM embedkit_accounts WHERE id = ?", id)
	if err != nil {
		return store.Account{}, err
	}
	if n == 0 {
		return store.Account{}, newErr("account by id", store.ErrNotFound)
	}
	return row.account(), nil
}

func (t *txn) AccountByName(ctx context.Context, name string) (store.Account, error) {
	var row accountRow
	n, err := t.find(ctx, "account by name", &row, "SELECT "+accountCols+" FROM embedkit_accounts WHERE name = ?", name)
	if err != nil {
		return store.Account{}, err
	}
	if n == 0 {
		return store.Account{}, newErr("account by name", store.ErrNotFound)
	}
	return row.account(), nil
}

func (t *txn) SaveDeployment(ctx context.Context, d store.Deployment) error {
	_, err := t.exec(ctx, "save deployment",
		`INSERT INTO embedkit_deployments (account_id, id, name) VALUES (?, ?, ?)
		ON CONFLICT (account_id, id) DO UPDATE SET name = excluded.name`,
		d.AccountID, d.ID, d.Name)
	return err
}

func (t *txn) Deployment(ctx context.Context, accountID, id int64) (store.Deployment, error) {
	var row deploymentRow
	n, err := t.find(ctx, "deployment", &row, "SELECT account_id, id, name FROM embedkit_deployments WHERE account_id = ? AND id = ?", accountID, id)
	if err != nil {
		return store.Deployment{}, err
	}
	if n == 0 {
		return store.Deployment{}, newErr("deployment", store.ErrNotFound)
	}
	return store.Deployment{AccountID: row.AccountID, ID: row.ID, Name: row.Name}, nil
}

func (t *txn) SaveAgent(ctx context.Context, a store.Agent) error {
	_, err := t.exec(ctx, "save agent",
		`INSERT INTO embedkit_agents (account_id, id, deployment_id) VALUES (?, ?, ?)
		ON CONFLICT (account_id, id) DO UPDATE SET deployment_id = excluded.deployment_id`,
		a.AccountID, a.ID, a.DeploymentID)
	return err
}

func (t *txn) Agent(ctx context.Context, accountID int64, id string) (store.Agent, error) {
	var row agentRow
	n, err := t.find(ctx, "agent", &row, "SELECT account_id, id, deployment_id FROM embedkit_agents WHERE account_id = ? AND id = ?", accountID, id)
	if err != nil {
		return store.Agent{}, err
	}
	if n == 0 {
		return store.Agent{}, newErr("agent", store.ErrNotFound)
	}
	return store.Agent{AccountID: row.AccountID, ID: row.ID, DeploymentID: row.DeploymentID}, nil
}

// SaveAccount implements [store.Accounts].
func (s *Store) SaveAccount(ctx context.Context, a store.Account) (store.Account, error) {
	return write(ctx, s, func(t *txn) (store.Account, error) { return t.SaveAccount(ctx, a) })
}

// AccountByID implements [store.Accounts].
func (s *Store) AccountByID(ctx context.Context, id int64) (store.Account, error) {
	return read(ctx, s, func(t *txn) (store.Account, error) { return t.AccountByID(ctx, id) })
}

// AccountByName implements [store.Accounts].
func (s *Store) AccountByName(ctx context.Context, name string) (store.Account, error) {
	return read(ctx, s, func(t *txn) (store.Account, error) { return t.AccountByName(ctx, name) })
}

// SaveDeployment implements [store.Accounts].
func (s *Store) SaveDeployment(ctx context.Context, d store.Deployment) error {
	return write0(ctx, s, func(t *txn) error { return t.SaveDeployment(ctx, d) })
}

// Deployment implements [store.Accounts].
func (s *Store) Deployment(ctx context.Context, accountID, id int64) (store.Deployment, error) {
	return read(ctx, s, func(t *txn) (store.Deployment, error) { return t.Deployment(ctx, accountID, id) })
}

// SaveAgent implements [store.Accounts].
func (s *Store) SaveAgent(ctx context.Context, a store.Agent) error {
	return write0(ctx, s, func(t *txn) error { return t.SaveAgent(ctx, a) })
}

// Agent implements [store.Accounts].
func (s *Store) Agent(ctx context.Context, accountID int64, id string) (store.Agent, error) {
	return read(ctx, s, func(t *txn) (store.Agent, error) { return t.Agent(ctx, accountID, id) })
}
