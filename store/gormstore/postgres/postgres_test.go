package postgres_test

import (
	"runtime"
	"testing"

	"github.com/embedkit/embedkit/store/gormstore/postgres"
)

// TestPoolFollowsTheCores: the pool Open sizes grows with GOMAXPROCS.
func TestPoolFollowsTheCores(t *testing.T) {
	prev := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(prev)
	if got := postgres.PoolSize(); got != 8 {
		t.Errorf("PoolSize on 2 cores = %d, want 8", got)
	}
	runtime.GOMAXPROCS(8)
	if got := postgres.PoolSize(); got != 32 {
		t.Errorf("PoolSize on 8 cores = %d, want 32", got)
	}
}
