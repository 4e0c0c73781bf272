package embedsession_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/gorilla/mux"

	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/middleware/httperr"
	"github.com/embedkit/embedkit/store/gormstore/sqlite"
	"github.com/embedkit/embedkit/store/operator"
)

// Example_serveMux mounts the embed-session API on http.ServeMux, with a
// host page behind the embed-session middleware.
func Example_serveMux() {
	st, err := sqlite.Open(":memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	if err := operator.New(st).Apply(context.Background(), operator.DemoConfig()); err != nil {
		log.Fatal(err)
	}

	h := embedsession.NewHandler(st)
	sm := http.NewServeMux()
	for _, rt := range h.Routes() {
		sm.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}
	sm.Handle("GET /embed/hello", middleware.Session(st)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		es, _ := middleware.EmbedSessionFromContext(r.Context())
		fmt.Fprintf(w, "hello %s", es.User.ExternalID)
	})))
	srv := httptest.NewServer(sm)
	defer srv.Close()

	c := embedsession.NewClient(srv.URL, "sk-acme-admin")
	sid, err := c.GenerateSession(context.Background(), embedsession.SessionRequest{DeploymentID: 1, ExternalID: "jane"})
	if err != nil {
		log.Fatal(err)
	}
	resp, err := http.Get(srv.URL + "/embed/hello?sessionId=" + sid)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	var b [64]byte
	n, _ := resp.Body.Read(b[:])
	fmt.Println(resp.StatusCode, string(b[:n]))
	// Output: 200 hello jane
}

// Example_gorilla mounts the embed-session API on gorilla/mux as the
// README's step 4 does: on a router of embedkit's own that matches the
// encoded path, since an externalId may hold "/" or be "..", with
// middleware.EncodedPathValues, behind a ServeMux that sends the prefix to
// it. The host's own router is left as it was, so its routes keep their
// decoded mux.Vars.
func Example_gorilla() {
	st, err := sqlite.Open(":memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	if err := operator.New(st).Apply(context.Background(), operator.DemoConfig()); err != nil {
		log.Fatal(err)
	}

	h := embedsession.NewHandler(st)
	host := mux.NewRouter() // the host's router, with its own routes
	host.HandleFunc("/products/{name}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "product %s", mux.Vars(r)["name"])
	})
	r := mux.NewRouter().UseEncodedPath() // embedkit's routes only
	front := http.NewServeMux()
	front.Handle("/analytics/", r)
	front.Handle("/", host)
	api := r.PathPrefix("/analytics").Subrouter()
	api.Use(middleware.EncodedPathValues(mux.Vars))
	for _, rt := range h.Routes() {
		api.Handle(rt.Pattern, rt.Handler).Methods(rt.Method)
	}
	srv := httptest.NewServer(front)
	defer srv.Close()

	c := embedsession.NewClient(srv.URL+"/analytics", "sk-acme-admin")
	ctx := context.Background()
	_, err = c.GenerateSession(ctx, embedsession.SessionRequest{
		DeploymentID:     1,
		ExternalID:       "jane",
		CreatorMode:      true,
		EmbedTenantName:  "acme-eu",
		GroupDefinitions: []embedsession.GroupDefinition{{Name: "analysts"}},
		Groups:           embedsession.Groups("analysts"),
	})
	if err != nil {
		log.Fatal(err)
	}
	page, err := c.ListGroups(ctx, "acme-eu", 10, "")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(page.Items), page.Items[0].Name, page.PageInfo.HasNextPage)

	// An externalId with "/" or a dot segment is one path segment (the
	// client escapes it); the admin endpoints reach exactly that user.
	for _, id := range []string{"a/b", ".."} {
		if _, err := c.GenerateSession(ctx, embedsession.SessionRequest{DeploymentID: 1, ExternalID: id}); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%q: revoke %v, delete %v\n", id, c.RevokeUserSessions(ctx, id), c.DeleteUser(ctx, id))
	}

	resp, err := http.Get(srv.URL + "/products/caf%C3%A9")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Println(string(b))
	// Output:
	// 1 analysts false
	// "a/b": revoke <nil>, delete <nil>
	// "..": revoke <nil>, delete <nil>
	// product café
}

// ExampleClient provisions a user with a profile, attributes and groups,
// and shows how API errors come back.
func ExampleClient() {
	st, err := sqlite.Open(":memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	if err := operator.New(st).Apply(context.Background(), operator.DemoConfig()); err != nil {
		log.Fatal(err)
	}
	sm := http.NewServeMux()
	for _, rt := range embedsession.NewHandler(st).Routes() {
		sm.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}
	srv := httptest.NewServer(sm)
	defer srv.Close()

	c := embedsession.NewClient(srv.URL, "sk-acme-user")
	ctx := context.Background()
	sid, err := c.GenerateSession(ctx, embedsession.SessionRequest{
		DeploymentID: 1,
		ExternalID:   "jane@example.com",
		Email:        embedsession.String("jane@example.com"),
		UserProfile:  &embedsession.UserProfile{DisplayName: embedsession.String("Jane Doe")},
		UserAttributes: []embedsession.UserAttribute{
			{Name: "country", Value: embedsession.Value("US")},
			{Name: "region_ids", Value: embedsession.Value([]int{1, 2})},
		},
		Groups: embedsession.Groups("sales"),
	})
	if err != nil {
		log.Fatal(err)
	}
	tok, err := c.ExchangeToken(ctx, sid)
	fmt.Println(err == nil && tok.Token != "")

	_, err = c.GenerateSession(ctx, embedsession.SessionRequest{DeploymentID: 1, ExternalID: "jane", Groups: embedsession.Groups("nope")})
	var apiErr *httperr.Error
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.Status, apiErr.Message)
	}
	// Output:
	// true
	// 400 Groups with names nope not found
}
