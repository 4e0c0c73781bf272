package middleware

import (
	"context"

	"github.com/embedkit/embedkit/store"
)

// ScopeStore is what [EmbedSession.AttributesAndGroups] reads. Every
// [store.Store] implements it.
type ScopeStore interface {
	// UserData returns the user's attribute values and groups within
	// scope s.
	UserData(ctx context.Context, userID int64, s store.Scope) (store.UserData, error)
}

// AttributesAndGroups returns the session user's attribute values and
// groups in the session's scope ([store.Session.Scope]: the embed tenant's
// for a creator-mode session, else the account-wide one), ordered by name.
// A host page that shows or filters by the user's attributes reads them
// here, so it applies the same rule as embedkit's handlers.
func (es EmbedSession) AttributesAndGroups(ctx context.Context, st ScopeStore) ([]store.UserAttribute, []store.Group, error) {
	d, err := st.UserData(ctx, es.User.ID, es.Session.Scope())
	if err != nil {
		return nil, nil, err
	}
	return d.Attributes, d.Groups, nil
}
