package middleware

import (
	"context"
	"net/http"
	"strings"

	"github.com/embedkit/embedkit/internal/authn"
	"github.com/embedkit/embedkit/internal/keyrevoke"
	"github.com/embedkit/embedkit/internal/nilarg"
	"github.com/embedkit/embedkit/internal/secret"
	"github.com/embedkit/embedkit/internal/wire"
	"github.com/embedkit/embedkit/store"
)

// APIKeyStore is what [APIKey] reads: the key by its hash with its account,
// in one call. Every [store.Store] implements it.
type APIKeyStore interface {
	// APIKeyByHash returns [store.ErrNotFound] for an unknown hash.
	APIKeyByHash(ctx context.Context, hash []byte) (store.APIKey, store.Account, error)
}

// APIKey authenticates requests carrying Authorization: Api-Key <key>: it
// hashes the key, looks it up with its account, compares the hashes in
// constant time and puts the account in the context ([AccountFromContext]). A missing or
// invalid key is 401, a store that cannot be reached 503; the key is never
// echoed or logged. With [Optional], a request without an Authorization
// header passes through unauthenticated.
//
// Options: [Optional], [WithKeyCache], [WithKeyCacheSize], [WithClock],
// [WithLogger]. A nil st (or a nil pointer in it) panics here rather than in
// every request.
func APIKey(st APIKeyStore, opts ...APIKeyOption) func(http.Handler) http.Handler {
	nilarg.Check("middleware: APIKey", "store", st)
	o := apiKeyOptions(opts)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			scheme, key, ok := authn.Authorization(r)
			if !ok {
				if o.optional {
					next.ServeHTTP(w, r)
					return
				}
				wire.WriteError(w, r, o.log, authn.ErrMissingAPIKey)
				return
			}
			if !strings.EqualFold(scheme, authn.SchemeAPIKey) {
				wire.WriteError(w, r, o.log, authn.ErrMissingAPIKey)
				return
			}
			acct, admin, err := o.resolveKey(r.Context(), st, key)
			if err != nil {
				wire.WriteError(w, r, o.log, err)
				return
			}
			ctx := withKeyHash(WithAccount(r.Context(), acct, admin), secret.Hash(key))
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

type cachedKey struct {
	acct  store.Account
	admin bool
	gen   uint64 // keyrevoke generation read before the lookup
}

// resolveKey resolves key through the cache when one is configured.
func (o *options) resolveKey(ctx context.Context, st APIKeyStore, key string) (store.Account, bool, error) {
	if o.keyCacheTTL <= 0 {
		return authn.APIKey(ctx, st, key)
	}
	h := string(secret.Hash(key))
	now := o.now()
	if c, ok := o.keys.Get(h, now); ok {
		// A key revoked by this process is refused at once.
		if keyrevoke.Valid(h, c.gen) {
			return c.acct, c.admin, nil
		}
	}
	gen := keyrevoke.Gen()
	acct, admin, err := authn.APIKey(ctx, st, key)
	if err == nil {
		o.keys.Add(h, cachedKey{acct, admin, gen}, now.Add(o.keyCacheTTL))
	}
	return acct, admin, err
}
