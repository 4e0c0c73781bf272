package embedsession_test

import (
	"net/http"
	"testing"

	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/operator"
)

// TestRevokedKeyEndsItsSessions: revoking an API key, through the Go API or
// by dropping it from the bootstrap JSON, also ends the sessionIds and
// tokens minted with it (401 as for unknown ones), over HTTP, and leaves
// those of the account's other keys working.
func TestRevokedKeyEndsItsSessions(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		t.Parallel()
		const apiKey, configKey = "sk-acme-minted-by-api", "sk-acme-minted-by-config"
		cfg := apitest.Config()
		cfg.Accounts[0].APIKeys = append(cfg.Accounts[0].APIKeys, operator.APIKey{Key: configKey, Admin: true})
		s := apitest.New(t, tg, apitest.WithConfig(func(c *operator.Config) { *c = cfg }))
		op := operator.New(s.Store)
		ctx := t.Context()
		if _, err := op.AddAPIKey(ctx, apitest.Account, operator.APIKey{Key: apiKey, Admin: true}); err != nil {
			t.Fatal(err)
		}
		// mint returns a token and an unused sessionId minted with key.
		mint := func(key, user string) (token, sid string) {
			t.Helper()
			status, out := s.Do(t, http.MethodPost, "/api/v1/embed/generate-session", key, body(user, nil))
			if status != 200 {
				t.Fatalf("generate-session: %d %v", status, out)
			}
			token = s.Token(t, out["sessionId"].(string))
			_, out = s.Do(t, http.MethodPost, "/api/v1/embed/generate-session", key, body(user, nil))
			return token, out["sessionId"].(string)
		}
		apiTok, apiSid := mint(apiKey, "minted-by-api")
		cfgTok, cfgSid := mint(configKey, "minted-by-config")
		keptTok, keptSid := mint(apitest.AdminKey, "minted-by-kept")
		ended := func(what, tok, sid string) {
			t.Helper()
			if r := whoamiWith(t, s, tok, "", ""); r.Status != 401 {
				t.Errorf("%s: token = %d, want 401", what, r.Status)
			}
			if r := whoamiWith(t, s, "", tok, ""); r.Status != 401 {
				t.Errorf("%s: token cookie = %d, want 401", what, r.Status)
			}
			if status, _ := exchange(t, s, "", sid); status != 401 {
				t.Errorf("%s: sessionId exchange = %d, want 401", what, status)
			}
		}
		works := func(what, tok string) {
			t.Helper()
			if r := whoamiWith(t, s, tok, "", ""); r.Status != 200 {
				t.Errorf("%s: token = %d %s, want 200", what, r.Status, r.Raw)
			}
		}

		if err := op.RevokeAPIKey(ctx, apitest.Account, operator.HashKey(apiKey)); err != nil {
			t.Fatal(err)
		}
		ended("revoked through the Go API", apiTok, apiSid)
		if status, _ := s.Do(t, http.MethodPost, "/api/v1/embed/generate-session", apiKey, body("again", nil)); status != 401 {
			t.Errorf("generate-session with the revoked key = %d, want 401", status)
		}
		works("a key of the bootstrap", cfgTok)

		cfg.Accounts[0].APIKeys = cfg.Accounts[0].APIKeys[:len(cfg.Accounts[0].APIKeys)-1]
		if err := op.Apply(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		ended("dropped from the bootstrap", cfgTok, cfgSid)
		works("a key still listed", keptTok)
		if status, out := exchange(t, s, "", keptSid); status != 200 {
			t.Errorf("sessionId of a key still listed: %d %v", status, out)
		}
		// The users and their data stay: a new session of the kept key
		// serves the user the revoked key had provisioned.
		if u, err := s.Store.UserByKey(ctx, store.UserKey{AccountID: s.Accounts[apitest.Account].ID, ExternalID: "minted-by-api"}, s.Now()); err != nil || u.ExternalID != "minted-by-api" {
			t.Errorf("user of the revoked key: %+v %v", u, err)
		}
	})
}
