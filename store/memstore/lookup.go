package memstore

import (
	"context"

	"github.com/embedkit/embedkit/store"
)

// Lookup implements [store.Provisioning].
func (s *Store) Lookup(ctx context.Context, l store.Lookup) (store.LookupResult, error) {
	if l.ReturningUser == nil {
		return read(s, ctx, func(d *db) (store.LookupResult, error) { return d.lookup(l) })
	}
	return write(s, ctx, func(d *db) (store.LookupResult, error) { return d.lookup(l) })
}

func (t *txView) Lookup(ctx context.Context, l store.Lookup) (store.LookupResult, error) {
	return call(t, ctx, func(d *db) (store.LookupResult, error) { return d.lookup(l) })
}

func (d *db) lookup(l store.Lookup) (store.LookupResult, error) {
	var (
		r   store.LookupResult
		err error
	)
	if r.Attributes, err = d.attributesByName(l.Scope, l.AttrNames); err != nil {
		return store.LookupResult{}, err
	}
	if r.Groups, err = d.groupsByName(l.Scope, l.GroupNames); err != nil {
		return store.LookupResult{}, err
	}
	u := l.ReturningUser
	if u == nil {
		return r, nil
	}
	id, ok := d.userByExt[nameKey{u.AccountID, u.ExternalID}]
	if !ok {
		return r, nil
	}
	old := d.users[id]
	if expired(old, d.now(u.Now)) || (u.Persistent && old.Ephemeral) {
		return r, nil
	}
	if r.User, err = d.updateExternalUser(old, *u, d.now(u.Now)); err != nil {
		return store.LookupResult{}, err
	}
	r.UserUpdated = true
	return r, nil
}
