package embedsession

import (
	"context"
	"errors"
	"net/http"

	"github.com/embedkit/embedkit/internal/wire"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store"
)

var errUserNotFound = wire.Errorf(http.StatusNotFound, "user not found")

// userOp runs op on the external user named by {externalId}, in one
// transaction, and answers 204.
func (h *Handler) userOp(w http.ResponseWriter, r *http.Request, op func(ctx context.Context, tx store.Tx, userID int64) error) {
	ctx := r.Context()
	acct, _, _ := middleware.AccountFromContext(ctx)
	ext := r.PathValue("externalId")
	if !wire.ValidText(ext) {
		wire.WriteError(w, r, h.o.log, errUserNotFound)
		return
	}
	now := h.o.now()
	err := h.st.InTx(ctx, func(tx store.Tx) error {
		u, err := tx.UserByKey(ctx, store.UserKey{AccountID: acct.ID, ExternalID: ext}, now)
		if err != nil {
			return err
		}
		return op(ctx, tx, u.ID)
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = errUserNotFound
		}
		wire.WriteError(w, r, h.o.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// revokeSessions serves DELETE /api/v1/embed/users/{externalId}/sessions:
// every sessionId and token of the user stops working.
func (h *Handler) revokeSessions(w http.ResponseWriter, r *http.Request) {
	h.userOp(w, r, func(ctx context.Context, tx store.Tx, id int64) error { return tx.RevokeUserSessions(ctx, id) })
}

// deleteUser serves DELETE /api/v1/embed/users/{externalId}: the user goes
// with its attribute values, memberships, sessions, tokens and threads.
func (h *Handler) deleteUser(w http.ResponseWriter, r *http.Request) {
	h.userOp(w, r, func(ctx context.Context, tx store.Tx, id int64) error { return tx.DeleteUser(ctx, id) })
}
