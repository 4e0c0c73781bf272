package middleware

import (
	"context"

	"github.com/embedkit/embedkit/store"
)

// ScopeStore is what [EmbedSession.AttributesAndGroups] reads. Every
// [store.Store] implements it.
type ScopeStore interface {
	// AttributeValues returns the user's values of attributes of scope s.
	AttributeValues(ctx context.Context, userID int64, s store.Scope) ([]store.UserAttribute, error)
	// Memberships returns the user's groups within scope s.
	Memberships(ctx context.Context, userID int64, s store.Scope) ([]store.Group, error)
}

// AttributesAndGroups returns the session user's attribute values and
// groups in the session's scope ([store.Session.Scope]: the embed tenant's
// for a creator-mode session, else the account-wide one), ordered by name.
// A host page that shows or filters by the user's attributes reads them
// here, so it applies the same rule as embedkit's handlers.
func (es EmbedSession) AttributesAndGroups(ctx context.Context, st ScopeStore) ([]store.UserAttribute, []store.Group, error) {
	scope := es.Session.Scope()
	attrs, err := st.AttributeValues(ctx, es.User.ID, scope)
	if err != nil {
		return nil, nil, err
	}
	groups, err := st.Memberships(ctx, es.User.ID, scope)
	if err != nil {
		return nil, nil, err
	}
	return attrs, groups, nil
}
