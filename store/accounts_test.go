package store_test

import (
	"testing"

	"github.com/embedkit/embedkit/store"
)

func TestExternalUserLimit(t *testing.T) {
	if got := (store.Account{}).ExternalUserLimit(); got != store.DefaultMaxExternalUsers {
		t.Errorf("limit of an account without one = %d, want %d", got, store.DefaultMaxExternalUsers)
	}
	if got := (store.Account{MaxExternalUsers: 3}).ExternalUserLimit(); got != 3 {
		t.Errorf("limit of an account with 3 = %d", got)
	}
}
