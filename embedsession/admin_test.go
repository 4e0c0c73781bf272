package embedsession_test

import (
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/embedkit/embedkit/internal/apitest"
)

func tenantPath(tenant, kind string) string { return "/api/v1/embed-tenants/" + tenant + "/" + kind }

// defineGroups creates n groups g00..gNN (and as many attributes) in an
// embed tenant through generate-session.
func defineGroups(t *testing.T, s *apitest.Server, tenant string, n int) {
	t.Helper()
	var gd, ad []any
	for i := range n {
		gd = append(gd, obj{"name": fmt.Sprintf("g%03d", i), "description": fmt.Sprintf("group %d", i)})
		ad = append(ad, obj{"name": fmt.Sprintf("a%03d", i), "type": "number"})
	}
	s.GenerateSession(t, body("definer", obj{"creatorMode": true, "embedTenantName": tenant,
		"groupDefinitions": gd, "userAttributeDefinitions": ad}))
}

func listAll(t *testing.T, s *apitest.Server, tenant, kind string, first int) (names []string, pages int) {
	t.Helper()
	after := ""
	for {
		q := url.Values{"first": {fmt.Sprint(first)}}
		if after != "" {
			q.Set("after", after)
		}
		status, page := s.Do(t, "GET", tenantPath(tenant, kind)+"?"+q.Encode(), apitest.AdminKey, nil)
		if status != 200 {
			t.Fatalf("list = %d %v", status, page)
		}
		pages++
		for _, it := range page["items"].([]any) {
			names = append(names, it.(map[string]any)["name"].(string))
		}
		info := page["pageInfo"].(map[string]any)
		if !info["hasNextPage"].(bool) {
			return names, pages
		}
		after = info["endCursor"].(string)
		if pages > 100 {
			t.Fatal("pagination does not end")
		}
	}
}

// TestAdminList covers the embed-tenant list endpoints: item fields,
// first/after keyset pagination, bad parameters and unknown tenants.
func TestAdminList(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		t.Parallel()
		s := apitest.New(t, tg)
		defineGroups(t, s, "list-tenant", 7)
		defineGroups(t, s, "other-tenant", 2)

		t.Run("group item fields", func(t *testing.T) {
			status, page := s.Do(t, "GET", tenantPath("list-tenant", "groups")+"?first=1", apitest.AdminKey, nil)
			if status != 200 {
				t.Fatalf("got %d %v", status, page)
			}
			items := page["items"].([]any)
			it := items[0].(map[string]any)
			keys := slices.Sorted(func(yield func(string) bool) {
				for k := range it {
					if !yield(k) {
						return
					}
				}
			})
			if !reflect.DeepEqual(keys, []string{"createdAt", "description", "id", "name", "updatedAt"}) {
				t.Errorf("item fields = %v", keys)
			}
			if _, ok := it["id"].(string); !ok || it["name"] != "g000" || it["description"] != "group 0" {
				t.Errorf("item = %v", it)
			}
			for _, f := range []string{"createdAt", "updatedAt"} {
				if _, err := time.Parse(time.RFC3339, it[f].(string)); err != nil {
					t.Errorf("%s = %v: %v", f, it[f], err)
				}
			}
			if info := page["pageInfo"].(map[string]any); info["hasNextPage"] != true || info["endCursor"] == "" {
				t.Errorf("pageInfo = %v", info)
			}
		})
		t.Run("attribute item fields", func(t *testing.T) {
			_, page := s.Do(t, "GET", tenantPath("list-tenant", "user-attributes")+"?first=1", apitest.AdminKey, nil)
			it := page["items"].([]any)[0].(map[string]any)
			for _, f := range []string{"id", "name", "type", "displayName", "defaultValue", "description", "createdAt", "updatedAt"} {
				if _, ok := it[f].(string); !ok {
					t.Errorf("field %s = %v (%T)", f, it[f], it[f])
				}
			}
			if len(it) != 8 || it["type"] != "number" || it["name"] != "a000" {
				t.Errorf("item = %v", it)
			}
		})
		t.Run("pages cover every item once, in order", func(t *testing.T) {
			for _, first := range []int{1, 2, 3, 7, 50} {
				names, pages := listAll(t, s, "list-tenant", "groups", first)
				want := []string{"g000", "g001", "g002", "g003", "g004", "g005", "g006"}
				if !reflect.DeepEqual(names, want) {
					t.Errorf("first=%d: names = %v", first, names)
				}
				if wantPages := (7 + first - 1) / first; pages != wantPages {
					t.Errorf("first=%d: %d pages, want %d", first, pages, wantPages)
				}
				attrs, _ := listAll(t, s, "list-tenant", "user-attributes", first)
				if len(attrs) != 7 {
					t.Errorf("first=%d: attributes = %v", first, attrs)
				}
			}
		})
		t.Run("default page size is 50", func(t *testing.T) {
			defineGroups(t, s, "big-tenant", 60)
			_, page := s.Do(t, "GET", tenantPath("big-tenant", "groups"), apitest.AdminKey, nil)
			if n := len(page["items"].([]any)); n != 50 || page["pageInfo"].(map[string]any)["hasNextPage"] != true {
				t.Errorf("items = %d, pageInfo %v", n, page["pageInfo"])
			}
			_, page = s.Do(t, "GET", tenantPath("big-tenant", "groups")+"?first=1000", apitest.AdminKey, nil)
			if n := len(page["items"].([]any)); n != 60 || page["pageInfo"].(map[string]any)["hasNextPage"] != false {
				t.Errorf("first=1000: items = %d, pageInfo %v", n, page["pageInfo"])
			}
		})
		t.Run("empty tenant has an empty page", func(t *testing.T) {
			s.GenerateSession(t, body("empty", obj{"embedTenantName": "empty-tenant"}))
			status, page := s.Do(t, "GET", tenantPath("empty-tenant", "groups"), apitest.AdminKey, nil)
			if status != 200 || len(page["items"].([]any)) != 0 || page["pageInfo"].(map[string]any)["hasNextPage"] != false {
				t.Errorf("got %d %v", status, page)
			}
		})
		for _, c := range []struct{ name, query string }{
			{"first=0", "first=0"}, {"first negative", "first=-1"}, {"first over 1000", "first=1001"},
			{"first not a number", "first=ten"}, {"first empty", "first="}, {"first fraction", "first=1.5"},
			{"after garbage", "after=zzz"}, {"after empty", "after="}, {"after raw id", "after=5"},
			// Pairs url.Values would drop: refused, not ignored.
			{"first with a semicolon", "first=5000;x=1"}, {"first badly escaped", "first=%zz"}, {"first=0 badly escaped", "first=0%"},
			{"after with a semicolon", "after=djE6NA;"}, {"after badly escaped", "after=%zz"}, {"key badly escaped", "%zz=1"},
			// Given twice: which one would the client mean?
			{"first twice", "first=1&first=2"}, {"first twice, the same", "first=5&x=1&first=5"}, {"first twice, escaped", "first=1&%66irst=2"},
			{"after twice", "after=djE6NA&after=djE6NA"},
		} {
			t.Run("bad parameter "+c.name+" is 400", func(t *testing.T) {
				for _, kind := range []string{"groups", "user-attributes"} {
					if status, out := s.Do(t, "GET", tenantPath("list-tenant", kind)+"?"+c.query, apitest.AdminKey, nil); status != 400 {
						t.Errorf("%s: got %d %v", kind, status, out)
					}
				}
			})
		}
		t.Run("unknown embed tenant is 404", func(t *testing.T) {
			for _, tenant := range []string{"no-such-tenant", "BAD", "x"} {
				status, out := s.Do(t, "GET", tenantPath(tenant, "groups"), apitest.AdminKey, nil)
				if status != 404 || out["error"] != "embed tenant not found" {
					t.Errorf("%s: got %d %v", tenant, status, out)
				}
			}
		})
		t.Run("embed tenant of another account is 404", func(t *testing.T) {
			if status, _ := s.Do(t, "GET", tenantPath("list-tenant", "groups"), apitest.OtherAdminKey, nil); status != 404 {
				t.Errorf("got %d", status)
			}
		})
		t.Run("non-admin key is 403, no key 401", func(t *testing.T) {
			if status, _ := s.Do(t, "GET", tenantPath("list-tenant", "groups"), apitest.UserKey, nil); status != 403 {
				t.Errorf("user key: %d", status)
			}
			if status, _ := s.Do(t, "GET", tenantPath("list-tenant", "user-attributes"), "", nil); status != 401 {
				t.Errorf("no key: %d", status)
			}
		})
	})
}

// TestAdminDelete covers deleting embed-tenant groups and attributes.
func TestAdminDelete(t *testing.T) {
	apitest.Run(t, true, func(t *testing.T, tg apitest.Target) {
		t.Parallel()
		s := apitest.New(t, tg)
		sid := s.GenerateSession(t, body("member", obj{"creatorMode": true, "embedTenantName": "del-tenant",
			"groupDefinitions":         []any{obj{"name": "keep"}, obj{"name": "drop"}},
			"userAttributeDefinitions": []any{obj{"name": "keep_a", "type": "string"}, obj{"name": "drop_a", "type": "number"}},
			"groups":                   []string{"keep", "drop"},
			"userAttributes":           attrs("keep_a", "k", "drop_a", 1),
		}))
		_ = sid
		defineGroups(t, s, "del-other", 1)
		ids := func(tenant, kind string) map[string]string {
			_, page := s.Do(t, "GET", tenantPath(tenant, kind), apitest.AdminKey, nil)
			m := map[string]string{}
			for _, it := range page["items"].([]any) {
				m[it.(map[string]any)["name"].(string)] = it.(map[string]any)["id"].(string)
			}
			return m
		}
		groups, attrsIDs := ids("del-tenant", "groups"), ids("del-tenant", "user-attributes")
		otherGroup := ids("del-other", "groups")["g000"]
		del := func(path, key string) (int, map[string]any) { return s.Do(t, http.MethodDelete, path, key, nil) }

		t.Run("non-admin key is 403 and deletes nothing", func(t *testing.T) {
			if st, _ := del(tenantPath("del-tenant", "groups/"+groups["drop"]), apitest.UserKey); st != 403 {
				t.Errorf("got %d", st)
			}
			if len(ids("del-tenant", "groups")) != 2 {
				t.Error("group deleted")
			}
		})
		t.Run("id of another embed tenant is 404", func(t *testing.T) {
			if st, out := del(tenantPath("del-tenant", "groups/"+otherGroup), apitest.AdminKey); st != 404 || out["error"] != "group not found" {
				t.Errorf("got %d %v", st, out)
			}
			if len(ids("del-other", "groups")) != 1 {
				t.Error("group of the other tenant deleted")
			}
		})
		t.Run("id through another account is 404", func(t *testing.T) {
			if st, _ := del(tenantPath("del-tenant", "groups/"+groups["drop"]), apitest.OtherAdminKey); st != 404 {
				t.Errorf("got %d", st)
			}
		})
		t.Run("tenant-wide group id is 404", func(t *testing.T) {
			// tenant-wide groups are not reachable through an embed tenant
			scope, _ := s.Scope(t, apitest.Account, "")
			tw, _ := s.Store.ListGroups(t.Context(), scope, 0, 10)
			if st, _ := del(tenantPath("del-tenant", fmt.Sprintf("groups/%d", tw[0].ID)), apitest.AdminKey); st != 404 {
				t.Errorf("got %d", st)
			}
		})
		t.Run("malformed or missing id is 404", func(t *testing.T) {
			// Another spelling of an existing id ("+3", "03") is malformed too.
			for _, id := range []string{"abc", "0", "-1", "99999999", "1.5", "+" + groups["drop"], "0" + groups["drop"], "+" + attrsIDs["drop_a"]} {
				if st, _ := del(tenantPath("del-tenant", "groups/"+id), apitest.AdminKey); st != 404 {
					t.Errorf("groups/%s: got %d", id, st)
				}
				if st, _ := del(tenantPath("del-tenant", "user-attributes/"+id), apitest.AdminKey); st != 404 {
					t.Errorf("user-attributes/%s: got %d", id, st)
				}
			}
		})
		t.Run("unknown embed tenant is 404", func(t *testing.T) {
			if st, _ := del(tenantPath("nope-tenant", "groups/"+groups["drop"]), apitest.AdminKey); st != 404 {
				t.Errorf("got %d", st)
			}
		})
		t.Run("deleting a group removes its memberships", func(t *testing.T) {
			if st, out := del(tenantPath("del-tenant", "groups/"+groups["drop"]), apitest.AdminKey); st != 204 {
				t.Fatalf("got %d %v", st, out)
			}
			if u := s.User(t, apitest.Account, "member", "del-tenant"); !reflect.DeepEqual(u.Groups, []string{"keep"}) {
				t.Errorf("memberships = %v", u.Groups)
			}
			if st, _ := del(tenantPath("del-tenant", "groups/"+groups["drop"]), apitest.AdminKey); st != 404 {
				t.Errorf("second delete = %d, want 404", st)
			}
		})
		t.Run("deleting an attribute removes its values", func(t *testing.T) {
			if st, out := del(tenantPath("del-tenant", "user-attributes/"+attrsIDs["drop_a"]), apitest.AdminKey); st != 204 {
				t.Fatalf("got %d %v", st, out)
			}
			if u := s.User(t, apitest.Account, "member", "del-tenant"); !reflect.DeepEqual(u.Attributes, map[string]string{"keep_a": `"k"`}) {
				t.Errorf("values = %v", u.Attributes)
			}
		})
		t.Run("a deleted attribute can be recreated with another type", func(t *testing.T) {
			s.GenerateSession(t, body("member", obj{"creatorMode": true, "embedTenantName": "del-tenant",
				"userAttributeDefinitions": []any{obj{"name": "drop_a", "type": "string"}},
				"userAttributes":           attrs("drop_a", "now a string")}))
			if u := s.User(t, apitest.Account, "member", "del-tenant"); u.Attributes["drop_a"] != `"now a string"` {
				t.Errorf("values = %v", u.Attributes)
			}
		})
	})
}
