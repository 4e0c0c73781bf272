package embedsession_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

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
// same user returning, and that the count does not grow with the names a
// request gives: 10 attributes and 10 groups cost what 3 and 2 cost.
func TestStatementCount(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		var (
			mu    sync.Mutex
			stmts []string
		)
		// A host's GORM logger sees every statement of the store.
		hook := apitest.WithStore(func(t testing.TB, backend string) store.Store {
			return testdb.OpenWithHook(t, backend, func(_ context.Context, sql string) {
				mu.Lock()
				stmts = append(stmts, sql)
				mu.Unlock()
			})
		})
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
			mu.Lock()
			stmts = nil
			mu.Unlock()
			s.GenerateSession(t, body(ext, obj{"userProfile": obj{"displayName": "X " + value, "picture": "https://x.test/" + value + ".png"},
				"userAttributes": as, "groups": gs}))
			mu.Lock()
			defer mu.Unlock()
			return append([]string(nil), stmts...)
		}
		check := func(what string, got []string, max int) {
			t.Helper()
			t.Logf("%s: %d statements:\n%s", what, len(got), strings.Join(got, "\n"))
			if len(got) > max {
				t.Errorf("%s: %d statements, want at most %d:\n%s", what, len(got), max, strings.Join(got, "\n"))
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
