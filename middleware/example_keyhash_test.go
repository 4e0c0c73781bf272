package middleware_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store/memstore"
	"github.com/embedkit/embedkit/store/operator"
)

// ExampleAPIKeyHashFromContext reads which API key authenticated a request:
// its SHA-256 hash, the one generate-session records on the sessions it
// mints (revoking the key ends them), never the key itself.
func ExampleAPIKeyHashFromContext() {
	st := memstore.New()
	defer st.Close()
	if err := operator.New(st).Apply(context.Background(), operator.DemoConfig()); err != nil {
		log.Fatal(err)
	}
	h := middleware.APIKey(st)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hash := middleware.APIKeyHashFromContext(r.Context())
		fmt.Println(hex.EncodeToString(hash) == operator.HashKey("sk-acme-admin"))
	}))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("Authorization", "Api-Key sk-acme-admin")
	h.ServeHTTP(httptest.NewRecorder(), req)
	// Output: true
}
