package chatstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/provision"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
)

// hookStore runs after, once armed, right after the next UserByKey of the
// handler returns: other requests then run between the chat's read of its
// user and whatever the chat does next.
type hookStore struct {
	store.Store
	after atomic.Pointer[func()]
}

func (s *hookStore) UserByKey(ctx context.Context, k store.UserKey, now time.Time) (store.User, error) {
	u, err := s.Store.UserByKey(ctx, k, now)
	if f := s.after.Swap(nil); f != nil {
		(*f)()
	}
	return u, err
}

// TestReturningUserLinearizable: while a chat C (sending securityContext t1,
// country DE) opens, between its read of the user and of its data, three
// requests run one after the other, each answered before the next starts: W' sets securityContext t9, a chat R sees the
// user, W sets country DE. Some order of C among W' < R < W must explain
// what R saw, what C's agent saw and what is stored at the end. (A request
// that sends a profile field or security context is written: checked
// against the user read before its data, it could be skipped on a mix of
// two moments.)
func TestReturningUserLinearizable(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		var hs *hookStore
		e := newEnv(t, tg, envOpts{agent: attrAgent, store: func(t testing.TB, backend string) store.Store {
			hs = &hookStore{Store: testdb.Open(t, backend)}
			return hs
		}})
		a := e.Accounts[acct]
		settings := func(sc, country string) *chatstream.SessionSettings {
			return &chatstream.SessionSettings{ExternalID: "lin", SecurityContext: json.RawMessage(sc),
				UserAttributes: []chatstream.UserAttribute{{Name: "country", Value: country}}}
		}
		saw := func(ss *chatstream.SessionSettings) string {
			fa, _ := conv(collect(t, e.client, chatstream.Request{Input: "who", SessionSettings: ss})).FinalAnswer()
			return fa.Content
		}
		write := func(r provision.Request) {
			if _, err := provision.Run(t.Context(), e.Store, a, r, e.Now()); err != nil {
				t.Fatal(err)
			}
		}
		saw(settings(`{"t":"1"}`, "FR")) // the user: t1, FR

		var rSaw string
		hook := func() {
			write(provision.Request{ExternalID: "lin", SecurityContext: json.RawMessage(`{"t":"9"}`)}) // W'
			rSaw = saw(ext("lin"))                                                                     // R
			write(provision.Request{ExternalID: "lin", Attributes: []provision.AttributeInput{         // W
				{Name: "country", Value: json.RawMessage(`"DE"`)}}})
		}
		hs.after.Store(&hook)
		cSaw := saw(settings(`{"t":"1"}`, "DE")) // C
		final := saw(ext("lin"))

		// The serial orders: C at position p among W', R, W.
		type state struct{ sc, country string }
		view := func(s state) string { return fmt.Sprintf("lin|%s|[]||true|%s", s.country, s.sc) }
		explained := false
		for p := 0; p <= 3; p++ {
			s := state{`{"t":"1"}`, "FR"}
			var r, c string
			ops := []func(){
				func() { s.sc = `{"t":"9"}` },
				func() { r = view(s) },
				func() { s.country = "DE" },
			}
			cop := func() { s.sc, s.country = `{"t":"1"}`, "DE"; c = view(s) }
			ops = append(ops[:p], append([]func(){cop}, ops[p:]...)...)
			for _, op := range ops {
				op()
			}
			if r == rSaw && c == cSaw && view(s) == final {
				explained = true
			}
		}
		if !explained {
			t.Errorf("no serial order explains: R saw %s, C's agent saw %s, stored at the end %s", rSaw, cSaw, final)
		}
	})
}
