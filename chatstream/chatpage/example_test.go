package chatpage_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/gorilla/mux"

	"github.com/embedkit/embedkit/chatstream/chatpage"
	"github.com/embedkit/embedkit/store/memstore"
)

// Example mounts the chat page on an http.ServeMux. The shell loads with
// no credentials; its /me endpoint wants the session token.
func Example() {
	st := memstore.New()
	defer st.Close()
	page := chatpage.New(st, chatpage.FixedAgent("7"),
		chatpage.WithTitle("Ask your data"),
		chatpage.WithFrameAncestors("https://app.example.com"),
		chatpage.WithTheme(map[string]string{"--ek-accent": "#0f766e"}))
	mux := http.NewServeMux()
	for _, rt := range page.Routes() {
		mux.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, path := range []string{"/embed/chat", "/embed/chat/me"} {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+path, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		res.Body.Close()
		fmt.Println(path, res.StatusCode)
	}
	// Output:
	// /embed/chat 200
	// /embed/chat/me 401
}

// Example_gorilla mounts the chat page on a gorilla/mux router.
func Example_gorilla() {
	st := memstore.New()
	defer st.Close()
	page := chatpage.New(st, chatpage.FixedAgent("7"))
	r := mux.NewRouter()
	for _, rt := range page.Routes() {
		r.Handle(rt.Pattern, rt.Handler).Methods(rt.Method)
	}
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/embed/chat/assets/chat.js", nil))
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	// Output:
	// 200 text/javascript; charset=utf-8
}

// ExampleLoadVega serves the chart libraries from the host's own
// node_modules folder (npm install vega@6.4.0 vega-lite@6.5.0
// vega-embed@7.3.0 vega-interpreter@2.3.2), so that the page fetches
// nothing from another origin. LoadVega reads and checks the files once,
// at start-up; a missing or changed file is its error.
func ExampleLoadVega() {
	st := memstore.New()
	defer st.Close()
	vega, err := chatpage.LoadVega("node_modules")
	if err != nil {
		log.Fatal(err)
	}
	page := chatpage.New(st, chatpage.FixedAgent("7"), chatpage.WithVega(vega))
	mux := http.NewServeMux()
	for _, rt := range page.Routes() { // including GET /embed/chat/vega/vega.js, ...
		mux.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}
