package gormstore

import (
	"context"
	"time"

	"github.com/embedkit/embedkit/store"
)

// userAlive is the predicate of a grant whose user exists and has not
// expired at the bound time (sessions of an expired ephemeral user are dead).
const userAlive = "EXISTS (SELECT 1 FROM embedkit_users u WHERE u.id = user_id AND (NOT u.ephemeral OR u.expires_at IS NULL OR u.expires_at > ?))"

func (t *txn) CreateSession(ctx context.Context, hash []byte, s store.Session) error {
	created := nowOr(s.CreatedAt)
	return t.run(ctx, "create session",
		"INSERT INTO embedkit_sessions (hash, "+grantCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
		hash, s.AccountID, s.UserID, s.DeploymentID, s.EmbedTenantID, s.EmbedTenantName, s.CreatorMode,
		created.UnixNano(), s.ExpiresAt.UnixNano(), keyHash(s.KeyHash))
}

func (t *txn) ExchangeSession(ctx context.Context, sessionHash, tokenHash []byte, tokenExpiresAt, now time.Time) (store.Session, error) {
	const op = "exchange session"
	n0 := nowOr(now).UnixNano()
	// The conditional update is the single-use check: of concurrent
	// exchanges exactly one sees used_at NULL (PostgreSQL re-checks it on
	// the locked row, SQLite serializes writers).
	mark := "UPDATE embedkit_sessions SET used_at = ? WHERE hash = ? AND used_at IS NULL AND expires_at > ? AND " + userAlive +
		" RETURNING " + grantCols
	var g grantRow
	if t.pg() {
		// One round trip: the token is inserted from the marked row.
		n, err := t.find(ctx, op, &g,
			"WITH s AS ("+mark+") INSERT INTO embedkit_tokens (hash, "+grantCols+`)
			SELECT ?, account_id, user_id, deployment_id, embed_tenant_id, embed_tenant_name, creator_mode, ?, ?, key_hash FROM s
			RETURNING `+grantCols,
			n0, sessionHash, n0, n0, tokenHash, n0, tokenExpiresAt.UnixNano())
		if err != nil {
			return store.Session{}, err
		}
		if n == 0 {
			return store.Session{}, newErr(op, store.ErrNotFound)
		}
		return g.session(), nil
	}
	n, err := t.find(ctx, op, &g, mark, n0, sessionHash, n0, n0)
	if err != nil {
		return store.Session{}, err
	}
	if n == 0 {
		return store.Session{}, newErr(op, store.ErrNotFound)
	}
	g.CreatedAt = n0
	g.ExpiresAt = tokenExpiresAt.UnixNano()
	if _, err := t.exec(ctx, op,
		"INSERT INTO embedkit_tokens (hash, "+grantCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
		tokenHash, g.AccountID, g.UserID, g.DeploymentID, g.EmbedTenantID, g.EmbedTenantName, g.CreatorMode,
		g.CreatedAt, g.ExpiresAt, keyHash(g.KeyHash)); err != nil {
		return store.Session{}, err
	}
	return g.session(), nil
}

func (t *txn) SessionByToken(ctx context.Context, tokenHash []byte, now time.Time) (store.Session, error) {
	n0 := nowOr(now).UnixNano()
	var g grantRow
	n, err := t.find(ctx, "session by token", &g,
		"SELECT "+grantCols+" FROM embedkit_tokens WHERE hash = ? AND expires_at > ? AND "+userAlive,
		tokenHash, n0, n0)
	if err != nil {
		return store.Session{}, err
	}
	if n == 0 {
		return store.Session{}, newErr("session by token", store.ErrNotFound)
	}
	return g.session(), nil
}

func (t *txn) RevokeUserSessions(ctx context.Context, userID int64) error {
	if _, err := t.exec(ctx, "revoke sessions", "DELETE FROM embedkit_sessions WHERE user_id = ?", userID); err != nil {
		return err
	}
	_, err := t.exec(ctx, "revoke sessions", "DELETE FROM embedkit_tokens WHERE user_id = ?", userID)
	return err
}

// CreateSession implements [store.Sessions] in its own transaction.
func (s *Store) CreateSession(ctx context.Context, hash []byte, sess store.Session) error {
	return write0(ctx, s, func(t *txn) error { return t.CreateSession(ctx, hash, sess) })
}

// ExchangeSession implements [store.Sessions]: the single-use mark and the
// token insert commit together in one transaction.
func (s *Store) ExchangeSession(ctx context.Context, sessionHash, tokenHash []byte, tokenExpiresAt, now time.Time) (store.Session, error) {
	return write(ctx, s, func(t *txn) (store.Session, error) {
		return t.ExchangeSession(ctx, sessionHash, tokenHash, tokenExpiresAt, now)
	})
}

// SessionByToken implements [store.Sessions].
func (s *Store) SessionByToken(ctx context.Context, tokenHash []byte, now time.Time) (store.Session, error) {
	return readPrimary(ctx, s, func(t *txn) (store.Session, error) { return t.SessionByToken(ctx, tokenHash, now) })
}

// RevokeUserSessions implements [store.Sessions] in its own transaction.
func (s *Store) RevokeUserSessions(ctx context.Context, userID int64) error {
	return write0(ctx, s, func(t *txn) error { return t.RevokeUserSessions(ctx, userID) })
}

// keyHash is the key_hash parameter: NULL for a grant no key minted (a
// foreign key to embedkit_api_keys, which an empty hash would violate).
func keyHash(h []byte) any {
	if len(h) == 0 {
		return nil
	}
	return h
}
