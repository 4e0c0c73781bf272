package gormstore_test

import (
	"encoding/hex"
	"testing"

	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore"
)

// releaseKeys are the API-key hashes of account "acme" in the databases of
// testdata (the demo configuration's admin and non-admin keys), written
// before API keys had an origin, a name and a creation time.
var releaseKeys = map[string]bool{
	"673aa29db9970ec11ae37091d97a2960bec9bf6d3eabe89f8a00778e5130120e": true,
	"fffbc07586997d42ba90a9a4d73ebd4cbda2ab0d69da044565e393f7deec5336": false,
}

// checkReleaseKeys checks, after TestMigrateFromRelease's migration, that
// the release's API keys are still there and count as the configuration's
// (a configuration that no longer lists them removes them), with no name
// and no creation time.
func checkReleaseKeys(t *testing.T, st *gormstore.Store) {
	t.Helper()
	ctx := t.Context()
	a, err := st.AccountByName(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := st.APIKeys(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != len(releaseKeys) {
		t.Fatalf("API keys after migration = %+v, want %d", keys, len(releaseKeys))
	}
	for _, k := range keys {
		admin, ok := releaseKeys[hex.EncodeToString(k.Hash)]
		if !ok || k.Admin != admin || k.AccountID != a.ID || k.Origin != store.OriginConfig || k.Name != "" || !k.CreatedAt.IsZero() {
			t.Errorf("API key after migration = %+v, want a release key of origin config", k)
		}
		if _, _, err := st.APIKeyByHash(ctx, k.Hash); err != nil {
			t.Errorf("APIKeyByHash of a release key: %v", err)
		}
	}
}
