package gormstore

import (
	"testing"
	"time"
)

// TestOptionsTakeEffect checks that each option sets its field.
func TestOptionsTakeEffect(t *testing.T) {
	var cfg config
	for _, o := range []Option{WithQueryTimeout(3 * time.Second), WithCloseDB()} {
		o(&cfg)
	}
	if cfg.queryTimeout != 3*time.Second || !cfg.closeDB {
		t.Errorf("config = %+v", cfg)
	}
}
