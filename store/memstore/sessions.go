package memstore

import (
	"context"
	"time"

	"github.com/embedkit/embedkit/store"
)

// alive reports whether the user of a grant exists and is visible at now:
// sessions and tokens of an expired ephemeral user grant nothing.
func (d *db) alive(userID int64, now time.Time) bool {
	u, ok := d.users[userID]
	return ok && !expired(u, now)
}

func (d *db) createSession(hash []byte, s store.Session) error {
	const op = "create session"
	if _, ok := d.users[s.UserID]; !ok {
		return notFound(op + ": user")
	}
	if len(s.KeyHash) > 0 {
		if _, ok := d.apiKeys[string(s.KeyHash)]; !ok {
			return notFound(op + ": api key")
		}
	}
	key := string(hash)
	if _, ok := d.sessions[key]; ok {
		return conflict(op)
	}
	s.CreatedAt = d.now(s.CreatedAt)
	s.ExpiresAt = norm(s.ExpiresAt)
	set(d, d.sessions, key, session{grant: s})
	nset(d, d.userSess, s.UserID, key, struct{}{})
	return nil
}

func (d *db) exchangeSession(sessionHash, tokenHash []byte, tokenExpiresAt, now time.Time) (store.Session, error) {
	const op = "exchange session"
	now = d.now(now)
	key := string(sessionHash)
	sess, ok := d.sessions[key]
	if !ok || sess.used || !sess.grant.ExpiresAt.After(now) || !d.alive(sess.grant.UserID, now) {
		return store.Session{}, notFound(op)
	}
	tkey := string(tokenHash)
	if _, ok := d.tokens[tkey]; ok {
		return store.Session{}, conflict(op + ": token")
	}
	set(d, d.sessions, key, session{grant: sess.grant, used: true})
	g := sess.grant
	g.CreatedAt, g.ExpiresAt = now, norm(tokenExpiresAt)
	set(d, d.tokens, tkey, g)
	nset(d, d.userTokens, g.UserID, tkey, struct{}{})
	return g, nil
}

func (d *db) sessionByToken(tokenHash []byte, now time.Time) (store.Session, error) {
	now = d.now(now)
	g, ok := d.tokens[string(tokenHash)]
	if !ok || !g.ExpiresAt.After(now) || !d.alive(g.UserID, now) {
		return store.Session{}, notFound("session by token")
	}
	return g, nil
}

func (d *db) revokeUserSessions(userID int64) error {
	for _, k := range sortedKeys(d.userSess[userID]) {
		ndel(d, d.userSess, userID, k)
		del(d, d.sessions, k)
	}
	for _, k := range sortedKeys(d.userTokens[userID]) {
		ndel(d, d.userTokens, userID, k)
		del(d, d.tokens, k)
	}
	return nil
}

// CreateSession implements [store.Sessions]. An unknown user is
// [store.ErrNotFound], a hash already stored [store.ErrConflict]. A zero
// CreatedAt is set from the clock.
func (s *Store) CreateSession(ctx context.Context, hash []byte, sess store.Session) error {
	return write0(s, ctx, func(d *db) error { return d.createSession(hash, sess) })
}

// ExchangeSession implements [store.Sessions]. The token's CreatedAt is now;
// a token hash already stored is [store.ErrConflict] and leaves the session
// id unused.
func (s *Store) ExchangeSession(ctx context.Context, sessionHash, tokenHash []byte, tokenExpiresAt, now time.Time) (store.Session, error) {
	return write(s, ctx, func(d *db) (store.Session, error) {
		return d.exchangeSession(sessionHash, tokenHash, tokenExpiresAt, now)
	})
}

// SessionByToken implements [store.Sessions].
func (s *Store) SessionByToken(ctx context.Context, tokenHash []byte, now time.Time) (store.Session, error) {
	return read(s, ctx, func(d *db) (store.Session, error) { return d.sessionByToken(tokenHash, now) })
}

// RevokeUserSessions implements [store.Sessions].
func (s *Store) RevokeUserSessions(ctx context.Context, userID int64) error {
	return write0(s, ctx, func(d *db) error { return d.revokeUserSessions(userID) })
}

func (t *txView) CreateSession(ctx context.Context, hash []byte, sess store.Session) error {
	return call0(t, ctx, func(d *db) error { return d.createSession(hash, sess) })
}

func (t *txView) ExchangeSession(ctx context.Context, sessionHash, tokenHash []byte, tokenExpiresAt, now time.Time) (store.Session, error) {
	return call(t, ctx, func(d *db) (store.Session, error) {
		return d.exchangeSession(sessionHash, tokenHash, tokenExpiresAt, now)
	})
}

func (t *txView) SessionByToken(ctx context.Context, tokenHash []byte, now time.Time) (store.Session, error) {
	return call(t, ctx, func(d *db) (store.Session, error) { return d.sessionByToken(tokenHash, now) })
}

func (t *txView) RevokeUserSessions(ctx context.Context, userID int64) error {
	return call0(t, ctx, func(d *db) error { return d.revokeUserSessions(userID) })
}
