package middleware_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"

	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/internal/bootstrap"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store/gormstore/sqlite"
)

// ExampleSession protects a host page of an embed: the first request brings
// ?sessionId=, which the middleware exchanges for a token kept in an
// HttpOnly cookie; later requests use the cookie.
func ExampleSession() {
	st, err := sqlite.Open(":memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	if err := bootstrap.Apply(context.Background(), st, bootstrap.Demo()); err != nil {
		log.Fatal(err)
	}
	sm := http.NewServeMux()
	for _, rt := range embedsession.NewHandler(st).Routes() {
		sm.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		es, _ := middleware.EmbedSessionFromContext(r.Context())
		fmt.Fprintf(w, "%s (token handed out: %v)", es.User.ExternalID, es.Token != "")
	})
	sm.Handle("GET /embed/page", middleware.Session(st)(page))
	srv := httptest.NewServer(sm)
	defer srv.Close()

	sid, err := embedsession.NewClient(srv.URL, "sk-acme-admin").GenerateSession(context.Background(),
		embedsession.SessionRequest{DeploymentID: 1, ExternalID: "jane"})
	if err != nil {
		log.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	for _, url := range []string{"/embed/page?sessionId=" + sid, "/embed/page"} {
		resp, err := browser.Get(srv.URL + url)
		if err != nil {
			log.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(b))
	}
	// Output:
	// 200 jane (token handed out: true)
	// 200 jane (token handed out: false)
}
