package postgres_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/embedkit/embedkit/store/gormstore/postgres"
)

// TestPoolFollowsTheCores: the pool Open sizes grows with GOMAXPROCS, from
// 16 connections on small machines.
func TestPoolFollowsTheCores(t *testing.T) {
	prev := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(prev)
	if got := postgres.PoolSize(); got != 16 {
		t.Errorf("PoolSize on 2 cores = %d, want 16", got)
	}
	runtime.GOMAXPROCS(8)
	if got := postgres.PoolSize(); got != 32 {
		t.Errorf("PoolSize on 8 cores = %d, want 32", got)
	}
}

// ExamplePoolSize opens a store whose pool follows the cores; a host that
// wants another size opens PostgreSQL itself and hands the handle to
// gormstore.OpenDB, which keeps the host's pool as configured.
func ExamplePoolSize() {
	fmt.Println(postgres.PoolSize() == max(16, 4*runtime.GOMAXPROCS(0)))
	// Output: true
}
