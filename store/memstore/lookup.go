package memstore

import (
	"context"

	"github.com/embedkit/embedkit/store"
)

// Lookup implements [store.Catalog]. It runs under the read lock.
func (s *Store) Lookup(ctx context.Context, l store.Lookup) (store.LookupResult, error) {
	return read(s, ctx, func(d *db) (store.LookupResult, error) { return d.lookup(l) })
}

func (t *txView) Lookup(ctx context.Context, l store.Lookup) (store.LookupResult, error) {
	return call(t, ctx, func(d *db) (store.LookupResult, error) { return d.lookup(l) })
}

func (d *db) lookup(l store.Lookup) (store.LookupResult, error) {
	var r store.LookupResult
	if l.DeploymentID != 0 {
		r.Deployment, r.DeploymentFound = d.deployments[depKey{l.Scope.AccountID, l.DeploymentID}]
	}
	scope := l.Scope
	if l.EmbedTenantName != "" {
		et, err := d.embedTenantByName(l.Scope.AccountID, l.EmbedTenantName)
		r.EmbedTenant, r.EmbedTenantFound = et, err == nil
		if l.InEmbedTenant {
			if !r.EmbedTenantFound {
				return r, nil
			}
			scope = store.Scope{AccountID: l.Scope.AccountID, EmbedTenantID: et.ID}
		}
	}
	r.Attributes = d.attributesByName(scope, l.AttrNames)
	r.Groups = d.groupsByName(scope, l.GroupNames)
	return r, nil
}
