package embedsession

import (
	"cmp"
	"errors"
	"net/http"
	"time"

	"github.com/embedkit/embedkit/internal/authn"
	"github.com/embedkit/embedkit/internal/provision"
	"github.com/embedkit/embedkit/internal/secret"
	"github.com/embedkit/embedkit/internal/wire"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store"
)

var errEmptyTenantName = wire.BadRequest("embedTenantName must be lowercase, 5 to 36 characters of a-z, 0-9 and '-', start with a letter and end with a letter or digit")

// generateSession serves POST /api/v1/embed/generate-session: decode and
// validate, then, atomically, check the deployment, provision the user and
// store a new sessionId (in one transaction, or in the user's one write
// when that is all the request writes). The deployment is read with the
// definitions the request names ([provision.Run]), not on its own.
func (h *Handler) generateSession(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	acct, _, ok := middleware.AccountFromContext(ctx)
	if !ok {
		wire.WriteError(w, r, h.o.log, authn.ErrMissingAPIKey)
		return
	}
	body, err := wire.ReadBody(w, r)
	if err != nil {
		wire.WriteError(w, r, h.o.log, err)
		return
	}
	var req SessionRequest
	if err := wire.Unmarshal(body, &req); err != nil {
		wire.WriteError(w, r, h.o.log, err)
		return
	}
	if req.EmbedTenantName == "" && wire.HasKey(body, "embedTenantName") {
		// An empty name is not the omitted one: names are 5 to 36 characters.
		wire.WriteError(w, r, h.o.log, errEmptyTenantName)
		return
	}
	if err := req.Validate(); err != nil {
		wire.WriteError(w, r, h.o.log, err)
		return
	}
	preq := req.provision()
	preq.MaxEmbedTenants = cmp.Or(acct.Limits.EmbedTenants, h.o.maxTenants)
	dk := [2]int64{acct.ID, req.DeploymentID}
	tk := tenantKey{acct.ID, req.EmbedTenantName}
	if tk.name == "" {
		tk.name = store.DefaultEmbedTenant
	}
	if h.o.cacheTTL > 0 {
		if _, ok := h.deployments.Get(dk, time.Now()); ok {
			preq.DeploymentID = 0 // known to exist: not read again
		}
		if et, ok := h.tenants.Get(tk, time.Time{}); ok { // entries never expire
			preq.KnownEmbedTenant = et
		}
		preq.KnownDefinitions = h.defs.Known(acct.ID, preq)
	}
	gen := h.defs.Generation()
	now := h.o.now()
	sid := secret.New()
	preq.Session = &store.NewSession{Hash: secret.Hash(sid.Reveal()), Session: store.Session{
		AccountID:    acct.ID,
		DeploymentID: req.DeploymentID,
		CreatorMode:  req.CreatorMode,
		CreatedAt:    now,
		ExpiresAt:    now.Add(h.o.sessionTTL),
		KeyHash:      middleware.APIKeyHashFromContext(ctx),
	}}
	res, err := provision.Run(ctx, h.st, acct, preq, now)
	if errors.Is(err, store.ErrNotFound) {
		// A row the request's writes reference is gone: the API key
		// (revoked since the request authenticated with it, perhaps on
		// another replica whose key cache still held it) or its account.
		err = authn.ErrInvalidAPIKey
	}
	if err != nil {
		wire.WriteError(w, r, h.o.log, err)
		return
	}
	if h.o.cacheTTL > 0 {
		// Committed: the deployment existed. Embed tenants are never
		// deleted: keep them for good.
		if preq.DeploymentID != 0 {
			h.deployments.Add(dk, struct{}{}, time.Now().Add(h.o.cacheTTL))
		}
		if res.EmbedTenant.ID != 0 && preq.KnownEmbedTenant.ID == 0 {
			h.tenants.Add(tk, res.EmbedTenant, time.Time{})
		}
		h.defs.Add(gen, res.Found)
	}
	wire.WriteJSON(w, http.StatusOK, SessionResponse{SessionID: sid.Reveal()})
}
