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

// hookStore runs after, once armed, right after the next UserByKey (or,
// with atData, UserData) of the handler returns: other requests then run
// between that read and whatever the chat does next.
type hookStore struct {
	store.Store
	atData bool
	after  atomic.Pointer[func()]
}

func (s *hookStore) fire(at bool) {
	if at == s.atData {
		if f := s.after.Swap(nil); f != nil {
			(*f)()
		}
	}
}

func (s *hookStore) UserByKey(ctx context.Context, k store.UserKey, now time.Time) (store.User, error) {
	u, err := s.Store.UserByKey(ctx, k, now)
	s.fire(false)
	return u, err
}

func (s *hookStore) UserData(ctx context.Context, id int64, sc store.Scope) (store.UserData, error) {
	d, err := s.Store.UserData(ctx, id, sc)
	s.fire(true)
	return d, err
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
				t.Error(err) // not Fatal: it runs on the handler's goroutine
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

// TestHeldRequestAtomicWithItsTurn: chat C on thread "lc" sends country DE,
// which the user holds. Right after C reads the user (or its attributes
// and groups), W sets country FR and chat B runs a whole turn on C's
// thread. Each chat is one step (its values, then its turn appended to
// the thread): if C's turn is stored after B's, C's DE is the last write
// and must be stored. (C reads the user's attributes and groups under its
// turn's reservation: B is refused while C opens.)
func TestHeldRequestAtomicWithItsTurn(t *testing.T) {
	for _, atData := range []bool{false, true} {
		t.Run(map[bool]string{false: "after the user", true: "after its data"}[atData], func(t *testing.T) {
			apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
				var hs *hookStore
				agent := chatstream.AgentFunc(func(ctx context.Context, tn chatstream.Turn, e chatstream.Emitter) error {
					prev := "-"
					for _, m := range tn.History {
						if chatstream.IsFinalAnswer(m) {
							prev = m.Content
						}
					}
					return e.Content(fmt.Sprintf("%v after (%s)", tn.User.Attributes["country"], prev))
				})
				e := newEnv(t, tg, envOpts{agent: agent, store: func(t testing.TB, backend string) store.Store {
					hs = &hookStore{Store: testdb.Open(t, backend), atData: atData}
					return hs
				}})
				a := e.Accounts[acct]
				de := &chatstream.SessionSettings{ExternalID: "lin", UserAttributes: []chatstream.UserAttribute{{Name: "country", Value: "DE"}}}
				saw := func(chatID string, ss *chatstream.SessionSettings) string {
					fa, _ := conv(collect(t, e.client, chatstream.Request{Input: "who", ChatID: chatID, SessionSettings: ss})).FinalAnswer()
					return fa.Content
				}
				saw("other", de) // the user: DE

				var bSaw string
				hook := func() {
					if _, err := provision.Run(t.Context(), e.Store, a, provision.Request{ExternalID: "lin", // W
						Attributes: []provision.AttributeInput{{Name: "country", Value: json.RawMessage(`"FR"`)}}}, e.Now()); err != nil {
						t.Error(err)
						return
					}
					msgs, err := collectErr(t.Context(), e.client, chatstream.Request{Input: "who", ChatID: "lc", SessionSettings: ext("lin")}) // B
					if err != nil {
						bSaw = "refused: " + err.Error()
						return
					}
					fa, _ := conv(msgs).FinalAnswer()
					bSaw = fa.Content
					for e.h.RunningTurns() != 0 {
						time.Sleep(time.Millisecond)
					}
				}
				hs.after.Store(&hook)
				cSaw := saw("lc", de) // C
				final := saw("", ext("lin"))
				if cSaw == "DE after (FR after (-))" && final != "DE after (-)" {
					t.Errorf("no serial order explains it: B saw %q, C's turn is stored after B's (C saw %q), yet the end is %q", bSaw, cSaw, final)
				}
			})
		})
	}
}

// TestHeldUserDeletedBeforeOpening: the user of a request that holds its
// values is deleted right after its attributes and groups are read: the
// turn is refused (503) and nothing of it is stored, for a new chat and
// for one the user had.
func TestHeldUserDeletedBeforeOpening(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		var hs *hookStore
		e := newEnv(t, tg, envOpts{agent: attrAgent, store: func(t testing.TB, backend string) store.Store {
			hs = &hookStore{Store: testdb.Open(t, backend), atData: true}
			return hs
		}})
		a := e.Accounts[acct]
		key := store.UserKey{AccountID: a.ID, ExternalID: "gone"}
		de := &chatstream.SessionSettings{ExternalID: "gone", UserAttributes: []chatstream.UserAttribute{{Name: "country", Value: "DE"}}}
		for _, chatID := range []string{"", "had"} {
			collect(t, e.client, chatstream.Request{Input: "who", ChatID: "had", SessionSettings: de})
			hook := func() {
				u, err := e.Store.UserByKey(t.Context(), key, e.Now())
				if err == nil {
					err = e.Store.DeleteUser(t.Context(), u.ID)
				}
				if err != nil {
					t.Error(err)
				}
			}
			hs.after.Store(&hook)
			_, err := collectErr(t.Context(), e.client, chatstream.Request{Input: "who", ChatID: chatID, SessionSettings: de})
			if apiStatus(err) != 503 {
				t.Errorf("chat %q: %v, want 503", chatID, err)
			}
			if _, err := e.Store.UserByKey(t.Context(), key, e.Now()); err == nil {
				t.Errorf("chat %q: the deleted user exists again", chatID)
			}
		}
	})
}
