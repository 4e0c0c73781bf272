package gormstore

import (
	"context"

	"gorm.io/gorm"

	"github.com/embedkit/embedkit/store"
)

// API keys: hash, account, admin flag, origin (who manages the key), a
// label and the creation time (the model APIKey). The origin, name and
// created_at columns are added to older databases by migration version 2
// (addAPIKeyColumns).

// addAPIKeyColumns is version 2: the columns origin, name and created_at of
// api_keys. Keys stored before the origin existed were created by the
// bootstrap configuration, the one documented way then, so they default to
// "config": a configuration that no longer lists them removes them. A
// database created at version 1 by this release has the columns already
// (version 1 creates the current models).
func addAPIKeyColumns(tx *gorm.DB) error {
	m := tx.Migrator()
	for _, field := range []string{"Origin", "Name", "CreatedAt"} {
		if m.HasColumn(&APIKey{}, field) {
			continue
		}
		if err := m.AddColumn(&APIKey{}, field); err != nil {
			return err
		}
	}
	return nil
}

const apiKeyCols = "hash, account_id, admin, origin, name, created_at"

type apiKeyRow struct {
	Hash      []byte
	AccountID int64
	Admin     bool
	Origin    string
	Name      string
	CreatedAt int64
}

func (r *apiKeyRow) dest() []any {
	return []any{&r.Hash, &r.AccountID, &r.Admin, &r.Origin, &r.Name, &r.CreatedAt}
}

func (r *apiKeyRow) key() store.APIKey {
	k := store.APIKey{Hash: r.Hash, AccountID: r.AccountID, Admin: r.Admin, Origin: store.KeyOrigin(r.Origin), Name: r.Name}
	if r.CreatedAt != 0 {
		k.CreatedAt = fromNanos(r.CreatedAt)
	}
	return k
}

type apiKeyRows []apiKeyRow

func (r *apiKeyRows) add() []any {
	*r = append(*r, apiKeyRow{})
	return (&(*r)[len(*r)-1]).dest()
}

func (t *txn) SaveAPIKey(ctx context.Context, k store.APIKey) error {
	const op = "save api key"
	origin := k.Origin
	if origin == "" {
		origin = store.OriginAPI
	}
	var created int64
	if !k.CreatedAt.IsZero() {
		created = k.CreatedAt.UnixNano()
	}
	n, err := t.exec(ctx, op,
		`INSERT INTO embedkit_api_keys (`+apiKeyCols+`) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (hash) DO UPDATE SET admin = excluded.admin, origin = excluded.origin, name = excluded.name
		WHERE embedkit_api_keys.account_id = excluded.account_id`,
		k.Hash, k.AccountID, k.Admin, string(origin), k.Name, created)
	if err != nil {
		return err
	}
	if n == 0 {
		return t.fail(newErr(op, store.ErrConflict)) // the key belongs to another account
	}
	return nil
}

func (t *txn) APIKeyByHash(ctx context.Context, hash []byte) (store.APIKey, error) {
	var row apiKeyRow
	n, err := t.find(ctx, "api key", &row, "SELECT "+apiKeyCols+" FROM embedkit_api_keys WHERE hash = ?", hash)
	if err != nil {
		return store.APIKey{}, err
	}
	if n == 0 {
		return store.APIKey{}, newErr("api key", store.ErrNotFound)
	}
	return row.key(), nil
}

func (t *txn) APIKeys(ctx context.Context, accountID int64) ([]store.APIKey, error) {
	var rows apiKeyRows
	if _, err := t.find(ctx, "api keys", &rows,
		"SELECT "+apiKeyCols+" FROM embedkit_api_keys WHERE account_id = ? ORDER BY created_at, hash", accountID); err != nil {
		return nil, err
	}
	out := make([]store.APIKey, len(rows))
	for i := range rows {
		out[i] = rows[i].key()
	}
	return out, nil
}

func (t *txn) DeleteAPIKey(ctx context.Context, accountID int64, hash []byte) error {
	const op = "delete api key"
	n, err := t.exec(ctx, op, "DELETE FROM embedkit_api_keys WHERE hash = ? AND account_id = ?", hash, accountID)
	if err != nil {
		return err
	}
	if n == 0 {
		return newErr(op, store.ErrNotFound)
	}
	return nil
}

// SaveAPIKey implements [store.Accounts].
func (s *Store) SaveAPIKey(ctx context.Context, k store.APIKey) error {
	return write0(ctx, s, func(t *txn) error { return t.SaveAPIKey(ctx, k) })
}

// APIKeyByHash implements [store.Accounts].
func (s *Store) APIKeyByHash(ctx context.Context, hash []byte) (store.APIKey, error) {
	return readPrimary(ctx, s, func(t *txn) (store.APIKey, error) { return t.APIKeyByHash(ctx, hash) })
}

// APIKeys implements [store.Accounts].
func (s *Store) APIKeys(ctx context.Context, accountID int64) ([]store.APIKey, error) {
	return read(ctx, s, func(t *txn) ([]store.APIKey, error) { return t.APIKeys(ctx, accountID) })
}

// DeleteAPIKey implements [store.Accounts].
func (s *Store) DeleteAPIKey(ctx context.Context, accountID int64, hash []byte) error {
	return write0(ctx, s, func(t *txn) error { return t.DeleteAPIKey(ctx, accountID, hash) })
}
