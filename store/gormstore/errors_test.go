package gormstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/embedkit/embedkit/store"
)

// TestClassifyConnectionLoss checks that the errors a lost or unreachable
// PostgreSQL produces map to store.ErrUnavailable (503), not to nothing
// (500). internal/faulttest produces them over HTTP with a proxy.
func TestClassifyConnectionLoss(t *testing.T) {
	cases := map[string]error{
		"conn closed (pgx lock on a closed connection)": fmt.Errorf("commit: %w", pgconn.ErrConnClosed),
		"connection refused":                            &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)},
		"deadline":                                      context.DeadlineExceeded,
		"admin shutdown (57P01)":                        &pgconn.PgError{Code: "57P01"},
		"a host's lock_timeout (55P03)":                 &pgconn.PgError{Code: "55P03"},
		"a standby after a failover (25006)":            &pgconn.PgError{Code: "25006"},
	}
	for name, err := range cases {
		if kind, _ := classify(err); kind != store.ErrUnavailable {
			t.Errorf("%s: classify(%v) = %v, want ErrUnavailable", name, err, kind)
		}
	}
	if kind, _ := classify(context.Canceled); kind != nil {
		t.Errorf("classify(context.Canceled) = %v, want nil", kind)
	}

	dsn := os.Getenv("EMBEDKIT_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("EMBEDKIT_TEST_POSTGRES_DSN not set; skipping the real closed connection")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
	_, err = conn.Exec(ctx, "COMMIT")
	if err == nil {
		t.Fatal("Exec on a closed connection succeeded")
	}
	if werr := wrapErr("commit", err); !errors.Is(werr, store.ErrUnavailable) {
		t.Errorf("Exec on a closed connection: %v, want ErrUnavailable", werr)
	}
}
