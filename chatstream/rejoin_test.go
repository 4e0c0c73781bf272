package chatstream_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/apitest"
)

// firstWriteGate holds the first Write of a response until release is
// closed, after closing started.
type firstWriteGate struct {
	http.ResponseWriter
	once             sync.Once
	started, release chan struct{}
}

func (g *firstWriteGate) Write(p []byte) (int, error) {
	g.once.Do(func() { close(g.started); <-g.release })
	return g.ResponseWriter.Write(p)
}

func (g *firstWriteGate) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// TestRejoinAsTheTurnStarts: a request without input that comes once an
// opening's echo is stored, while its first line is being written, rejoins
// the running turn: the turn starts before the stream's first line goes
// out, so that a client that has read that line and rejoins finds it.
func TestRejoinAsTheTurnStarts(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		gate := &firstWriteGate{started: make(chan struct{}), release: make(chan struct{})}
		var h *chatstream.Handler
		s := apitest.New(t, tg, apitest.WithRoutes(func(s *apitest.Server) []apitest.Route {
			h = chatstream.NewHandler(s.Store, testScripts(), chatstream.WithClock(s.Now))
			var rs []apitest.Route
			for _, r := range h.Routes() {
				if r.Pattern == chatstream.StreamPattern {
					inner := r.Handler
					r.Handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
						if req.Header.Get("X-Gate") != "" {
							gate.ResponseWriter = w
							w = gate
						}
						inner.ServeHTTP(w, req)
					})
				}
				rs = append(rs, apitest.Route(r))
			}
			return rs
		}))
		t.Cleanup(func() { _ = h.Close() })
		c := chatstream.NewClient(s.URL, chatstream.WithAPIKey(apitest.AdminKey), chatstream.WithHTTPClient(s.Client()))

		done := make(chan struct{})
		go func() {
			defer close(done)
			req := s.Request(t, http.MethodPost, streamPath(acct, agentID), apitest.AdminKey,
				map[string]any{"input": "wait", "chatId": "as-it-starts", "sessionSettings": map[string]any{"externalId": "starter"}})
			req.Header.Set("X-Gate", "1")
			if resp, err := s.Client().Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		select {
		case <-gate.started:
		case <-time.After(10 * time.Second):
			t.Fatal("the opening did not reach its first write")
		}
		msgs := collect(t, c, chatstream.Request{ChatID: "as-it-starts", SessionSettings: ext("starter")})
		close(gate.release)
		<-done
		if first := msgs[0]; first.State == nil || !first.State.IsStreaming {
			t.Errorf("rejoin as the turn started: __cutoff__ %+v, want isStreaming", first)
		}
		if st := last(msgs).State; st == nil || len(st.Messages) != 2 {
			t.Errorf("rejoin as the turn started: __state__ %+v, want the echo and the answer", last(msgs))
		}
	})
}
