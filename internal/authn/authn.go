// Package authn holds the credential logic shared by the middleware and the
// token-exchange endpoint: parsing the Authorization header, resolving an API
// key to its account, exchanging a single-use sessionId for a token, and
// resolving a token to its session. Keeping it in one place makes the
// middleware and POST /api/v1/embed/session/token follow the same rules.
package authn

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/embedkit/embedkit/internal/secret"
	"github.com/embedkit/embedkit/internal/wire"
	"github.com/embedkit/embedkit/store"
)

// Schemes of the Authorization header.
const (
	SchemeAPIKey = "Api-Key"
	SchemeBearer = "Bearer"
)

// KeyStore is what API key resolution reads: the key and its account
// together, so that authenticating a request is one store call.
type KeyStore interface {
	APIKeyByHash(ctx context.Context, hash []byte) (store.APIKey, store.Account, error)
}

// SessionStore is what sessionId exchange and token resolution use.
type SessionStore interface {
	ExchangeSession(ctx context.Context, sessionHash, tokenHash []byte, tokenExpiresAt, now time.Time) (store.Session, error)
	SessionByToken(ctx context.Context, tokenHash []byte, now time.Time) (store.Session, error)
}

// Authorization splits the Authorization header of r into its scheme and
// credentials. ok is false when the header is absent. The scheme comparison
// of callers is case-insensitive (RFC 9110 §11.1).
func Authorization(r *http.Request) (scheme, cred string, ok bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", "", false
	}
	scheme, cred, _ = strings.Cut(strings.TrimSpace(h), " ")
	return scheme, strings.TrimSpace(cred), true
}

// Errors of this package: generic, never echoing a credential.
var (
	ErrMissingAPIKey = &wire.Error{Status: http.StatusUnauthorized, Message: "missing API key: send Authorization: Api-Key <key>"}
	ErrInvalidAPIKey = &wire.Error{Status: http.StatusUnauthorized, Message: "invalid API key"}
	ErrInvalidToken  = &wire.Error{Status: http.StatusUnauthorized, Message: "invalid or expired token"}
	ErrInvalidSessID = &wire.Error{Status: http.StatusUnauthorized, Message: "invalid, expired or already used sessionId"}
)

// APIKey resolves a raw API key to its account and admin flag. An unknown
// key is [ErrInvalidAPIKey]; store failures are returned as they are
// (ErrUnavailable maps to 503).
func APIKey(ctx context.Context, st KeyStore, key string) (store.Account, bool, error) {
	if key == "" {
		return store.Account{}, false, ErrInvalidAPIKey
	}
	h := secret.Hash(key)
	k, acct, err := st.APIKeyByHash(ctx, h)
	if errors.Is(err, store.ErrNotFound) {
		return store.Account{}, false, ErrInvalidAPIKey
	}
	if err != nil {
		return store.Account{}, false, err
	}
	if !secret.Equal(k.Hash, h) {
		return store.Account{}, false, ErrInvalidAPIKey
	}
	return acct, k.Admin, nil
}

// Exchange marks the single-use sessionId as used and returns a new token
// valid for ttl from now, with the session it grants (ExpiresAt is the
// token's expiry). An unknown, used, revoked or expired sessionId is
// [ErrInvalidSessID].
func Exchange(ctx context.Context, st SessionStore, sessionID string, ttl time.Duration, now time.Time) (secret.Secret, store.Session, error) {
	if sessionID == "" || len(sessionID) > 512 {
		return "", store.Session{}, ErrInvalidSessID
	}
	tok := secret.New()
	s, err := st.ExchangeSession(ctx, secret.Hash(sessionID), secret.Hash(tok.Reveal()), now.Add(ttl), now)
	if errors.Is(err, store.ErrNotFound) {
		return "", store.Session{}, ErrInvalidSessID
	}
	if err != nil {
		return "", store.Session{}, err
	}
	return tok, s, nil
}

// Token resolves a token to its session. An unknown, revoked or expired
// token is [ErrInvalidToken].
func Token(ctx context.Context, st SessionStore, token string, now time.Time) (store.Session, error) {
	if token == "" || len(token) > 512 {
		return store.Session{}, ErrInvalidToken
	}
	s, err := st.SessionByToken(ctx, secret.Hash(token), now)
	if errors.Is(err, store.ErrNotFound) {
		return store.Session{}, ErrInvalidToken
	}
	if err != nil {
		return store.Session{}, err
	}
	return s, nil
}
