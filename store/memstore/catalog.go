package memstore

import (
	"context"
	"fmt"

	"github.com/embedkit/embedkit/store"
)

func (d *db) ensureEmbedTenant(accountID int64, name string, max int) (store.EmbedTenant, error) {
	const op = "ensure embed tenant"
	if id, ok := d.tenantByName[nameKey{accountID, name}]; ok {
		return d.tenants[id], nil
	}
	if err := d.needAccount(op, accountID); err != nil {
		return store.EmbedTenant{}, err
	}
	if max > 0 {
		n := 0
		for k := range d.tenantByName {
			if k.accountID == accountID {
				n++
			}
		}
		if n >= max {
			return store.EmbedTenant{}, fmt.Errorf("memstore: %s: %d embed tenants: %w", op, n, store.ErrLimit)
		}
	}
	d.lastTenantID++
	et := store.EmbedTenant{ID: d.lastTenantID, AccountID: accountID, Name: name, CreatedAt: d.now(zeroTime)}
	set(d, d.tenants, et.ID, et)
	set(d, d.tenantByName, nameKey{accountID, name}, et.ID)
	return et, nil
}

func (d *db) embedTenantByName(accountID int64, name string) (store.EmbedTenant, error) {
	id, ok := d.tenantByName[nameKey{accountID, name}]
	if !ok {
		return store.EmbedTenant{}, notFound("embed tenant")
	}
	return d.tenants[id], nil
}

func (d *db) upsertDefinitions(s store.Scope, groups []store.GroupDef, attrs []store.AttributeDef) error {
	if err := d.upsertGroups(s, groups); err != nil {
		return err
	}
	return d.upsertAttributes(s, attrs)
}

func (d *db) upsertGroups(s store.Scope, defs []store.GroupDef) error {
	const op = "upsert definitions"
	now := d.now(zeroTime)
	for _, def := range defs {
		desc := deref(def.Description)
		if id, ok := d.groupByName[scopeKey{s, def.Name}]; ok {
			// Descriptions are never cleared; UpdatedAt moves on a change.
			if g := d.groups[id]; desc != "" && desc != g.Description {
				g.Description, g.UpdatedAt = desc, now
				set(d, d.groups, id, g)
			}
			continue
		}
		if err := d.needAccount(op, s.AccountID); err != nil {
			return err
		}
		d.lastGroupID++
		g := store.Group{ID: d.lastGroupID, Scope: s, Name: def.Name, Description: desc, CreatedAt: now, UpdatedAt: now}
		set(d, d.groups, g.ID, g)
		set(d, d.groupByName, scopeKey{s, g.Name}, g.ID)
		appendID(d, d.groupIDs, s, g.ID)
	}
	return nil
}

func (d *db) upsertAttributes(s store.Scope, defs []store.AttributeDef) error {
	const op = "upsert definitions"
	now := d.now(zeroTime)
	for _, def := range defs {
		if id, ok := d.attributeByKey[scopeKey{s, def.Name}]; ok {
			// The type is never changed; nil fields keep the stored values.
			a := d.attributes[id]
			b := a
			if def.DisplayName != nil {
				b.DisplayName = *def.DisplayName
			}
			if def.DefaultValue != nil {
				b.DefaultValue = *def.DefaultValue
			}
			if def.Description != nil {
				b.Description = *def.Description
			}
			if b != a {
				b.UpdatedAt = now
				set(d, d.attributes, id, b)
			}
			continue
		}
		if err := d.needAccount(op, s.AccountID); err != nil {
			return err
		}
		d.lastAttributeID++
		a := store.Attribute{
			ID:           d.lastAttributeID,
			Scope:        s,
			Name:         def.Name,
			Type:         def.Type,
			DisplayName:  deref(def.DisplayName),
			DefaultValue: deref(def.DefaultValue),
			Description:  deref(def.Description),
			CreatedAt:    now,
			UpdatedAt:    now,
		}
		set(d, d.attributes, a.ID, a)
		set(d, d.attributeByKey, scopeKey{s, a.Name}, a.ID)
		appendID(d, d.attributeIDs, s, a.ID)
	}
	return nil
}

// groupsByName returns the groups of s named in names, each once.
func (d *db) groupsByName(s store.Scope, names []string) []store.Group {
	if len(names) == 0 {
		return nil
	}
	out := make([]store.Group, 0, len(names))
	seen := make(map[int64]bool, len(names))
	for _, n := range names {
		if id, ok := d.groupByName[scopeKey{s, n}]; ok && !seen[id] {
			seen[id] = true
			out = append(out, d.groups[id])
		}
	}
	return out
}

// attributesByName returns the attributes of s named in names, each once.
func (d *db) attributesByName(s store.Scope, names []string) []store.Attribute {
	if len(names) == 0 {
		return nil
	}
	out := make([]store.Attribute, 0, len(names))
	seen := make(map[int64]bool, len(names))
	for _, n := range names {
		if id, ok := d.attributeByKey[scopeKey{s, n}]; ok && !seen[id] {
			seen[id] = true
			out = append(out, d.attributes[id])
		}
	}
	return out
}

func (d *db) listGroups(s store.Scope, afterID int64, limit int) ([]store.Group, error) {
	if limit <= 0 {
		return nil, nil
	}
	ids := page(d.groupIDs[s], afterID, limit)
	out := make([]store.Group, len(ids))
	for i, id := range ids {
		out[i] = d.groups[id]
	}
	return out, nil
}

func (d *db) listAttributes(s store.Scope, afterID int64, limit int) ([]store.Attribute, error) {
	if limit <= 0 {
		return nil, nil
	}
	ids := page(d.attributeIDs[s], afterID, limit)
	out := make([]store.Attribute, len(ids))
	for i, id := range ids {
		out[i] = d.attributes[id]
	}
	return out, nil
}

func (d *db) deleteGroup(s store.Scope, id int64) error {
	g, ok := d.groups[id]
	if !ok || g.Scope != s {
		return notFound("delete group")
	}
	for _, uid := range sortedKeys(d.groupUsers[id]) {
		ndel(d, d.groupUsers, id, uid)
		ndel(d, d.members, uid, id)
	}
	del(d, d.groupByName, scopeKey{s, g.Name})
	removeID(d, d.groupIDs, s, id)
	del(d, d.groups, id)
	return nil
}

func (d *db) deleteAttribute(s store.Scope, id int64) error {
	a, ok := d.attributes[id]
	if !ok || a.Scope != s {
		return notFound("delete attribute")
	}
	for _, uid := range sortedKeys(d.valueUsers[id]) {
		ndel(d, d.valueUsers, id, uid)
		ndel(d, d.values, uid, id)
	}
	del(d, d.attributeByKey, scopeKey{s, a.Name})
	removeID(d, d.attributeIDs, s, id)
	del(d, d.attributes, id)
	return nil
}

// EnsureEmbedTenant implements [store.Catalog]. An unknown account is
// [store.ErrNotFound].
func (s *Store) EnsureEmbedTenant(ctx context.Context, accountID int64, name string, max int) (store.EmbedTenant, error) {
	// Most calls find the tenant: look under the read lock first.
	if et, err := s.EmbedTenantByName(ctx, accountID, name); err == nil {
		return et, nil
	}
	return write(s, ctx, func(d *db) (store.EmbedTenant, error) { return d.ensureEmbedTenant(accountID, name, max) })
}

// EmbedTenantByName implements [store.Catalog].
func (s *Store) EmbedTenantByName(ctx context.Context, accountID int64, name string) (store.EmbedTenant, error) {
	return read(s, ctx, func(d *db) (store.EmbedTenant, error) { return d.embedTenantByName(accountID, name) })
}

// ListGroups implements [store.Catalog]. A page costs O(log n + limit).
func (s *Store) ListGroups(ctx context.Context, sc store.Scope, afterID int64, limit int) ([]store.Group, error) {
	return read(s, ctx, func(d *db) ([]store.Group, error) { return d.listGroups(sc, afterID, limit) })
}

// ListAttributes implements [store.Catalog]. A page costs O(log n + limit).
func (s *Store) ListAttributes(ctx context.Context, sc store.Scope, afterID int64, limit int) ([]store.Attribute, error) {
	return read(s, ctx, func(d *db) ([]store.Attribute, error) { return d.listAttributes(sc, afterID, limit) })
}

// UpsertDefinitions implements [store.Catalog]. Creating a definition of
// an unknown account is [store.ErrNotFound] and creates none.
func (s *Store) UpsertDefinitions(ctx context.Context, sc store.Scope, groups []store.GroupDef, attrs []store.AttributeDef) error {
	return write0(s, ctx, func(d *db) error { return d.upsertDefinitions(sc, groups, attrs) })
}

// DeleteGroup implements [store.Catalog].
func (s *Store) DeleteGroup(ctx context.Context, sc store.Scope, id int64) error {
	return write0(s, ctx, func(d *db) error { return d.deleteGroup(sc, id) })
}

// DeleteAttribute implements [store.Catalog].
func (s *Store) DeleteAttribute(ctx context.Context, sc store.Scope, id int64) error {
	return write0(s, ctx, func(d *db) error { return d.deleteAttribute(sc, id) })
}

func (t *txView) EnsureEmbedTenant(ctx context.Context, accountID int64, name string, max int) (store.EmbedTenant, error) {
	return call(t, ctx, func(d *db) (store.EmbedTenant, error) { return d.ensureEmbedTenant(accountID, name, max) })
}

func (t *txView) EmbedTenantByName(ctx context.Context, accountID int64, name string) (store.EmbedTenant, error) {
	return call(t, ctx, func(d *db) (store.EmbedTenant, error) { return d.embedTenantByName(accountID, name) })
}

func (t *txView) UpsertDefinitions(ctx context.Context, sc store.Scope, groups []store.GroupDef, attrs []store.AttributeDef) error {
	return call0(t, ctx, func(d *db) error { return d.upsertDefinitions(sc, groups, attrs) })
}

func (t *txView) ListGroups(ctx context.Context, sc store.Scope, afterID int64, limit int) ([]store.Group, error) {
	return call(t, ctx, func(d *db) ([]store.Group, error) { return d.listGroups(sc, afterID, limit) })
}

func (t *txView) ListAttributes(ctx context.Context, sc store.Scope, afterID int64, limit int) ([]store.Attribute, error) {
	return call(t, ctx, func(d *db) ([]store.Attribute, error) { return d.listAttributes(sc, afterID, limit) })
}

func (t *txView) DeleteGroup(ctx context.Context, sc store.Scope, id int64) error {
	return call0(t, ctx, func(d *db) error { return d.deleteGroup(sc, id) })
}

func (t *txView) DeleteAttribute(ctx context.Context, sc store.Scope, id int64) error {
	return call0(t, ctx, func(d *db) error { return d.deleteAttribute(sc, id) })
}
