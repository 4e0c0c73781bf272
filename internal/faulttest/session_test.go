package faulttest_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store"
)

// cutAfterExchange cuts the database right after a sessionId's exchange
// commits.
type cutAfterExchange struct {
	store.Store
	cut func()
}

func (s cutAfterExchange) ExchangeSession(ctx context.Context, sh, th []byte, exp, now time.Time) (store.Session, error) {
	sess, err := s.Store.ExchangeSession(ctx, sh, th, exp, now)
	if err == nil {
		s.cut()
	}
	return sess, err
}

// TestSessionPageSurvivesFaultAfterExchange: a host page opened with a
// minted sessionId whose exchange commits just before the database goes
// away answers 503, and the reload once it is back signs in: the used-up
// sessionId is not lost (the token's cookie came with the 503).
func TestSessionPageSurvivesFaultAfterExchange(t *testing.T) {
	e := newPostgresEnv(t)
	g := &genReq{extID: "page-user", country: "FR", group: "sales"}
	e.generate(t.Context(), g)
	if g.status != http.StatusOK {
		t.Fatalf("generate-session: %d %q %v", g.status, g.errMsg, g.err)
	}
	cut := true
	st := cutAfterExchange{Store: e.Store, cut: func() {
		if cut {
			e.proxy.Cut()
		}
	}}
	page := middleware.Session(st)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("page")) }))
	load := func(cookies []*http.Cookie) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/embed/page?sessionId="+g.sessionID, nil)
		for _, c := range cookies {
			r.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		page.ServeHTTP(rec, r)
		return rec
	}
	first := load(nil)
	cut = false
	if err := e.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	e.probe(t, time.Now())
	if first.Code == http.StatusOK {
		t.Skip("the read after the exchange did not meet the cut")
	}
	if second := load(first.Result().Cookies()); second.Code != http.StatusOK {
		t.Errorf("first load %d; the reload once the database is back: %d %s, want the page", first.Code, second.Code, second.Body)
	}
}
