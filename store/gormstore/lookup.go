package gormstore

import (
	"context"
	"slices"

	"github.com/embedkit/embedkit/store"
)

// Lookup implements [store.Provisioning] in at most three statements: the
// returning user's update, the attributes, the groups. Unless pipelined
// (where the three travel together anyway), the attributes and the groups
// are read by one statement: each statement costs a pass through GORM's
// callback chain, which under generate-session load on SQLite costs more
// than the query.
func (t *txn) Lookup(ctx context.Context, l store.Lookup) (store.LookupResult, error) {
	const op = "lookup"
	var (
		user  userRow
		attrs attributeRows
		grps  groupRows
		both  catalogRows
		qs    = make([]query, 0, 3)
	)
	if u := l.ReturningUser; u != nil {
		q, args := returningUpdate(*u, nowOr(u.Now).UnixNano())
		qs = append(qs, query{&user, q, args})
	}
	s := l.Scope
	switch {
	case !t.pg() && len(l.AttrNames) > 0 && len(l.GroupNames) > 0:
		// Joined, each name once (IN would ignore a repeated one).
		attrNames, groupNames := distinct(l.AttrNames), distinct(l.GroupNames)
		both = make(catalogRows, 0, len(attrNames)+len(groupNames))
		qs = append(qs, query{&both, catalogByNameLite,
			[]any{liteList(attrNames), s.AccountID, s.EmbedTenantID, liteList(groupNames), s.AccountID, s.EmbedTenantID}})
	case t.pipe == nil && len(l.AttrNames) > 0 && len(l.GroupNames) > 0:
		both = make(catalogRows, 0, len(l.AttrNames)+len(l.GroupNames))
		qs = append(qs, query{&both, catalogByNameSQL,
			[]any{s.AccountID, s.EmbedTenantID, l.AttrNames, s.AccountID, s.EmbedTenantID, l.GroupNames}})
	default:
		if len(l.AttrNames) > 0 {
			qs = append(qs, query{&attrs, attributesByNameSQL, []any{s.AccountID, s.EmbedTenantID, l.AttrNames}})
		}
		if len(l.GroupNames) > 0 {
			qs = append(qs, query{&grps, groupsByNameSQL, []any{s.AccountID, s.EmbedTenantID, l.GroupNames}})
		}
	}
	if len(qs) == 0 {
		return store.LookupResult{}, nil
	}
	counts, err := t.findAll(ctx, op, qs...)
	if err != nil {
		return store.LookupResult{}, err
	}
	if len(both) > 0 {
		attrs, grps = both.split()
	}
	res := store.LookupResult{Attributes: attributes(attrs), Groups: groups(grps)}
	if u := l.ReturningUser; u != nil {
		if counts[0] > 0 {
			res.User, res.UserUpdated = user.user(), true
		}
	}
	return res, nil
}

// Lookup implements [store.Provisioning]. With a ReturningUser it runs in a
// transaction of its own.
func (s *Store) Lookup(ctx context.Context, l store.Lookup) (store.LookupResult, error) {
	if l.ReturningUser == nil {
		return read(ctx, s, func(t *txn) (store.LookupResult, error) { return t.Lookup(ctx, l) })
	}
	return write(ctx, s, func(t *txn) (store.LookupResult, error) { return t.Lookup(ctx, l) })
}

// distinct returns names without repeats, in their first order (names
// itself when it has none).
func distinct(names []string) []string {
	for i := 1; i < len(names); i++ {
		if slices.Contains(names[:i], names[i]) {
			out := slices.Clone(names[:i])
			for _, n := range names[i+1:] {
				if !slices.Contains(out, n) {
					out = append(out, n)
				}
			}
			return out
		}
	}
	return names
}
