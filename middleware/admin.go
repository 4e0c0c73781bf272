package middleware

import (
	"net/http"

	"github.com/embedkit/embedkit/internal/authn"
	"github.com/embedkit/embedkit/internal/wire"
)

var errNotAdmin = wire.Errorf(http.StatusForbidden, "this endpoint requires an admin API key")

// RequireAdmin lets a request through only when an [APIKey] middleware in
// front of it authenticated an admin key: 403 for other keys, 401 when the
// request is not authenticated at all.
func RequireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, admin, ok := AccountFromContext(r.Context())
		switch {
		case !ok:
			wire.WriteError(w, r, nil, authn.ErrMissingAPIKey)
		case !admin:
			wire.WriteError(w, r, nil, errNotAdmin)
		default:
			next.ServeHTTP(w, r)
		}
	})
}
