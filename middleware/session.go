package middleware

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/embedkit/embedkit/internal/authn"
	"github.com/embedkit/embedkit/internal/nilarg"
	"github.com/embedkit/embedkit/internal/secret"
	"github.com/embedkit/embedkit/internal/wire"
	"github.com/embedkit/embedkit/store"
)

// SessionStore is what [Session] uses: sessionId exchange, token
// resolution and the user lookup. Every [store.Store] implements it.
type SessionStore interface {
	// ExchangeSession marks a sessionId used and stores a token; see
	// [store.Sessions].
	ExchangeSession(ctx context.Context, sessionHash, tokenHash []byte, tokenExpiresAt, now time.Time) (store.Session, error)
	// SessionByToken returns [store.ErrNotFound] for an unknown, revoked or
	// expired token.
	SessionByToken(ctx context.Context, tokenHash []byte, now time.Time) (store.Session, error)
	// UserByID returns [store.ErrNotFound] for a missing or expired user.
	UserByID(ctx context.Context, id int64, now time.Time) (store.User, error)
}

// AuthStore is what [APIKeyOrToken] uses. Every [store.Store] implements it.
type AuthStore interface {
	APIKeyStore
	SessionStore
	// AccountByID returns the account of a token's session;
	// [store.ErrNotFound] when missing.
	AccountByID(ctx context.Context, id int64) (store.Account, error)
}

// SessionIDParam is the query parameter carrying a single-use sessionId in
// an embed URL.
const SessionIDParam = "sessionId"

var errNoSession = &wire.Error{Status: http.StatusUnauthorized, Message: "missing credentials: send Authorization: Bearer <token>, the session cookie, or ?sessionId="}

// Session authenticates the end user on the host's embed routes
// (docs/decisions.md §3). It accepts, in this order:
//
//  1. Authorization: Bearer <token>; an invalid one is 401 whatever else
//     the request carries;
//  2. its own cookie holding a valid token, unless the request carries a
//     ?sessionId= other than those the cookie was set for (the tabs of its
//     user and grant this browser opened since the cookie last changed
//     hands: a reload carries the same one, which is used up, and the
//     cookie serves it; a cookie of an earlier release, without tags,
//     serves only requests without a ?sessionId=). An invalid cookie is
//     cleared and the request goes on to the next step;
//  3. ?sessionId=<id> on first use: it exchanges the single-use id for a
//     token, sets the cookie (HttpOnly, SameSite=Lax, Secure under TLS, all
//     configurable), and sets [EmbedSession].Token so that the page can hand
//     the token to its scripts. A new ?sessionId= that fails is 401: a
//     page opened for a new session never falls back to an earlier one,
//     which may be another user's (the cookie stays for the tabs it
//     serves).
//
// It puts the [EmbedSession] (the grant and its user) in the request
// context. Anything else is 401.
//
// Options: [WithTokenTTL], [WithCookieName], [WithCookiePath],
// [WithCookieSameSite], [WithSecureCookie], [WithPartitionedCookie], [WithRedirectAfterExchange],
// [WithClock], [WithLogger]. A nil st (or a nil pointer in it) panics here
// rather than in every request.
func Session(st SessionStore, opts ...SessionOption) func(http.Handler) http.Handler {
	nilarg.Check("middleware: Session", "store", st)
	o := sessionOptions(opts)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			now := o.now()
			if scheme, tok, ok := authn.Authorization(r); ok && strings.EqualFold(scheme, authn.SchemeBearer) {
				es, err := resolveToken(ctx, st, tok, now)
				if err != nil {
					wire.WriteError(w, r, o.log, err)
					return
				}
				next.ServeHTTP(w, r.WithContext(WithEmbedSession(ctx, es)))
				return
			}
			sid := r.URL.Query().Get(SessionIDParam)
			if c, err := r.Cookie(o.cookieName); err == nil && c.Value != "" && !newSession(c.Value, sid) {
				tok, _, _ := strings.Cut(c.Value, ".")
				es, err := resolveToken(ctx, st, tok, now)
				if err == nil {
					if o.redirectWithoutSessionID(w, r) {
						return // the unused sessionId leaves the address bar too
					}
					next.ServeHTTP(w, r.WithContext(WithEmbedSession(ctx, es)))
					return
				}
				if !errors.Is(err, authn.ErrInvalidToken) {
					wire.WriteError(w, r, o.log, err)
					return
				}
				http.SetCookie(w, o.cookie(r, "", time.Time{}))
				if sid == "" {
					wire.WriteError(w, r, o.log, err)
					return
				}
			}
			if sid == "" {
				wire.WriteError(w, r, o.log, errNoSession)
				return
			}
			tok, sess, err := authn.Exchange(ctx, st, sid, o.tokenTTL, now)
			if err != nil {
				// Not the cookie's session, whoever's it is: the failure
				// shows. The cookie stays for the tabs it serves.
				wire.WriteError(w, r, o.log, err)
				return
			}
			o.serveExchanged(w, r, next, st, o.cookieValue(r, st, tok.Reveal(), sid, sess, now), tok.Reveal(), sess, now)
		})
	}
}

// redirectWithoutSessionID answers a GET or HEAD that carries ?sessionId=
// with a 303 to the same URL without it, when [WithRedirectAfterExchange]
// is on, and reports whether it did.
//
// The Location is the query alone ("?tab=2"), which the browser resolves
// against the URL it asked for, path unchanged: the path this handler sees
// may have lost a prefix (http.StripPrefix, a proxy), and one that begins
// with "//" (a request no router cleaned) would name another host.
func (o *options) redirectWithoutSessionID(w http.ResponseWriter, r *http.Request) bool {
	if !o.redirect || (r.Method != http.MethodGet && r.Method != http.MethodHead) || !r.URL.Query().Has(SessionIDParam) {
		return false
	}
	q := r.URL.Query()
	q.Del(SessionIDParam)
	loc := "?" + q.Encode()
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Location", loc)
	w.WriteHeader(http.StatusSeeOther)
	return true
}

// serveExchanged serves a request whose sessionId was just exchanged for
// tok: it sets the cookie and hands the token to the handler. The cookie
// goes first, also on an error: the sessionId is used up, and a reload
// after a failed read of the user (the database away) signs in with the
// cookie instead.
func (o *options) serveExchanged(w http.ResponseWriter, r *http.Request, next http.Handler, st SessionStore, cookie, tok string, sess store.Session, now time.Time) {
	ctx := r.Context()
	http.SetCookie(w, o.cookie(r, cookie, sess.ExpiresAt))
	u, err := st.UserByID(ctx, sess.UserID, now)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = authn.ErrInvalidSessID
		}
		wire.WriteError(w, r, o.log, err)
		return
	}
	if o.redirectWithoutSessionID(w, r) {
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	es := EmbedSession{Session: sess, User: u, Token: tok}
	next.ServeHTTP(w, r.WithContext(WithEmbedSession(ctx, es)))
}

// The cookie holds the token and, after dots, tags of the sessionIds of
// its user and grant that this browser exchanged (the tabs it opened),
// newest first,
// so that a request carrying another sessionId is served by that one, not
// by the cookie, while the reload of any of those tabs is served by it.

// maxSessionTags bounds the tags a cookie keeps: tabs opened earlier than
// the last few answer their reload with 401 (their sessionId is used).
const maxSessionTags = 8

// sessionTag is the tag of sessionId sid: a prefix of its hash (the id is
// used up once the cookie holds it).
func sessionTag(sid string) string {
	h := sha256.Sum256([]byte(sid))
	return base64.RawURLEncoding.EncodeToString(h[:12])
}

// newSession reports whether sid is a sessionId of none of the tabs the
// cookie value serves. A cookie without tags (set by an earlier release)
// serves only requests without a sessionId.
func newSession(cookie, sid string) bool {
	if sid == "" {
		return false
	}
	_, tags, ok := strings.Cut(cookie, ".")
	if !ok {
		return true // no tags: an earlier release's cookie serves no sessionId
	}
	want := []byte(sessionTag(sid))
	for tag := range strings.SplitSeq(tags, ".") {
		if subtle.ConstantTimeCompare([]byte(tag), want) == 1 {
			return false
		}
	}
	return true
}

// sameGrant reports whether sessions a and b grant the same: user,
// deployment, embed tenant, creator mode and minting key.
func sameGrant(a, b store.Session) bool {
	return a.AccountID == b.AccountID && a.UserID == b.UserID && a.DeploymentID == b.DeploymentID &&
		a.EmbedTenantID == b.EmbedTenantID && a.CreatorMode == b.CreatorMode && bytes.Equal(a.KeyHash, b.KeyHash)
}

// cookieValue is the cookie of token tok, exchanged for sid: with the
// tags of the cookie it replaces when that one is of the same user and
// grant (a new tab of the same embed), so that the earlier tabs' reloads
// are served too, by a session that grants what theirs did.
func (o *options) cookieValue(r *http.Request, st SessionStore, tok, sid string, sess store.Session, now time.Time) string {
	v := tok + "." + sessionTag(sid)
	c, err := r.Cookie(o.cookieName)
	if err != nil {
		return v
	}
	old, tags, ok := strings.Cut(c.Value, ".")
	if !ok {
		return v
	}
	if prev, err := authn.Token(r.Context(), st, old, now); err != nil || !sameGrant(prev, sess) {
		return v // another user's or grant's, or gone
	}
	n := 1
	for tag := range strings.SplitSeq(tags, ".") {
		if n == maxSessionTags {
			break
		}
		v += "." + tag
		n++
	}
	return v
}

// cookie returns the token cookie; an empty value deletes it.
func (o *options) cookie(r *http.Request, value string, expires time.Time) *http.Cookie {
	c := &http.Cookie{
		Name:        o.cookieName,
		Value:       value,
		Path:        o.cookiePath,
		HttpOnly:    true,
		SameSite:    o.cookieSite,
		Secure:      o.secure || r.TLS != nil,
		Partitioned: o.partition,
	}
	if value == "" {
		c.MaxAge = -1
	} else {
		c.Expires = expires
	}
	return c
}

func resolveToken(ctx context.Context, st SessionStore, tok string, now time.Time) (EmbedSession, error) {
	sess, err := authn.Token(ctx, st, tok, now)
	if err != nil {
		return EmbedSession{}, err
	}
	u, err := st.UserByID(ctx, sess.UserID, now)
	if errors.Is(err, store.ErrNotFound) {
		return EmbedSession{}, authn.ErrInvalidToken
	}
	if err != nil {
		return EmbedSession{}, err
	}
	return EmbedSession{Session: sess, User: u}, nil
}

// APIKeyOrToken authenticates a request by either credential:
// Authorization: Api-Key <key> puts the account in the context (as [APIKey]
// does); Authorization: Bearer <token> puts the token's account (not admin)
// and its [EmbedSession] in the context. Anything else is 401. The chat
// endpoint uses it so that pages inside an embed can call it without the API
// key.
//
// Options: [WithKeyCache], [WithKeyCacheSize], [WithClock], [WithLogger]. A
// nil st (or a nil pointer in it) panics here rather than in every request.
func APIKeyOrToken(st AuthStore, opts ...APIKeyOrTokenOption) func(http.Handler) http.Handler {
	nilarg.Check("middleware: APIKeyOrToken", "store", st)
	o := apiKeyOrTokenOptions(opts)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			scheme, cred, ok := authn.Authorization(r)
			switch {
			case ok && strings.EqualFold(scheme, authn.SchemeAPIKey):
				acct, admin, err := o.resolveKey(ctx, st, cred)
				if err != nil {
					wire.WriteError(w, r, o.log, err)
					return
				}
				next.ServeHTTP(w, r.WithContext(withKeyHash(WithAccount(ctx, acct, admin), secret.Hash(cred))))
			case ok && strings.EqualFold(scheme, authn.SchemeBearer):
				es, err := resolveToken(ctx, st, cred, o.now())
				if err != nil {
					wire.WriteError(w, r, o.log, err)
					return
				}
				acct, err := st.AccountByID(ctx, es.Session.AccountID)
				if err != nil {
					if errors.Is(err, store.ErrNotFound) {
						err = authn.ErrInvalidToken
					}
					wire.WriteError(w, r, o.log, err)
					return
				}
				ctx = WithAccount(ctx, acct, false)
				next.ServeHTTP(w, r.WithContext(WithEmbedSession(ctx, es)))
			default:
				wire.WriteError(w, r, o.log, &wire.Error{Status: http.StatusUnauthorized,
					Message: "missing credentials: send Authorization: Api-Key <key> or Authorization: Bearer <token>"})
			}
		})
	}
}
