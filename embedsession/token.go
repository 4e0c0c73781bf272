package embedsession

import (
	"net/http"

	"github.com/embedkit/embedkit/internal/authn"
	"github.com/embedkit/embedkit/internal/secret"
	"github.com/embedkit/embedkit/internal/wire"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store"
)

// exchangeToken serves POST /api/v1/embed/session/token: it exchanges a
// single-use sessionId for a token. An API key is optional; when one was
// sent it must belong to the session's account, else the sessionId is
// treated as unknown and stays unused.
func (h *Handler) exchangeToken(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var req TokenRequest
	if err := wire.DecodeJSON(w, r, &req); err != nil {
		wire.WriteError(w, r, h.o.log, err)
		return
	}
	if req.SessionID == "" {
		wire.WriteError(w, r, h.o.log, wire.BadRequest("sessionId is required"))
		return
	}
	acct, _, authed := middleware.AccountFromContext(ctx)
	now := h.o.now()
	var (
		tok  secret.Secret
		sess store.Session
	)
	err := h.st.InTx(ctx, func(tx store.Tx) error {
		var err error
		tok, sess, err = authn.Exchange(ctx, tx, req.SessionID, h.o.tokenTTL, now)
		if err != nil {
			return err
		}
		if authed && sess.AccountID != acct.ID {
			return authn.ErrInvalidSessID // roll back: the id stays unused
		}
		return nil
	})
	if err != nil {
		wire.WriteError(w, r, h.o.log, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, TokenResponse{Token: tok.Reveal(), ExpiresAt: sess.ExpiresAt.UTC()})
}
