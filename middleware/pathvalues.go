package middleware

import "net/http"

// PathValues copies the path parameters a router keeps elsewhere into
// r.PathValue, which embedkit's handlers read, so they work on any router.
// For gorilla/mux:
//
//	r.Use(middleware.PathValues(mux.Vars))
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
