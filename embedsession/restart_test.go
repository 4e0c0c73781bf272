package embedsession_test

import (
	"reflect"
	"testing"

	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
)

// TestRestart closes and reopens the store (and re-applies the bootstrap
// configuration, as the example server does at every start): users,
// catalogs, sessionIds and tokens persist.
func TestRestart(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			dsn := testdb.OpenDSN(t, backend)
			open := func() *apitest.Server {
				st, err := testdb.OpenStore(dsn)
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				return apitest.New(t, apitest.Target{Backend: backend, Router: apitest.ServeMux},
					apitest.WithStore(func(testing.TB, string) store.Store { return st }))
			}
			s1 := open()
			s1.GenerateSession(t, body("durable", obj{"userProfile": obj{"displayName": "D"},
				"userAttributes": attrs("country", "NL"), "groups": []string{"marketing"},
				"creatorMode": false, "embedTenantName": "durable-t"}))
			s1.GenerateSession(t, body("durable", obj{"creatorMode": true, "embedTenantName": "durable-t",
				"groupDefinitions": []any{obj{"name": "g"}}, "groups": []string{"g"}}))
			tok := s1.Token(t, s1.GenerateSession(t, body("durable", nil)))
			unused := s1.GenerateSession(t, body("durable", nil))
			user := s1.User(t, apitest.Account, "durable", "")
			scoped := s1.User(t, apitest.Account, "durable", "durable-t")
			catalog := s1.Catalog(t, apitest.Account, "durable-t")
			s1.Close()
			if err := s1.Store.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}

			s2 := open()
			defer s2.Store.Close()
			if got := s2.User(t, apitest.Account, "durable", ""); !reflect.DeepEqual(got, user) {
				t.Errorf("user after restart = %+v, want %+v", got, user)
			}
			if got := s2.User(t, apitest.Account, "durable", "durable-t"); !reflect.DeepEqual(got, scoped) {
				t.Errorf("embed scope after restart = %+v, want %+v", got, scoped)
			}
			if got := s2.Catalog(t, apitest.Account, "durable-t"); !reflect.DeepEqual(got, catalog) {
				t.Errorf("catalog after restart = %+v, want %+v", got, catalog)
			}
			if r := whoamiWith(t, s2, tok, "", ""); r.Status != 200 || r.Body["externalId"] != "durable" {
				t.Errorf("token after restart: %d %s", r.Status, r.Raw)
			}
			if st, out := exchange(t, s2, "", unused); st != 200 {
				t.Errorf("sessionId after restart: %d %v", st, out)
			}
			// bootstrap ran twice: still two tenant-wide groups and the keys work
			if c := s2.Catalog(t, apitest.Account, ""); len(c.Groups) != 2 || len(c.Attributes) != 2 {
				t.Errorf("tenant-wide catalog after second bootstrap = %+v", c)
			}
		})
	}
}
