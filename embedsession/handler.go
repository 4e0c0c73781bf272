package embedsession

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store"
)

// Handler serves the embed-session API: generate-session, the sessionId to
// token exchange, revocation and deprovisioning of users, and the
// embed-tenant admin endpoints. Mount it with [Handler.Routes]. A Handler is
// safe for concurrent use.
type Handler struct {
	st          store.Store
	o           options
	deployments sync.Map // [2]int64{accountID, deploymentID} → expiry time.Time; see WithCacheTTL
	tenants     sync.Map // tenantKey → store.EmbedTenant, committed ones only; see WithCacheTTL
}

type tenantKey struct {
	accountID int64
	name      string
}

// NewHandler returns a Handler serving from st.
func NewHandler(st store.Store, opts ...Option) *Handler {
	return &Handler{st: st, o: newOptions(opts)}
}

// Route is one endpoint: mount Handler for Method and Pattern on a router.
// Pattern uses {name} wildcards, which http.ServeMux and gorilla/mux both
// understand; the handlers read them with r.PathValue (on gorilla/mux add
// middleware.PathValues(mux.Vars)).
type Route struct {
	Method  string
	Pattern string
	Handler http.Handler
}

// Path patterns of the API.
const (
	PathGenerateSession = "/api/v1/embed/generate-session"
	PathSessionToken    = "/api/v1/embed/session/token"
	PathTenantGroups    = "/api/v1/embed-tenants/{embedTenantName}/groups"
	PathTenantGroup     = "/api/v1/embed-tenants/{embedTenantName}/groups/{id}"
	PathTenantAttrs     = "/api/v1/embed-tenants/{embedTenantName}/user-attributes"
	PathTenantAttr      = "/api/v1/embed-tenants/{embedTenantName}/user-attributes/{id}"
	PathUserSessions    = "/api/v1/embed/users/{externalId}/sessions"
	PathUser            = "/api/v1/embed/users/{externalId}"
)

// Routes returns every endpoint with its authentication applied:
//
//	POST   /api/v1/embed/generate-session                          API key
//	POST   /api/v1/embed/session/token                             API key optional
//	GET    /api/v1/embed-tenants/{embedTenantName}/groups          admin key
//	DELETE /api/v1/embed-tenants/{embedTenantName}/groups/{id}     admin key
//	GET    /api/v1/embed-tenants/{embedTenantName}/user-attributes admin key
//	DELETE /api/v1/embed-tenants/{embedTenantName}/user-attributes/{id} admin key
//	DELETE /api/v1/embed/users/{externalId}/sessions               admin key
//	DELETE /api/v1/embed/users/{externalId}                        admin key
//
// Mount them on http.ServeMux:
//
//	for _, rt := range h.Routes() {
//		sm.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
//	}
//
// or on gorilla/mux:
//
//	r.Use(middleware.PathValues(mux.Vars))
//	for _, rt := range h.Routes() {
//		r.Handle(rt.Pattern, rt.Handler).Methods(rt.Method)
//	}
func (h *Handler) Routes() []Route {
	mo := []middleware.Option{middleware.WithLogger(h.o.log), middleware.WithKeyCache(h.o.cacheTTL)}
	key := middleware.APIKey(h.st, mo...)
	optKey := middleware.APIKey(h.st, append(mo, middleware.Optional())...)
	admin := func(f http.HandlerFunc) http.Handler { return key(middleware.RequireAdmin(f)) }
	return []Route{
		{http.MethodPost, PathGenerateSession, key(http.HandlerFunc(h.generateSession))},
		{http.MethodPost, PathSessionToken, optKey(http.HandlerFunc(h.exchangeToken))},
		{http.MethodGet, PathTenantGroups, admin(h.listGroups)},
		{http.MethodDelete, PathTenantGroup, admin(h.deleteGroup)},
		{http.MethodGet, PathTenantAttrs, admin(h.listAttributes)},
		{http.MethodDelete, PathTenantAttr, admin(h.deleteAttribute)},
		{http.MethodDelete, PathUserSessions, admin(h.revokeSessions)},
		{http.MethodDelete, PathUser, admin(h.deleteUser)},
	}
}

// deploymentExists checks that the account has the deployment, through the
// cache when [WithCacheTTL] is set.
func (h *Handler) deploymentExists(ctx context.Context, accountID, id int64) error {
	k := [2]int64{accountID, id}
	if h.o.cacheTTL > 0 {
		if exp, ok := h.deployments.Load(k); ok && time.Now().Before(exp.(time.Time)) {
			return nil
		}
	}
	if _, err := h.st.Deployment(ctx, accountID, id); err != nil {
		return err
	}
	if h.o.cacheTTL > 0 {
		h.deployments.Store(k, time.Now().Add(h.o.cacheTTL))
	}
	return nil
}
