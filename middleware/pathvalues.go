package middleware

import (
	"net/http"
	"net/url"
)

// PathValues copies the path parameters a router keeps elsewhere, decoded,
// into r.PathValue, which embedkit's handlers read, so they work on any
// router. For gorilla/mux use [EncodedPathValues] with UseEncodedPath.
//
// http.ServeMux and chi fill r.PathValue themselves and need no bridge.
func PathValues(vars func(*http.Request) map[string]string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for k, v := range vars(r) {
				r.SetPathValue(k, v)
			}
			next.ServeHTTP(w, r)
		})
	}
}

// EncodedPathValues is [PathValues] for a router that matches the escaped
// path and keeps its parameters escaped: gorilla/mux with UseEncodedPath,
// which embedkit's paths need, since an externalId may hold "/" or be a
// dot segment (addressed as a%2Fb or %2E%2E; a router matching the
// decoded path would split the one and clean the other away). It
// unescapes each value; one that does not unescape is left out, and the
// handler answers 404.
//
// UseEncodedPath on the host's own router would hand its routes' mux.Vars
// escaped, so embedkit's routes go on a router of their own, which a
// ServeMux in front sends their prefix to (the README's "Add embedkit to
// your server", step 4):
//
//	r := mux.NewRouter().UseEncodedPath() // embedkit's routes only
//	api := r.PathPrefix("/analytics").Subrouter()
//	api.Use(middleware.EncodedPathValues(mux.Vars))
func EncodedPathValues(vars func(*http.Request) map[string]string) func(http.Handler) http.Handler {
	return PathValues(func(r *http.Request) map[string]string {
		escaped := vars(r)
		out := make(map[string]string, len(escaped))
		for k, v := range escaped {
			if u, err := url.PathUnescape(v); err == nil {
				out[k] = u
			}
		}
		return out
	})
}
