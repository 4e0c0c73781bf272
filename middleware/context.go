package middleware

import (
	"context"

	"github.com/embedkit/embedkit/store"
)

type accountKey struct{}

type accountValue struct {
	acct  store.Account
	admin bool
}

// WithAccount returns a copy of ctx carrying the authenticated account and
// whether its credential is an admin API key.
func WithAccount(ctx context.Context, acct store.Account, admin bool) context.Context {
	return context.WithValue(ctx, accountKey{}, accountValue{acct, admin})
}

// AccountFromContext returns the account put in ctx by [WithAccount] (the
// [APIKey] and [APIKeyOrToken] middleware call it; behind [Session], a
// page reads its session with [EmbedSessionFromContext], whose Session
// names the account). ok is false when the request is not authenticated.
func AccountFromContext(ctx context.Context) (acct store.Account, admin bool, ok bool) {
	v, ok := ctx.Value(accountKey{}).(accountValue)
	return v.acct, v.admin, ok
}

type keyHashKey struct{}

// withKeyHash returns a copy of ctx recording the hash of the API key the
// request authenticated with.
func withKeyHash(ctx context.Context, hash []byte) context.Context {
	return context.WithValue(ctx, keyHashKey{}, hash)
}

// APIKeyHashFromContext returns the SHA-256 hash of the API key that
// authenticated the request through [APIKey] or [APIKeyOrToken], or nil when
// none did (a token, or an account a host put in the context with
// [WithAccount]). Generate-session records it on the session ids it mints,
// so that revoking the key ends them and their tokens.
func APIKeyHashFromContext(ctx context.Context) []byte {
	h, _ := ctx.Value(keyHashKey{}).([]byte)
	return h
}

// EmbedSession is the end user's grant of an embed request: the session (or
// token) it presented and the user it belongs to.
type EmbedSession struct {
	// Session is the grant: account, user, deployment, embed tenant,
	// creator mode; ExpiresAt is the token's expiry.
	Session store.Session
	// User is the session's user, loaded for this request.
	User store.User
	// Token is the raw token, set only when this request exchanged a
	// ?sessionId= for it, so that a page can hand it to its scripts (which
	// then send Authorization: Bearer <token>). Empty otherwise. It is a
	// credential: never log it.
	Token string
}

type embedSessionKey struct{}

// WithEmbedSession returns a copy of ctx carrying s.
func WithEmbedSession(ctx context.Context, s EmbedSession) context.Context {
	return context.WithValue(ctx, embedSessionKey{}, s)
}

// EmbedSessionFromContext returns the embed session put in ctx by
// [WithEmbedSession] (the [Session] and [APIKeyOrToken] middleware call it).
func EmbedSessionFromContext(ctx context.Context) (EmbedSession, bool) {
	s, ok := ctx.Value(embedSessionKey{}).(EmbedSession)
	return s, ok
}
