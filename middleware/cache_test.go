package middleware

import (
	"context"
	"fmt"
	"testing"

	"github.com/embedkit/embedkit/store/memstore"
	"github.com/embedkit/embedkit/store/operator"
)

// TestKeyCacheStaysBounded resolves more valid keys than the cache holds:
// it keeps at most WithKeyCacheSize of them, and every key still resolves.
func TestKeyCacheStaysBounded(t *testing.T) {
	cfg := operator.DemoConfig()
	for i := range 20 {
		cfg.Accounts[0].APIKeys = append(cfg.Accounts[0].APIKeys, operator.APIKey{Key: fmt.Sprintf("sk-extra-%02d", i)})
	}
	st := memstore.New()
	ctx := context.Background()
	if err := operator.New(st).Apply(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	o := apiKeyOptions([]APIKeyOption{WithKeyCache(MaxKeyCacheTTL), WithKeyCacheSize(5)})
	for round := range 2 {
		for _, k := range cfg.Accounts[0].APIKeys {
			acct, _, err := o.resolveKey(ctx, st, k.Key)
			if err != nil || acct.Name != "acme" {
				t.Fatalf("round %d: key %s: %v %v", round, k.Key, acct.Name, err)
			}
		}
	}
	if n := o.keys.Len(); n != 5 {
		t.Errorf("key cache holds %d keys, want 5", n)
	}
	if apiKeyOptions(nil).keyCacheSize != DefaultKeyCacheSize {
		t.Error("default size")
	}
}
