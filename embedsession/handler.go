package embedsession

import (
	"net/http"

	"github.com/embedkit/embedkit/internal/lru"
	"github.com/embedkit/embedkit/internal/nilarg"
	"github.com/embedkit/embedkit/internal/provision"
	"github.com/embedkit/embedkit/internal/telemetry"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store"
)

// Handler serves the embed-session API: generate-session, the sessionId to
// token exchange, revocation and deprovisioning of users, and the
// embed-tenant admin endpoints. Mount it with [Handler.Routes]. A Handler is
// safe for concurrent use.
type Handler struct {
	st  store.Store
	o   options
	tel *telemetry.Telemetry
	// Caches of WithCacheTTL, each bounded by WithCacheSize.
	deployments *lru.Cache[[2]int64, struct{}]           // {accountID, deploymentID} of existing deployments
	tenants     *lru.Cache[tenantKey, store.EmbedTenant] // committed embed tenants (never deleted: no expiry)
	defs        *provision.DefinitionCache               // nil without WithCacheTTL; a deletion through this handler forgets it
}

type tenantKey struct {
	accountID int64
	name      string
}

// NewHandler returns a Handler serving from st. A nil st (or a nil
// pointer in it, as an ignored Open error leaves) panics here rather than
// in every request.
func NewHandler(st store.Store, opts ...Option) *Handler {
	nilarg.Check("embedsession: NewHandler", "store", st)
	o := newOptions(opts)
	return &Handler{st: st, o: o, tel: telemetry.New(scope, o.tp, o.mp),
		deployments: lru.New[[2]int64, struct{}](o.cacheSize),
		tenants:     lru.New[tenantKey, store.EmbedTenant](o.cacheSize),
		defs:        provision.NewDefinitionCache(o.cacheSize, o.cacheTTL)}
}

// Route is one endpoint: mount Handler for Method and Pattern on a router.
// Pattern uses {name} wildcards, which http.ServeMux and gorilla/mux both
// understand; the handlers read them with r.PathValue (on gorilla/mux add
// middleware.EncodedPathValues(mux.Vars) with UseEncodedPath, on a router of
// embedkit's own: see [Handler.Routes]).
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
// or on gorilla/mux, on a router of embedkit's own that matches the
// encoded path (an externalId may hold "/"), behind a ServeMux that sends
// it the prefix, so that the host's router keeps its decoded mux.Vars (the
// README's "Add embedkit to your server", step 4):
//
//	host := mux.NewRouter()               // the host's router, unchanged
//	r := mux.NewRouter().UseEncodedPath() // embedkit's routes only
//	front := http.NewServeMux()           // what the server serves
//	front.Handle("/analytics/", r)
//	front.Handle("/", host)
//	api := r.PathPrefix("/analytics").Subrouter()
//	api.Use(middleware.EncodedPathValues(mux.Vars))
//	for _, rt := range h.Routes() {
//		api.Handle(rt.Pattern, rt.Handler).Methods(rt.Method)
//	}
func (h *Handler) Routes() []Route {
	mo := []middleware.APIKeyOption{middleware.WithClock(h.o.now),
		middleware.WithKeyCache(min(h.o.cacheTTL, middleware.MaxKeyCacheTTL)), middleware.WithKeyCacheSize(h.o.cacheSize)}
	if h.o.log != nil {
		mo = append(mo, middleware.WithLogger(h.o.log))
	}
	key := middleware.APIKey(h.st, mo...)
	optKey := middleware.APIKey(h.st, append(mo[:len(mo):len(mo)], middleware.Optional())...)
	admin := func(f http.HandlerFunc) http.Handler { return key(middleware.RequireAdmin(f)) }
	return h.instrument([]Route{
		{http.MethodPost, PathGenerateSession, key(http.HandlerFunc(h.generateSession))},
		{http.MethodPost, PathSessionToken, optKey(http.HandlerFunc(h.exchangeToken))},
		{http.MethodGet, PathTenantGroups, admin(h.listGroups)},
		{http.MethodDelete, PathTenantGroup, admin(h.deleteGroup)},
		{http.MethodGet, PathTenantAttrs, admin(h.listAttributes)},
		{http.MethodDelete, PathTenantAttr, admin(h.deleteAttribute)},
		{http.MethodDelete, PathUserSessions, admin(h.revokeSessions)},
		{http.MethodDelete, PathUser, admin(h.deleteUser)},
	})
}

// instrument gives every route its span and request metric (see
// [WithTracerProvider]).
func (h *Handler) instrument(rs []Route) []Route {
	for i := range rs {
		rs[i].Handler = h.tel.Route(rs[i].Method, rs[i].Pattern, rs[i].Handler)
	}
	return rs
}
