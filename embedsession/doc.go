// Package embedsession serves the embed-session API of embedkit: signed
// embedding through short-lived, single-use session ids.
//
// A server-side caller authenticates with Authorization: Api-Key <key> and
// posts a [SessionRequest] to /api/v1/embed/generate-session. In one
// transaction the handler provisions the external user (profile, attribute
// values, group memberships, security context), upserts creator-mode
// definitions in the embed tenant when asked, and stores a new sessionId,
// which it returns. The sessionId goes into the embed URL; it is valid for 5
// minutes and usable once: the embed page (or the middleware.Session
// middleware) exchanges it at /api/v1/embed/session/token for a token valid
// for 24 hours. Admin keys can list and delete an embed tenant's groups and
// attribute definitions, revoke a user's sessions and deprovision a user.
//
// Mount the handler on http.ServeMux:
//
//	st, err := sqlite.Open("embed.db") // github.com/embedkit/embedkit/store/gormstore/sqlite
//	...
//	h := embedsession.NewHandler(st, embedsession.WithLogger(logger))
//	sm := http.NewServeMux()
//	for _, rt := range h.Routes() {
//		sm.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
//	}
//
// or on gorilla/mux. An externalId in a path may hold "/" or be "..", so
// the routes need a router that matches the encoded path, with
// middleware.EncodedPathValues to hand the handlers the decoded
// parameters. UseEncodedPath on the host's own router would hand its
// routes' mux.Vars escaped, so the routes go on a router of embedkit's own
// that a ServeMux in front sends the prefix to (the README's "Add embedkit
// to your server", step 4):
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
//
// A session records the embed tenant it was generated for; without
// embedTenantName that is the account's default embed tenant, named
// "default" (store.DefaultEmbedTenant), which is created only when creator
// mode needs it (EmbedTenantID is 0 until then).
//
// Every error answer is {"error": "<message>"} with the statuses of the
// project's decisions (400 bad input, 401 bad key, 403 not allowed, 404
// missing, 409 cannot change type, 413 body over 1 MiB, 503 database
// unavailable). [Client] calls the API from Go.
//
// Each route records a span named after its pattern and the
// http.server.request.duration metric through OpenTelemetry's API, on the
// providers of [WithTracerProvider] and [WithMeterProvider] (by default the
// global ones); see the repository's docs/observability.md.
package embedsession
