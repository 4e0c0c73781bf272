package embedsession_test

import (
	"errors"
	"testing"

	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/store"
)

// TestExternalIDsInPaths: an externalId may hold "/", "%" or be a dot
// segment; the admin endpoints address exactly that user, through the Go
// client, on http.ServeMux and on gorilla/mux mounted as the docs say
// (UseEncodedPath with middleware.EncodedPathValues), and never another
// user that the path would name once decoded or cleaned.
func TestExternalIDsInPaths(t *testing.T) {
	apitest.Run(t, true, func(t *testing.T, tg apitest.Target) {
		s := apitest.New(t, tg)
		c := embedsession.NewClient(s.URL, apitest.AdminKey, embedsession.WithHTTPClient(s.Client()))
		ids := []string{"a/b", "..", ".", "zzz/../bob", "a%41", "b"}
		for _, id := range append([]string{"bob", "aa", "a", "zzz"}, ids...) {
			s.GenerateSession(t, map[string]any{"deploymentId": 1, "externalId": id})
		}
		acct := s.Accounts[apitest.Account].ID
		exists := func(id string) bool {
			_, err := s.Store.UserByKey(t.Context(), store.UserKey{AccountID: acct, ExternalID: id}, s.Now())
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				t.Fatal(err)
			}
			return err == nil
		}
		for _, id := range ids {
			if err := c.RevokeUserSessions(t.Context(), id); err != nil {
				t.Errorf("RevokeUserSessions(%q): %v", id, err)
			}
			if err := c.DeleteUser(t.Context(), id); err != nil {
				t.Errorf("DeleteUser(%q): %v", id, err)
			}
			if exists(id) {
				t.Errorf("user %q still exists", id)
			}
		}
		for _, id := range []string{"bob", "aa", "a", "zzz"} {
			if !exists(id) {
				t.Errorf("user %q was deleted by a request for another", id)
			}
		}
	})
}
