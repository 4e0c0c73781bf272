// Package middleware holds the net/http middleware of embedkit, each of the
// form func(http.Handler) http.Handler so that it fits any router:
//
//   - [APIKey] authenticates Authorization: Api-Key <key> and puts the
//     account in the request context ([AccountFromContext]);
//   - [RequireAdmin] lets only admin keys through;
//   - [Session] authenticates the end user of the host's embed routes by a
//     Bearer token, its own cookie, or a single-use ?sessionId= that it
//     exchanges for a token ([EmbedSessionFromContext]);
//   - [APIKeyOrToken] accepts either an API key or a Bearer token (the chat
//     endpoint);
//   - [PathValues] copies a router's path parameters into r.PathValue,
//     which embedkit's handlers read; [EncodedPathValues] does it for a
//     router that matches the encoded path, as gorilla/mux must (below):
//     an externalId may hold "/".
//
// Every error response is {"error": "<message>"}, written by package
// [github.com/embedkit/embedkit/middleware/httperr], which host middleware
// uses to answer in the same format; a credential never appears in a
// response or a log line. A page behind [Session] reads the user's
// attributes and groups with [EmbedSession.AttributesAndGroups].
//
// Mounting on gorilla/mux: the host's embed pages stay on the host's own
// router behind [Session], which reads no path parameters; embedkit's
// handlers go on a router of embedkit's own that matches the encoded path,
// with [EncodedPathValues], behind a ServeMux that sends it their prefix.
// UseEncodedPath on the host's router would hand its routes' mux.Vars
// escaped (the README's "Add embedkit to your server", step 4):
//
//	host := mux.NewRouter() // the host's router, unchanged
//	embed := host.PathPrefix("/embed").Subrouter()
//	embed.Use(middleware.Session(st))
//	embed.HandleFunc("/whoami", whoami)
//
//	r := mux.NewRouter().UseEncodedPath() // embedkit's routes only
//	front := http.NewServeMux()           // what the server serves
//	front.Handle("/analytics/", r)
//	front.Handle("/", host)
//	api := r.PathPrefix("/analytics").Subrouter()
//	api.Use(middleware.EncodedPathValues(mux.Vars))
//	for _, rt := range h.Routes() { // embedsession's and chatstream's
//		api.Handle(rt.Pattern, rt.Handler).Methods(rt.Method)
//	}
//
// and on http.ServeMux:
//
//	sm.Handle("GET /embed/whoami", middleware.Session(st)(http.HandlerFunc(whoami)))
package middleware
