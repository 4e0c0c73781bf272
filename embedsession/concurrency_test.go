package embedsession_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/bootstrap"
)

// limitConfig sets acme's limit of persistent external users.
func limitConfig(n int) apitest.Option {
	return apitest.WithConfig(func(c *bootstrap.Config) { c.Accounts[0].MaxExternalUsers = n })
}

// parallel sends n generate-session requests at once, body(i) each, and
// returns the statuses.
func parallel(t *testing.T, s *apitest.Server, n int, body func(i int) any) map[int]int {
	t.Helper()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		counts = map[int]int{}
		start  = make(chan struct{})
	)
	for i := range n {
		req := s.Request(t, http.MethodPost, gen, apitest.AdminKey, body(i))
		wg.Go(func() {
			<-start
			resp, err := s.Client().Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			mu.Lock()
			counts[resp.StatusCode]++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	return counts
}

// TestUserLimit checks that the limit of persistent external users is exact
// under 32 concurrent first requests.
func TestUserLimit(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		t.Parallel()
		const limit = 5
		s := apitest.New(t, tg, limitConfig(limit))
		counts := parallel(t, s, 32, func(i int) any { return body(fmt.Sprintf("limit-%02d", i), nil) })
		if counts[200] != limit || counts[403] != 32-limit {
			t.Fatalf("statuses = %v, want %d×200 and %d×403", counts, limit, 32-limit)
		}
		t.Run("at the limit, existing users are still served", func(t *testing.T) {
			n := 0
			for i := range 32 {
				if s.User(t, apitest.Account, fmt.Sprintf("limit-%02d", i), "").Exists {
					n++
					s.GenerateSession(t, body(fmt.Sprintf("limit-%02d", i), obj{"groups": []string{"sales"}}))
				}
			}
			if n != limit {
				t.Errorf("%d users stored, want %d", n, limit)
			}
		})
		t.Run("a new user beyond the limit is 403 and not stored", func(t *testing.T) {
			checkRejection(t, s, rejection{body: body("one-too-many", nil), status: 403, msg: "limit"})
			if s.User(t, apitest.Account, "one-too-many", "").Exists {
				t.Error("user stored")
			}
		})
		t.Run("internal users are not limited", func(t *testing.T) {
			s.GenerateSession(t, obj{"deploymentId": 1, "internalId": apitest.InternalUser})
		})
		t.Run("deprovisioning frees a place", func(t *testing.T) {
			for i := range 32 {
				ext := fmt.Sprintf("limit-%02d", i)
				if s.User(t, apitest.Account, ext, "").Exists {
					if st, _ := s.Do(t, http.MethodDelete, "/api/v1/embed/users/"+ext, apitest.AdminKey, nil); st != 204 {
						t.Fatalf("delete = %d", st)
					}
					break
				}
			}
			s.GenerateSession(t, body("one-too-many", nil))
		})
	})
}

// TestSimultaneousFirstRequests checks that concurrent first requests for
// one externalId all succeed and create one user: with a limit of one user,
// a duplicate would be refused.
func TestSimultaneousFirstRequests(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		t.Parallel()
		s := apitest.New(t, tg, limitConfig(1))
		counts := parallel(t, s, 16, func(i int) any {
			return body("same-user", obj{"userAttributes": attrs("country", fmt.Sprint(i)), "groups": []string{"sales"}})
		})
		if counts[200] != 16 {
			t.Fatalf("statuses = %v, want 16×200", counts)
		}
		u := s.User(t, apitest.Account, "same-user", "")
		if !u.Exists || len(u.Groups) != 1 || u.Attributes["country"] == "" {
			t.Fatalf("user = %+v", u)
		}
		checkRejection(t, s, rejection{body: body("second-user", nil), status: 403, msg: "limit"})
	})
}
