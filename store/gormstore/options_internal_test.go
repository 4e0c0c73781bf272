package gormstore

import (
	"testing"
	"time"
)

// TestOptionsTakeEffect checks that valid option values replace the
// defaults.
func TestOptionsTakeEffect(t *testing.T) {
	cfg := newConfig([]Option{WithQueryTimeout(3 * time.Second), WithMaxRetries(0), WithCloseDB(), WithoutPipelining()})
	if cfg.queryTimeout != 3*time.Second || cfg.maxRetries != 0 || !cfg.closeDB || !cfg.noPipelining {
		t.Errorf("config = %+v", cfg)
	}
}
