package main

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/embedkit/embedkit/store/gormstore/sqlite"
	"github.com/embedkit/embedkit/store/operator"
)

// TestRestartOnPersistentStore runs the walkthrough's start-up (README step
// 1, "or a SQLite or PostgreSQL store") three times on one SQLite file, as
// three starts of the host: only the first creates (and shows) an admin
// key; later ones leave the account's keys as they are.
func TestRestartOnPersistentStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "embed.db")
	for start := range 3 {
		st, err := sqlite.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		app, err := New(t.Context(), st, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		keys, err := operator.New(st).APIKeys(t.Context(), "shop")
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) != 1 {
			t.Errorf("start %d: the account holds %d admin keys, all valid", start, len(keys))
		}
		if (app.APIKey != "") != (start == 0) {
			t.Errorf("start %d: APIKey %q; want a key at the first start only", start, app.APIKey)
		}
		_ = app.Shutdown(t.Context())
		_ = st.Close()
	}
}
