package postgres_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/embedkit/embedkit/store"
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

// TestOpenHidesTheDSN: a DSN that does not parse is refused with the
// reason, never with the DSN, whatever the spelling of its password
// (pgx's own message hides only "password=x" and "password='x'"), and is
// not taken for a database that is down.
func TestOpenHidesTheDSN(t *testing.T) {
	const pw = "Zq9SecretPw77"
	for _, dsn := range []string{
		"host=127.0.0.1 user=u password = " + pw + " dbname=d sslmode=bogus",
		"host=127.0.0.1 user=u password= " + pw + " dbname=d port=54x32",
		`host=127.0.0.1 user=u password='ab\'` + pw + ` x' dbname=d sslmode=bogus`,
		"postgres://u:" + pw + "@127.0.0.1:54x32/d",
	} {
		_, err := postgres.Open(dsn)
		if err == nil || strings.Contains(err.Error(), pw) || strings.Contains(fmt.Sprintf("%+v", err), pw) || errors.Is(err, store.ErrUnavailable) {
			t.Errorf("Open(%q): %v", dsn, err)
		}
		for e := err; e != nil; e = errors.Unwrap(e) {
			if strings.Contains(e.Error(), pw) {
				t.Errorf("Open(%q): an error in the chain holds the password: %v", dsn, e)
			}
		}
		if err != nil && !strings.Contains(err.Error(), "the DSN does not parse") {
			t.Errorf("Open(%q): %v, want the reason", dsn, err)
		}
	}
}
