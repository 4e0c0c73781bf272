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
	page, err := chatpage.New(st, chatpage.FixedAgent("7"),
		chatpage.WithTitle("Ask your data"),
		chatpage.WithFrameAncestors("https://app.example.com"),
		chatpage.WithTheme(map[string]string{"--ek-accent": "#0f766e"}))
	if err != nil {
		log.Fatal(err)
	}
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
	page, err := chatpage.New(st, chatpage.FixedAgent("7"))
	if err != nil {
		log.Fatal(err)
	}
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
