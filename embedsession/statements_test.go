package embedsession_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/operator"
)

// The statement budget of a generate-session (docs/decisions.md §13),
// reads included, as a host's GORM logger counts them, with the handler's
// default options (no caches).
const (
	maxStatementsNewUser       = 6
	maxStatementsReturningUser = 4
)

// TestStatementCount checks the statement budget of a generate-session with
// a profile, 3 attributes and 2 groups, for a new external user and for the
// same user returning, that the API key and its account are one read, and
// that the count does not grow with the names a request gives: 10
// attributes and 10 groups cost what 3 and 2 cost.
func TestStatementCount(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		// A host's GORM logger sees every statement of the store.
		hook, during := recordStatements()
		extra := apitest.WithConfig(func(c *operator.Config) {
			for i := range 10 {
				c.Accounts[0].UserAttributes = append(c.Accounts[0].UserAttributes, operator.Attribute{Name: fmt.Sprintf("attr%d", i), Type: store.TypeString})
				c.Accounts[0].Groups = append(c.Accounts[0].Groups, operator.Group{Name: fmt.Sprintf("grp%d", i)})
			}
		})
		s := apitest.New(t, tg, hook, extra)
		// count sends a generate-session for ext with a profile, attrs
		// attributes and groups groups, and returns the statements it ran.
		count := func(ext string, attrs, groups int, value string) []string {
			var as []any
			var gs []string
			for i := range attrs {
				as = append(as, obj{"name": fmt.Sprintf("attr%d", i), "value": value})
			}
			for i := range groups {
				gs = append(gs, fmt.Sprintf("grp%d", i))
			}
			return during(func() {
				s.GenerateSession(t, body(ext, obj{"userProfile": obj{"displayName": "X " + value, "picture": "https://x.test/" + value + ".png"},
					"userAttributes": as, "groups": gs}))
			})
		}
		check := func(what string, got []string, max int) {
			t.Helper()
			t.Logf("%s: %d statements:\n%s", what, len(got), strings.Join(got, "\n"))
			if len(got) > max {
				t.Errorf("%s: %d statements, want at most %d:\n%s", what, len(got), max, strings.Join(got, "\n"))
			}
			// The API key and its account are one read.
			auth := 0
			for _, q := range got {
				if strings.Contains(q, "embedkit_api_keys") || strings.Contains(q, "embedkit_accounts") {
					auth++
				}
			}
			if auth != 1 {
				t.Errorf("%s: %d statements read the API key or the account, want 1", what, auth)
			}
		}
		same := func(what string, small, large []string) {
			t.Helper()
			if len(small) != len(large) {
				t.Errorf("%s: %d statements for 3 attributes and 2 groups, %d for 10 and 10:\n%s\n---\n%s", what,
					len(small), len(large), strings.Join(small, "\n"), strings.Join(large, "\n"))
			}
		}

		newSmall := count("stmt-small", 3, 2, "a")
		check("new user", newSmall, maxStatementsNewUser)
		backSmall := count("stmt-small", 3, 2, "b")
		check("returning user", backSmall, maxStatementsReturningUser)

		newLarge := count("stmt-large", 10, 10, "a")
		same("new user", newSmall, newLarge)
		backLarge := count("stmt-large", 10, 10, "b")
		same("returning user", backSmall, backLarge)
	})
}

// TestStatementCountEmbedTenant: a generate-session that names an
// existing embed tenant, in creator mode (its groups in the tenant's scope)
// or not, keeps to the same budget: the deployment, the tenant and the
// names are one read.
func TestStatementCountEmbedTenant(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		hook, during := recordStatements()
		s := apitest.New(t, tg, hook)
		s.GenerateSession(t, body("setup", obj{"creatorMode": true, "embedTenantName": "tenant-one", "groupDefinitions": []any{obj{"name": "g"}}}))
		for _, c := range []struct {
			what string
			b    obj
			max  int
		}{
			{"new user, creator mode", body("cm", obj{"creatorMode": true, "embedTenantName": "tenant-one", "groups": []string{"g"}}), maxStatementsNewUser},
			{"returning user, creator mode", body("cm", obj{"creatorMode": true, "embedTenantName": "tenant-one", "groups": []string{"g"}}), maxStatementsReturningUser},
			{"new user, a tenant named", body("named", obj{"embedTenantName": "tenant-one"}), maxStatementsNewUser},
			{"returning user, a tenant named", body("named", obj{"embedTenantName": "tenant-one"}), maxStatementsReturningUser},
		} {
			got := during(func() { s.GenerateSession(t, c.b) })
			t.Logf("%s: %d statements", c.what, len(got))
			if len(got) > c.max {
				t.Errorf("%s: %d statements, want at most %d:\n%s", c.what, len(got), c.max, strings.Join(got, "\n"))
			}
		}
	})
}

// TestStatementsWithCaches checks what WithCacheTTL saves once the API
// key, the deployment and the embed tenant are cached: no statement reads
// the key, the deployment or the embed tenant, so a returning user's
// generate-session runs only its two writes (one statement on PostgreSQL:
// the user's UPDATE with the session's INSERT), and the read of the
// definitions when it names some.
func TestStatementsWithCaches(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		_, run := cachedServer(t, tg)
		creator := body("cached", obj{"creatorMode": true, "embedTenantName": "cached-t", "groupDefinitions": []any{obj{"name": "g"}}, "groups": []string{"g"}})
		run(creator) // fills the caches
		writes := 2
		if tg.Backend == testdb.Postgres {
			writes = 1
		}
		for _, c := range []struct {
			name string
			b    obj
			max  int
		}{
			{"no names", body("cached", nil), writes},
			{"attributes and groups", body("cached", obj{"userAttributes": attrs("country", "DE"), "groups": []string{"sales"}}), writes + 1},
			{"creator mode, nothing defined", body("cached", obj{"creatorMode": true, "embedTenantName": "cached-t", "groups": []string{"g"}}), writes},
			{"creator mode", creator, 0}, // its definitions cost what the adapter chooses
		} {
			got := run(c.b)
			for _, q := range got {
				for _, table := range []string{"embedkit_api_keys", "embedkit_deployments", "embedkit_embed_tenants"} {
					if strings.Contains(q, table) {
						t.Errorf("%s: a statement reads %s though it is cached: %s", c.name, table, q)
					}
				}
			}
			if c.max > 0 && len(got) > c.max {
				t.Errorf("%s: %d statements, want at most %d:\n%s", c.name, len(got), c.max, strings.Join(got, "\n"))
			}
		}
	})
}

// TestCachedDefinitions checks WithCacheTTL's cache of definitions: a
// request naming known definitions does not read them again, and a
// definition deleted through the handler is forgotten at once.
func TestCachedDefinitions(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		s, run := cachedServer(t, tg)
		s.GenerateSession(t, body("defs", obj{"creatorMode": true, "embedTenantName": "defs-t",
			"groupDefinitions": []any{obj{"name": "g"}}, "userAttributeDefinitions": []any{obj{"name": "a", "type": "string"}}}))
		use := body("defs", obj{"creatorMode": true, "embedTenantName": "defs-t", "groups": []string{"g"}, "userAttributes": attrs("a", "x")})
		reads := func() int {
			n := 0
			for _, q := range run(use) {
				if strings.Contains(q, "embedkit_catalog_") {
					n++
				}
			}
			return n
		}
		if n := reads(); n == 0 {
			t.Fatal("the first use of the definitions did not read them")
		}
		if n := reads(); n != 0 {
			t.Errorf("a second use read the definitions %d times", n)
		}
		if u := s.User(t, apitest.Account, "defs", "defs-t"); len(u.Groups) != 1 || len(u.Attributes) != 1 {
			t.Errorf("user's groups %v, attributes %v", u.Groups, u.Attributes)
		}
		status, list := s.Do(t, http.MethodGet, "/api/v1/embed-tenants/defs-t/groups", apitest.AdminKey, nil)
		items, _ := list["items"].([]any)
		if status != http.StatusOK || len(items) != 1 {
			t.Fatalf("groups: %d %v", status, list)
		}
		id, _ := items[0].(map[string]any)["id"].(string)
		if status, _ := s.Do(t, http.MethodDelete, "/api/v1/embed-tenants/defs-t/groups/"+id, apitest.AdminKey, nil); status != http.StatusNoContent {
			t.Fatalf("delete group: %d", status)
		}
		status, resp := s.Do(t, http.MethodPost, embedsession.PathGenerateSession, apitest.AdminKey, use)
		if status != http.StatusBadRequest || resp["error"] != "Groups with names g not found" {
			t.Errorf("a deleted group still used: %d %v", status, resp)
		}
	})
}

// cachedServer serves the API with WithCacheTTL on a store whose
// statements it records; run sends a generate-session and returns the
// statements it caused.
func cachedServer(t *testing.T, tg apitest.Target) (s *apitest.Server, run func(b obj) []string) {
	hook, during := recordStatements()
	s = apitest.New(t, tg, hook, apitest.WithEmbedOptions(embedsession.WithCacheTTL(time.Minute)))
	return s, func(b obj) []string { return during(func() { s.GenerateSession(t, b) }) }
}

// recordStatements returns a store option whose store records its
// statements as a host's GORM logger sees them, and during, which returns
// the statements that f caused.
func recordStatements() (hook apitest.Option, during func(f func()) []string) {
	var (
		mu    sync.Mutex
		stmts []string
	)
	hook = apitest.WithStore(func(t testing.TB, backend string) store.Store {
		return testdb.OpenWithHook(t, backend, func(_ context.Context, sql string) {
			mu.Lock()
			stmts = append(stmts, sql)
			mu.Unlock()
		})
	})
	return hook, func(f func()) []string {
		mu.Lock()
		stmts = nil
		mu.Unlock()
		f()
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), stmts...)
	}
}
