package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store/operator"
)

// TestConfigRevokesDroppedKeys: the -config file is authoritative for the
// API keys of its accounts. A key dropped from it answers 401 after the
// next start; a key it still lists (here by keyHash) keeps working.
func TestConfigRevokesDroppedKeys(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend, func(t *testing.T) {
			db := testdb.OpenDSN(t, backend)
			path := filepath.Join(t.TempDir(), "config.json")
			write := func(keys string) {
				cfg := `{"accounts":[{"name":"initech","plan":"premium","apiKeys":[` + keys + `],
				  "deployments":[{"id":3,"name":"prod"}]}]}`
				if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			generate := func(s *server, key string) (int, string) {
				resp, b := do(t, http.DefaultClient, http.MethodPost, s.base+"/api/v1/embed/generate-session", key,
					map[string]any{"deploymentId": 3, "externalId": "u1"})
				return resp.StatusCode, string(b)
			}

			write(`{"key":"sk-initech-old","admin":true},{"keyHash":"` + operator.HashKey("sk-initech-new") + `","admin":true}`)
			s := startServer(t, "-db", db, "-config", path)
			for _, k := range []string{"sk-initech-old", "sk-initech-new"} {
				if status, body := generate(s, k); status != http.StatusOK {
					t.Fatalf("first start, a listed key: %d %s", status, body)
				}
			}
			s.shutdown(t)

			write(`{"keyHash":"` + operator.HashKey("sk-initech-new") + `","admin":true}`)
			s = startServer(t, "-db", db, "-config", path)
			if status, body := generate(s, "sk-initech-old"); status != http.StatusUnauthorized || !strings.Contains(body, `"error"`) ||
				strings.Contains(body, "sk-initech-old") {
				t.Errorf("a key dropped from the config, after the restart: %d %s, want a 401 JSON error", status, body)
			}
			if status, body := generate(s, "sk-initech-new"); status != http.StatusOK {
				t.Errorf("a key still listed: %d %s", status, body)
			}
		})
	}
}
