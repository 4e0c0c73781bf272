package chatstream_test

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/operator"
)

// TestRefusedTurnChangesNoUser: a turn refused after its user was found
// (a thread of another user or agent, a turn running, the running-turn
// limit) leaves the stored user as it was: its email, security context,
// attributes and groups, which drive row-level security, over real HTTP.
func TestRefusedTurnChangesNoUser(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{cfg: func(c *operator.Config) {
			c.Accounts[0].Limits.RunningTurnsPerUser = 2
		}})
		ctx := t.Context()
		email := "carol@acme.test"
		carol := func(country string, groups ...string) *chatstream.SessionSettings {
			return &chatstream.SessionSettings{ExternalID: "carol", Email: &email, Groups: groups,
				UserAttributes: []chatstream.UserAttribute{{Name: "country", Value: country}}, SecurityContext: []byte(`{"team":"` + country + `"}`)}
		}
		collect(t, e.client, chatstream.Request{Input: "echo:owned", ChatID: "owned", SessionSettings: ext("owner")})
		collect(t, e.client, chatstream.Request{Input: "echo:mine", ChatID: "mine", SessionSettings: carol("US", "sales")})
		// Turns of carol's that stay running: a second one on "busy" is
		// refused, and with two running (the limit) any new one.
		hold := func(chatID string) {
			next, stop := iter.Pull2(e.client.Stream(ctx, acct, agentID, chatstream.Request{Input: "tool-open", ChatID: chatID, SessionSettings: carol("US", "sales")}))
			t.Cleanup(stop)
			if _, err, ok := next(); !ok || err != nil {
				t.Fatalf("the running turn's first line: %v", err)
			}
		}
		hold("busy")

		evil := "evil@x.test"
		changed := carol("FR", "marketing")
		changed.Email = &evil
		for _, c := range []struct {
			name   string
			agent  string
			chatID string
			status int
		}{
			{"thread of another user", agentID, "owned", http.StatusForbidden},
			{"thread of another agent", "8", "mine", http.StatusNotFound},
			{"turn running", agentID, "busy", http.StatusConflict},
			{"running-turn limit", agentID, "", http.StatusTooManyRequests},
		} {
			if c.status == http.StatusTooManyRequests {
				hold("busy2")
			}
			body := map[string]any{"input": "echo:x", "sessionSettings": changed}
			if c.chatID != "" {
				body["chatId"] = c.chatID
			}
			r := e.Send(t, e.Request(t, http.MethodPost, streamPath(acct, c.agent), apitest.AdminKey, body))
			if r.Status != c.status {
				t.Fatalf("%s: status %d (%s), want %d", c.name, r.Status, r.Raw, c.status)
			}
			u, err := e.Store.UserByKey(ctx, store.UserKey{AccountID: e.Accounts[acct].ID, ExternalID: "carol"}, e.Now())
			if err != nil {
				t.Fatal(err)
			}
			data, err := e.Store.UserData(ctx, u.ID, store.TenantWide(u.AccountID))
			if err != nil {
				t.Fatal(err)
			}
			got := fmt.Sprintf("%s %s %s %v", u.Email, u.SecurityContext, data.Attributes[0].Value, names(data.Groups))
			if want := `carol@acme.test {"team":"US"} "US" [sales]`; got != want {
				t.Errorf("%s: the refused request changed the user: %s, want %s", c.name, got, want)
			}
		}
	})
}

func names(gs []store.Group) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.Name)
	}
	return out
}

// TestRefusedDataQueryChangesNoUser: a data query refused before its first
// row neither creates the user of its sessionSettings nor changes a stored
// one; one that runs stores the user as provisioned.
func TestRefusedDataQueryChangesNoUser(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newDataEnv(t, tg, &fakeSource{})
		ctx := t.Context()
		key := store.UserKey{AccountID: e.Accounts[acct].ID, ExternalID: "data-user"}
		country := func() string {
			u, err := e.Store.UserByKey(ctx, key, e.Now())
			if err != nil {
				return err.Error()
			}
			data, err := e.Store.UserData(ctx, u.ID, store.TenantWide(u.AccountID))
			if err != nil || len(data.Attributes) == 0 {
				return fmt.Sprint("no attributes ", err)
			}
			return string(data.Attributes[0].Value)
		}
		body := func(q, c string) map[string]any {
			b := dataBody(q)
			b["sessionSettings"].(map[string]any)["userAttributes"] = []any{map[string]any{"name": "country", "value": c}}
			return b
		}
		if r := postData(t, e, adminAuth, "", body("refuse", "France")); r.resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("refused query: %d", r.resp.StatusCode)
		}
		if got := country(); !strings.Contains(got, "not found") {
			t.Errorf("a refused query of a new user stored it: %s", got)
		}
		if r := postData(t, e, adminAuth, "", body("rows 1", "Germany")); r.resp.StatusCode != http.StatusOK {
			t.Fatalf("query: %d", r.resp.StatusCode)
		}
		if got := country(); got != `"Germany"` {
			t.Fatalf("after a query: country %s, want \"Germany\"", got)
		}
		if r := postData(t, e, adminAuth, "", body("refuse", "France")); r.resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("refused query: %d", r.resp.StatusCode)
		}
		if got := country(); got != `"Germany"` {
			t.Errorf("a refused query changed the user: country %s, want \"Germany\"", got)
		}
	})
}

// missingUser is a store whose UserByKey does not find an external user
// named racer: a request that looks for it finds nothing, as when another
// request creates it at the same instant.
type missingUser struct{ store.Store }

func (s missingUser) UserByKey(ctx context.Context, k store.UserKey, now time.Time) (store.User, error) {
	if k.ExternalID == "racer" {
		return store.User{}, fmt.Errorf("racer: %w", store.ErrNotFound)
	}
	return s.Store.UserByKey(ctx, k, now)
}

// TestRefusedTurnOfARacingFirstRequest: a request that takes its user for
// new, while another request has created it, writes nothing when it is
// refused (here by the running-turn limit).
func TestRefusedTurnOfARacingFirstRequest(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{
			store: func(t testing.TB, backend string) store.Store { return missingUser{testdb.Open(t, backend)} },
			cfg:   func(c *operator.Config) { c.Accounts[0].Limits.RunningTurnsPerUser = 1 },
		})
		ctx := t.Context()
		racer := func(country string) *chatstream.SessionSettings {
			return &chatstream.SessionSettings{ExternalID: "racer", SecurityContext: []byte(`{"team":"` + country + `"}`),
				UserAttributes: []chatstream.UserAttribute{{Name: "country", Value: country}}}
		}
		next, stop := iter.Pull2(e.client.Stream(ctx, acct, agentID, chatstream.Request{Input: "tool-open", SessionSettings: racer("A")}))
		defer stop()
		if _, err, ok := next(); !ok || err != nil {
			t.Fatalf("the running turn's first line: %v", err)
		}
		e.Advance(time.Millisecond) // two requests never share an instant
		r := e.Send(t, e.Request(t, http.MethodPost, streamPath(acct, agentID), apitest.AdminKey,
			map[string]any{"input": "echo:x", "sessionSettings": racer("B")}))
		if r.Status != http.StatusTooManyRequests {
			t.Fatalf("status %d (%s), want 429", r.Status, r.Raw)
		}
		// Read past the wrapper, in a transaction of the store beneath.
		if err := e.Store.InTx(ctx, func(tx store.Tx) error {
			u, err := tx.UserByKey(ctx, store.UserKey{AccountID: e.Accounts[acct].ID, ExternalID: "racer"}, e.Now())
			if err == nil && string(u.SecurityContext) != `{"team":"A"}` {
				t.Errorf("the refused request changed the user: security context %s", u.SecurityContext)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestInputThroughAnotherAgentWhileRunning: input for a thread of another
// agent is 404 chat not found, whoever sends it, while the thread's turn
// runs too (not 409 for its user, 403 for another): the answer does not
// tell whether a turn runs. TestClusterConflicts checks a turn running on
// another replica.
func TestInputThroughAnotherAgentWhileRunning(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		e := newEnv(t, tg, envOpts{cfg: withAgent8})
		next, stop := iter.Pull2(e.client.Stream(t.Context(), acct, agentID, chatstream.Request{Input: "tool-open", ChatID: "busy", SessionSettings: ext("owner")}))
		defer stop()
		if _, err, ok := next(); !ok || err != nil {
			t.Fatalf("first line: %v", err)
		}
		for _, who := range []string{"owner", "intruder"} {
			r := e.Send(t, e.Request(t, http.MethodPost, streamPath(acct, "8"), apitest.AdminKey,
				map[string]any{"input": "x", "chatId": "busy", "sessionSettings": map[string]any{"externalId": who}}))
			if r.Status != http.StatusNotFound || r.Body["error"] != "chat not found" {
				t.Errorf("input of %s through agent 8 for agent 7's running thread: %d %s, want 404 chat not found", who, r.Status, r.Raw)
			}
		}
	})
}
