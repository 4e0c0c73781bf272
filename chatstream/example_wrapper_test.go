package chatstream_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/store/gormstore/sqlite"
)

// statusRecorder is the ResponseWriter wrapper of a host's logging
// middleware. Its Unwrap method lets the chat handler reach the connection
// through it (http.ResponseController) to flush each line and set its write
// deadline. Without Unwrap (or Flush) the lines would reach the client only
// when the response ends, and the handler would log a warning.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Example_loggingMiddleware mounts the chat routes behind a host's logging
// middleware, with a shorter write deadline for clients that stop reading.
func Example_loggingMiddleware() {
	ctx := context.Background()
	st, err := sqlite.Open(":memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	if err := seed(ctx, st); err != nil {
		log.Fatal(err)
	}
	h := chatstream.NewHandler(st, revenueAgent,
		chatstream.WithStreamWriteTimeout(10*time.Second), // default 30 s
		chatstream.WithLogger(slog.Default()))
	defer h.Close()

	statuses := make(chan int, 1)
	logging := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
			next.ServeHTTP(rec, r)
			statuses <- rec.status
		})
	}
	sm := http.NewServeMux()
	for _, rt := range h.Routes() {
		sm.Handle(rt.Method+" "+rt.Pattern, logging(rt.Handler))
	}
	srv := httptest.NewServer(sm)
	defer srv.Close()

	client := chatstream.NewClient(srv.URL, chatstream.WithAPIKey("sk-acme"))
	var conv chatstream.Conversation
	req := chatstream.Request{Input: "How is revenue?", SessionSettings: &chatstream.SessionSettings{ExternalID: "jane"}}
	for m, err := range client.Stream(ctx, "acme", "7", req) {
		if err != nil { // chatstream.ErrIncompleteStream if cut before __state__
			log.Fatal(err)
		}
		conv.Add(m)
	}
	answer, _ := conv.FinalAnswer()
	fmt.Println(answer.Content)
	fmt.Println("logged status", <-statuses)
	// Output:
	// Revenue grew 12% last month.
	// logged status 200
}
