package chatstream_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/middleware/httperr"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/operator"
)

// chars returns n characters, most of them several bytes long in UTF-8.
func chars(n int) string {
	return strings.Repeat("é", n/2) + strings.Repeat("日", n-n/2)
}

// limitsCatalog adds 500 groups, 500 number attributes, a string attribute
// and array attributes to the demo account, so that chat requests can name
// as many as the limits allow.
func limitsCatalog(c *operator.Config) {
	a := &c.Accounts[0]
	for i := range 500 {
		a.Groups = append(a.Groups, operator.Group{Name: fmt.Sprintf("g%04d", i)})
		a.UserAttributes = append(a.UserAttributes, operator.Attribute{Name: fmt.Sprintf("n%04d", i), Type: store.TypeNumber})
	}
	a.UserAttributes = append(a.UserAttributes,
		operator.Attribute{Name: "s", Type: store.TypeString},
		operator.Attribute{Name: "sa", Type: store.TypeStringArray},
		operator.Attribute{Name: "na", Type: store.TypeNumberArray})
}

// TestChatFieldLimits sends, for every limited field of a chat request, the
// longest (or fullest) allowed value, which starts a turn, then one
// character (or entry, or byte) more, which is a 400 naming the field and
// changes nothing: no user, no thread, no attribute or group.
func TestChatFieldLimits(t *testing.T) {
	seq := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s%04d", prefix, i%500)
		}
		if n > 500 {
			out[500] = "sales" // distinct, and it exists
		}
		return out
	}
	cases := []struct {
		field string
		set   func(r *chatstream.Request, over int)
	}{
		{"input", func(r *chatstream.Request, over int) {
			r.Input = "echo:" + strings.Repeat("ü", (32<<10-5)/2) + strings.Repeat("x", (32<<10-5)%2+over)
		}},
		{"sessionSettings.externalId", func(r *chatstream.Request, over int) { r.SessionSettings.ExternalID = "x" + chars(254+over) }},
		{"sessionSettings.email", func(r *chatstream.Request, over int) { r.SessionSettings.Email = new(chars(310+over) + "@mail.test") }},
		{"sessionSettings.groups", func(r *chatstream.Request, over int) { r.SessionSettings.Groups = seq("g", 500+over) }},
		{"sessionSettings.userAttributes", func(r *chatstream.Request, over int) {
			for i := range 500 + over {
				name := fmt.Sprintf("n%04d", i)
				if i == 500 {
					name = "s"
				}
				r.SessionSettings.UserAttributes = append(r.SessionSettings.UserAttributes, chatstream.UserAttribute{Name: name, Value: i})
			}
		}},
		{"sessionSettings.userAttributes[0].value", func(r *chatstream.Request, over int) {
			r.SessionSettings.UserAttributes = []chatstream.UserAttribute{{Name: "s", Value: chars(1024 + over)}}
		}},
		{"sessionSettings.userAttributes[0].value[1]", func(r *chatstream.Request, over int) {
			r.SessionSettings.UserAttributes = []chatstream.UserAttribute{{Name: "sa", Value: []string{"a", chars(1024 + over)}}}
		}},
		{"sessionSettings.userAttributes[0].value", func(r *chatstream.Request, over int) {
			r.SessionSettings.UserAttributes = []chatstream.UserAttribute{{Name: "na", Value: make([]int, 1000+over)}}
		}},
	}
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		t.Parallel()
		e := newEnv(t, tg, envOpts{cfg: limitsCatalog})
		for i, c := range cases {
			mk := func(over int) chatstream.Request {
				r := chatstream.Request{Input: "echo:hi", ChatID: fmt.Sprintf("limit-%02d-%d", i, over),
					SessionSettings: &chatstream.SessionSettings{ExternalID: fmt.Sprintf("limits-%02d", i), IsEphemeral: new(false)}}
				c.set(&r, over)
				return r
			}
			ok := mk(0)
			user := ok.SessionSettings.ExternalID
			msgs := collect(t, e.client, ok)
			if st := last(msgs).State; st == nil || st.Error != "" {
				t.Fatalf("%s at its limit: the turn did not end well: %+v", c.field, last(msgs))
			}
			before := e.User(t, apitest.Account, user, "")
			over := mk(1)
			if c.field == "sessionSettings.externalId" {
				over.SessionSettings.ExternalID = user + "x"
			} else {
				over.SessionSettings.SecurityContext = []byte(`{"changed":true}`)
			}
			_, err := collectErr(t.Context(), e.client, over)
			var ae *httperr.Error
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.HasPrefix(ae.Message, c.field+" must") {
				t.Errorf("%s over its limit: %v, want 400 naming the field", c.field, err)
			}
			if got := e.User(t, apitest.Account, user, ""); !reflect.DeepEqual(got, before) {
				t.Errorf("%s over its limit changed the user", c.field)
			}
			if u := e.User(t, apitest.Account, user+"x", ""); u.Exists {
				t.Errorf("%s over its limit stored a user", c.field)
			}
			if _, err := e.Store.Thread(context.Background(), e.Accounts[acct].ID, over.ChatID); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("%s over its limit: thread %q: %v, want not found", c.field, over.ChatID, err)
			}
		}
	})
}

// TestChatInvalidUTF8 puts invalid text into every string field (and keys)
// of a chat request: each is a 400 that names the field, and nothing is
// stored.
func TestChatInvalidUTF8(t *testing.T) {
	const ss = `"sessionSettings":{"externalId":"utf","isEphemeral":false`
	fields := []apitest.TextField{
		{"input", `{"input":"hello BAD",` + ss + `}}`},
		{"chatId", `{"input":"hi","chatId":"cBAD",` + ss + `}}`},
		{"activeBranchName", `{"input":"hi","activeBranchName":"devBAD",` + ss + `}}`},
		{"sessionSettings.externalId", `{"input":"hi","sessionSettings":{"externalId":"BAD"}}`},
		{"sessionSettings.internalId", `{"input":"hi","sessionSettings":{"internalId":"alice@acme.testBAD"}}`},
		{"sessionSettings.email", `{"input":"hi",` + ss + `,"email":"BAD@x.test"}}`},
		{"sessionSettings.groups[0]", `{"input":"hi",` + ss + `,"groups":["BAD"]}}`},
		{"sessionSettings.userAttributes[0].name", `{"input":"hi",` + ss + `,"userAttributes":[{"name":"countryBAD","value":"DE"}]}}`},
		{"sessionSettings.userAttributes[0].value", `{"input":"hi",` + ss + `,"userAttributes":[{"name":"country","value":"DBAD"}]}}`},
		{"sessionSettings.securityContext.k", `{"input":"hi",` + ss + `,"securityContext":{"k":"BAD"}}}`},
		{"the keys of field sessionSettings", `{"input":"hi",` + ss + `,"BAD":1}}`},
		{"the keys of the request body", `{"input":"hi",` + ss + `},"BAD":1}`},
	}
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		t.Parallel()
		e := newEnv(t, tg, envOpts{})
		path := streamPath(acct, agentID)
		e.ExpectInvalidText(t, path, fields)
		for _, id := range []string{"utf", "col", "col\ufffd"} {
			if u := e.User(t, apitest.Account, id, ""); u.Exists {
				t.Errorf("user %q was stored", id)
			}
		}
		// Abort decodes alike.
		status, out := e.Do(t, http.MethodPost, abortPath(acct, agentID), apitest.AdminKey, "{\"chatId\":\"c\",\"sessionSettings\":{\"externalId\":\"a\xff\"}}")
		if msg, _ := out["error"].(string); status != http.StatusBadRequest || !strings.HasPrefix(msg, "field sessionSettings.externalId must be valid UTF-8") {
			t.Errorf("abort: %d %q", status, msg)
		}
	})
}
