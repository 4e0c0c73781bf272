package gormstore

import (
	"testing"
	"time"
)

// TestOptionsTakeEffect checks that each option sets its field.
func TestOptionsTakeEffect(t *testing.T) {
	cfg := newConfig([]Option{WithQueryTimeout(3 * time.Second), WithMaxRetries(0), WithCloseDB()})
	if cfg.queryTimeout != 3*time.Second || cfg.maxRetries != 0 || !cfg.closeDB {
		t.Errorf("config = %+v", cfg)
	}
}
