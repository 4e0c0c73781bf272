package store

import (
	"context"
	"time"
)

// Session is what a sessionId or a token grants: a user, a deployment and an
// embed scope. The store keys sessions and tokens by the SHA-256 hash of the
// secret; the secret itself is never stored.
type Session struct {
	AccountID       int64
	UserID          int64
	DeploymentID    int64
	EmbedTenantID   int64
	EmbedTenantName string
	CreatorMode     bool
	CreatedAt       time.Time
	ExpiresAt       time.Time
	// KeyHash is the hash of the API key that minted the session id (nil
	// when none did); its token carries it too. Deleting that key
	// ([Accounts.DeleteAPIKey]) ends both.
	KeyHash []byte
}

// Scope returns the catalog scope whose attribute values and groups apply
// to the session's user: the embed tenant's for a creator-mode session with
// an embed tenant, else the account-wide one. Row security and pages that
// show the user's attributes read this scope, and only this one.
func (s Session) Scope() Scope {
	sc := TenantWide(s.AccountID)
	if s.CreatorMode {
		sc.EmbedTenantID = s.EmbedTenantID
	}
	return sc
}

// Sessions reads and writes single-use session ids and the tokens they are
// exchanged for.
type Sessions interface {
	// CreateSession stores a new unused session id by its hash. A
	// s.KeyHash that names no stored key (one deleted meanwhile) is
	// [ErrNotFound], and nothing is stored.
	CreateSession(ctx context.Context, hash []byte, s Session) error
	// ExchangeSession marks the session id with hash sessionHash as used and
	// stores a token (tokenHash) carrying the same grant, expiring at
	// tokenExpiresAt. It returns the grant with ExpiresAt set to the token's
	// expiry. A session that is unknown, used, revoked or expired at now is
	// [ErrNotFound]; of concurrent exchanges of one session id exactly one
	// succeeds.
	ExchangeSession(ctx context.Context, sessionHash, tokenHash []byte, tokenExpiresAt, now time.Time) (Session, error)
	// SessionByToken returns the grant of a token, or [ErrNotFound] when the
	// token is unknown, revoked or expired at now.
	SessionByToken(ctx context.Context, tokenHash []byte, now time.Time) (Session, error)
	// RevokeUserSessions deletes every session id and token of a user.
	RevokeUserSessions(ctx context.Context, userID int64) error
}
