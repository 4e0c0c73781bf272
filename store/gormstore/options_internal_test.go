package gormstore

import (
	"path/filepath"
	"testing"
	"time"
)

// TestOptionsTakeEffect checks that valid option values replace the
// defaults, and that a SQLite file store opens as many read connections as
// WithReadConns says.
func TestOptionsTakeEffect(t *testing.T) {
	cfg := newConfig([]Option{WithQueryTimeout(3 * time.Second), WithMaxOpenConns(3), WithReadConns(2), WithMaxRetries(0)})
	if cfg.queryTimeout != 3*time.Second || cfg.maxOpen != 3 || cfg.readConns != 2 || cfg.maxRetries != 0 {
		t.Errorf("config = %+v", cfg)
	}
	s, err := Open(filepath.Join(t.TempDir(), "opts.db"), WithReadConns(2))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if cap(s.readers) != 2 {
		t.Errorf("read connections = %d, want 2", cap(s.readers))
	}
}
