package embedsession_test

import (
	"net/http"
	"testing"

	"github.com/embedkit/embedkit/internal/apitest"
)

// TestSmoke runs the main path on every backend and both routers:
// generate-session, exchange in the middleware, admin list, delete.
func TestSmoke(t *testing.T) {
	apitest.Run(t, true, func(t *testing.T, tg apitest.Target) {
		t.Parallel()
		s := apitest.New(t, tg)
		sid := s.GenerateSession(t, map[string]any{
			"deploymentId": 1, "externalId": "smoke", "email": "smoke@x.test",
			"userProfile":     map[string]any{"displayName": "Smoke Test", "picture": "https://cdn.test/s.png"},
			"userAttributes":  []any{map[string]any{"name": "country", "value": "US"}},
			"groups":          []string{"sales"},
			"securityContext": map[string]any{"team": 1},
		})
		who := s.Whoami(t, sid)
		if who.ExternalID != "smoke" || who.DisplayName != "Smoke Test" || string(who.UserAttributes["country"]) != `"US"` ||
			len(who.Groups) != 1 || who.Groups[0] != "sales" || who.Token == "" {
			t.Errorf("whoami = %+v", who)
		}
		sid = s.GenerateSession(t, map[string]any{
			"deploymentId": 1, "externalId": "smoke", "creatorMode": true, "embedTenantName": "tenant-one",
			"groupDefinitions": []any{map[string]any{"name": "g1"}},
			"groups":           []string{"g1"},
		})
		status, page := s.Do(t, "GET", "/api/v1/embed-tenants/tenant-one/groups", apitest.AdminKey, nil)
		items, _ := page["items"].([]any)
		if status != 200 || len(items) != 1 {
			t.Fatalf("list = %d %v", status, page)
		}
		id := items[0].(map[string]any)["id"].(string)
		if status, _ := s.Do(t, "DELETE", "/api/v1/embed-tenants/tenant-one/groups/"+id, apitest.AdminKey, nil); status != http.StatusNoContent {
			t.Errorf("delete = %d", status)
		}
		if status, _ := s.Do(t, "DELETE", "/api/v1/embed/users/smoke", apitest.AdminKey, nil); status != http.StatusNoContent {
			t.Errorf("delete user = %d", status)
		}
		_ = sid
	})
}
