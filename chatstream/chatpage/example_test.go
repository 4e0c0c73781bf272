package chatpage_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

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
