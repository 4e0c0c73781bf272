package memstore

import (
	"bytes"
	"context"
	"slices"

	"github.com/embedkit/embedkit/store"
)

func copyAccount(a store.Account) store.Account {
	if len(a.Branches) == 0 {
		a.Branches = nil
	} else {
		a.Branches = slices.Clone(a.Branches)
	}
	return a
}

func (d *db) saveAccount(a store.Account) (store.Account, error) {
	if a.Plan == "" {
		a.Plan = store.PlanFree
	}
	if id, ok := d.accountByName[a.Name]; ok {
		a.ID = id
	} else {
		d.lastAccountID++
		a.ID = d.lastAccountID
		set(d, d.accountByName, a.Name, a.ID)
	}
	a = copyAccount(a)
	set(d, d.accounts, a.ID, a)
	return copyAccount(a), nil
}

func (d *db) accountByID(id int64) (store.Account, error) {
	a, ok := d.accounts[id]
	if !ok {
		return store.Account{}, notFound("account by id")
	}
	return copyAccount(a), nil
}

func (d *db) accountNamed(name string) (store.Account, error) {
	id, ok := d.accountByName[name]
	if !ok {
		return store.Account{}, notFound("account by name")
	}
	return d.accountByID(id)
}

// needAccount is the foreign-key check of rows that belong to an account.
func (d *db) needAccount(op string, id int64) error {
	if _, ok := d.accounts[id]; !ok {
		return notFound(op + ": account")
	}
	return nil
}

func (d *db) saveAPIKey(k store.APIKey) error {
	key := string(k.Hash)
	if k.Origin == "" {
		k.Origin = store.OriginAPI
	}
	if old, ok := d.apiKeys[key]; ok {
		if old.AccountID != k.AccountID {
			return conflict("save api key: the key belongs to another account")
		}
		old.Admin, old.Origin, old.Name = k.Admin, k.Origin, k.Name
		set(d, d.apiKeys, key, old)
		return nil
	}
	if err := d.needAccount("save api key", k.AccountID); err != nil {
		return err
	}
	k.Hash = slices.Clone(k.Hash)
	set(d, d.apiKeys, key, k)
	return nil
}

// keyAndAccount is what APIKeyByHash returns.
type keyAndAccount struct {
	key     store.APIKey
	account store.Account
}

func (d *db) apiKeyByHash(hash []byte) (keyAndAccount, error) {
	k, ok := d.apiKeys[string(hash)]
	if !ok {
		return keyAndAccount{}, notFound("api key")
	}
	k.Hash = slices.Clone(k.Hash)
	return keyAndAccount{k, copyAccount(d.accounts[k.AccountID])}, nil
}

func (d *db) listAPIKeys(accountID int64) ([]store.APIKey, error) {
	out := []store.APIKey{}
	for _, k := range d.apiKeys {
		if k.AccountID == accountID {
			k.Hash = slices.Clone(k.Hash)
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b store.APIKey) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return bytes.Compare(a.Hash, b.Hash)
	})
	return out, nil
}

func (d *db) deleteAPIKey(accountID int64, hash []byte) error {
	k, ok := d.apiKeys[string(hash)]
	if !ok || k.AccountID != accountID {
		return notFound("delete api key")
	}
	del(d, d.apiKeys, string(hash))
	// The session ids and tokens the key minted end with it.
	for _, k := range sortedKeys(d.sessions) {
		if g := d.sessions[k].grant; string(g.KeyHash) == string(hash) {
			ndel(d, d.userSess, g.UserID, k)
			del(d, d.sessions, k)
		}
	}
	for _, k := range sortedKeys(d.tokens) {
		if g := d.tokens[k]; string(g.KeyHash) == string(hash) {
			ndel(d, d.userTokens, g.UserID, k)
			del(d, d.tokens, k)
		}
	}
	return nil
}

func (d *db) saveDeployment(dep store.Deployment) error {
	if err := d.needAccount("save deployment", dep.AccountID); err != nil {
		return err
	}
	set(d, d.deployments, depKey{dep.AccountID, dep.ID}, dep)
	return nil
}

func (d *db) saveAgent(a store.Agent) error {
	if err := d.needAccount("save agent", a.AccountID); err != nil {
		return err
	}
	set(d, d.agents, agentKey{a.AccountID, a.ID}, a)
	return nil
}

func (d *db) agent(accountID int64, id string) (store.Agent, error) {
	a, ok := d.agents[agentKey{accountID, id}]
	if !ok {
		return store.Agent{}, notFound("agent")
	}
	return a, nil
}

// SaveAccount implements [store.Accounts]. An empty Plan is stored as
// [store.PlanFree].
func (s *Store) SaveAccount(ctx context.Context, a store.Account) (store.Account, error) {
	return write(s, ctx, func(d *db) (store.Account, error) { return d.saveAccount(a) })
}

// AccountByID implements [store.Accounts].
func (s *Store) AccountByID(ctx context.Context, id int64) (store.Account, error) {
	return read(s, ctx, func(d *db) (store.Account, error) { return d.accountByID(id) })
}

// AccountByName implements [store.Accounts].
func (s *Store) AccountByName(ctx context.Context, name string) (store.Account, error) {
	return read(s, ctx, func(d *db) (store.Account, error) { return d.accountNamed(name) })
}

// SaveAPIKey implements [store.Accounts]. A new key of an unknown account is
// [store.ErrNotFound].
func (s *Store) SaveAPIKey(ctx context.Context, k store.APIKey) error {
	return write0(s, ctx, func(d *db) error { return d.saveAPIKey(k) })
}

// APIKeyByHash implements [store.Accounts].
func (s *Store) APIKeyByHash(ctx context.Context, hash []byte) (store.APIKey, store.Account, error) {
	r, err := read(s, ctx, func(d *db) (keyAndAccount, error) { return d.apiKeyByHash(hash) })
	return r.key, r.account, err
}

// APIKeys implements [store.Accounts].
func (s *Store) APIKeys(ctx context.Context, accountID int64) ([]store.APIKey, error) {
	return read(s, ctx, func(d *db) ([]store.APIKey, error) { return d.listAPIKeys(accountID) })
}

// DeleteAPIKey implements [store.Accounts].
func (s *Store) DeleteAPIKey(ctx context.Context, accountID int64, hash []byte) error {
	return write0(s, ctx, func(d *db) error { return d.deleteAPIKey(accountID, hash) })
}

// SaveDeployment implements [store.Accounts]. An unknown account is
// [store.ErrNotFound].
func (s *Store) SaveDeployment(ctx context.Context, dep store.Deployment) error {
	return write0(s, ctx, func(d *db) error { return d.saveDeployment(dep) })
}

// SaveAgent implements [store.Accounts]. An unknown account is
// [store.ErrNotFound].
func (s *Store) SaveAgent(ctx context.Context, a store.Agent) error {
	return write0(s, ctx, func(d *db) error { return d.saveAgent(a) })
}

// Agent implements [store.Accounts].
func (s *Store) Agent(ctx context.Context, accountID int64, id string) (store.Agent, error) {
	return read(s, ctx, func(d *db) (store.Agent, error) { return d.agent(accountID, id) })
}

func (t *txView) SaveAccount(ctx context.Context, a store.Account) (store.Account, error) {
	return call(t, ctx, func(d *db) (store.Account, error) { return d.saveAccount(a) })
}

func (t *txView) AccountByID(ctx context.Context, id int64) (store.Account, error) {
	return call(t, ctx, func(d *db) (store.Account, error) { return d.accountByID(id) })
}

func (t *txView) AccountByName(ctx context.Context, name string) (store.Account, error) {
	return call(t, ctx, func(d *db) (store.Account, error) { return d.accountNamed(name) })
}

func (t *txView) SaveAPIKey(ctx context.Context, k store.APIKey) error {
	return call0(t, ctx, func(d *db) error { return d.saveAPIKey(k) })
}

func (t *txView) APIKeyByHash(ctx context.Context, hash []byte) (store.APIKey, store.Account, error) {
	r, err := call(t, ctx, func(d *db) (keyAndAccount, error) { return d.apiKeyByHash(hash) })
	return r.key, r.account, err
}

func (t *txView) APIKeys(ctx context.Context, accountID int64) ([]store.APIKey, error) {
	return call(t, ctx, func(d *db) ([]store.APIKey, error) { return d.listAPIKeys(accountID) })
}

func (t *txView) DeleteAPIKey(ctx context.Context, accountID int64, hash []byte) error {
	return call0(t, ctx, func(d *db) error { return d.deleteAPIKey(accountID, hash) })
}

func (t *txView) SaveDeployment(ctx context.Context, dep store.Deployment) error {
	return call0(t, ctx, func(d *db) error { return d.saveDeployment(dep) })
}

func (t *txView) SaveAgent(ctx context.Context, a store.Agent) error {
	return call0(t, ctx, func(d *db) error { return d.saveAgent(a) })
}

func (t *txView) Agent(ctx context.Context, accountID int64, id string) (store.Agent, error) {
	return call(t, ctx, func(d *db) (store.Agent, error) { return d.agent(accountID, id) })
}
