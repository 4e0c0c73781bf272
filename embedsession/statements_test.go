package embedsession_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/bootstrap"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
)

// TestStatementCount checks that a generate-session issues a bounded number
// of SQL statements that does not grow with the number of attributes and
// groups it names: 10 attributes and 10 groups cost the same statements as
// 1 and 1.
func TestStatementCount(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		var (
			mu    sync.Mutex
			stmts []string
		)
		// A host's GORM callback sees every statement of the store.
		hook := apitest.WithStore(func(t testing.TB, backend string) store.Store {
			return testdb.OpenWithHook(t, backend, func(_ context.Context, sql string) {
				mu.Lock()
				stmts = append(stmts, sql)
				mu.Unlock()
			})
		})
		extra := apitest.WithConfig(func(c *bootstrap.Config) {
			for i := range 10 {
				c.Accounts[0].UserAttributes = append(c.Accounts[0].UserAttributes, bootstrap.Attribute{Name: fmt.Sprintf("attr%d", i), Type: store.TypeString})
				c.Accounts[0].Groups = append(c.Accounts[0].Groups, bootstrap.Group{Name: fmt.Sprintf("grp%d", i)})
			}
		})
		s := apitest.New(t, tg, hook, extra)
		count := func(ext string, n int) (int, []string) {
			var as []any
			var gs []string
			for i := range n {
				as = append(as, obj{"name": fmt.Sprintf("attr%d", i), "value": "v"})
				gs = append(gs, fmt.Sprintf("grp%d", i))
			}
			mu.Lock()
			stmts = nil
			mu.Unlock()
			s.GenerateSession(t, body(ext, obj{"userProfile": obj{"displayName": "X", "picture": "https://x.test/p.png"},
				"userAttributes": as, "groups": gs}))
			mu.Lock()
			defer mu.Unlock()
			return len(stmts), append([]string(nil), stmts...)
		}
		for _, phase := range []string{"new user", "existing user"} {
			ext := func(n int) string { return fmt.Sprintf("stmt-%d", n) }
			small, smallSQL := count(ext(1), 1)
			large, largeSQL := count(ext(10), 10)
			t.Logf("%s: %d statements with 1 attribute and 1 group, %d with 10 and 10:\n%s", phase, small, large, strings.Join(largeSQL, "\n"))
			if small != large {
				t.Errorf("%s: %d statements for 1+1 names, %d for 10+10:\n%s\n---\n%s", phase, small, large,
					strings.Join(smallSQL, "\n"), strings.Join(largeSQL, "\n"))
			}
			if large > 20 {
				t.Errorf("%s: %d statements, want at most 20:\n%s", phase, large, strings.Join(largeSQL, "\n"))
			}
		}
	})
}
