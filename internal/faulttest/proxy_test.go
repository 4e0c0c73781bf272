package faulttest_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/embedkit/embedkit/internal/faulttest"
)

// echoServer answers every line with itself until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { _ = ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line on c and reads it back within d.
func roundTrip(c net.Conn, d time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return errors.New("echo answered " + line)
	}
	return nil
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestProxyModes checks the proxy itself: forwarding, refusing (open
// connections closed, new ones refused at once), black-holing (nothing
// answered, nothing refused) and restoring on the same address.
func TestProxyModes(t *testing.T) {
	p := faulttest.NewProxy(t, echoServer(t))

	before := dial(t, p.Addr())
	if err := roundTrip(before, 2*time.Second); err != nil {
		t.Fatalf("forward: %v", err)
	}

	p.Cut()
	if err := roundTrip(before, 2*time.Second); err == nil {
		t.Error("an open connection still works after Cut")
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), 2*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial after Cut: %v, want connection refused", err)
	}

	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	open := dial(t, p.Addr())
	if err := roundTrip(open, 2*time.Second); err != nil {
		t.Fatalf("after Restore: %v", err)
	}

	p.BlackHole()
	if err := roundTrip(open, 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("open connection in a black hole: %v, want a timeout", err)
	}
	fresh := dial(t, p.Addr()) // accepted, never answered
	if err := roundTrip(fresh, 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("new connection in a black hole: %v, want a timeout", err)
	}

	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(fresh, 2*time.Second); err == nil {
		t.Error("a black-holed connection works after Restore; want it closed")
	}
	if err := roundTrip(dial(t, p.Addr()), 2*time.Second); err != nil {
		t.Fatalf("after second Restore: %v", err)
	}
}

func TestProxiedDSN(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://postgres@127.0.0.1:5432/test?sslmode=disable&search_path=s1",
			"postgres://postgres@127.0.0.1:40000/test?sslmode=disable&search_path=s1"},
		{"host=db port=5432 dbname=test", "host=db port=5432 dbname=test host=127.0.0.1 port=40000"},
	} {
		got, err := faulttest.ProxiedDSN(c.in, "127.0.0.1:40000")
		if err != nil || got != c.want {
			t.Errorf("ProxiedDSN(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
		if addr, err := faulttest.PostgresAddr(got); err != nil || addr != "127.0.0.1:40000" {
			t.Errorf("PostgresAddr(%q) = %q, %v", got, addr, err)
		}
	}
}

// echo sends line on c and reads it back within d.
func echo(c net.Conn, line string, d time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if got != line+"\n" {
		return errors.New("echo answered " + got)
	}
	return nil
}

// TestProxyBlackHoleOnApp: a trigger bound to one application fires on
// that application's statement only; another connection sending the same
// bytes first, or a new connection whose startup message holds them, is
// forwarded.
func TestProxyBlackHoleOnApp(t *testing.T) {
	p := faulttest.NewProxy(t, echoServer(t))
	startup := func(app string) string { return "startup user\x00u\x00application_name\x00" + app + "\x00 " }
	other, claim := dial(t, p.Addr()), dial(t, p.Addr())
	if err := echo(other, startup("store"), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := echo(claim, startup("store-cluster"), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.BlackHoleOnApp("store-cluster", "rollback")
	// A connection's startup message is not matched, even when it names
	// the pattern, nor after an SSLRequest.
	if err := echo(dial(t, p.Addr()), startup("store-cluster")+"rollback", 2*time.Second); err != nil {
		t.Fatalf("a startup message naming the pattern: %v, want it forwarded", err)
	}
	ssl := dial(t, p.Addr())
	if err := echo(ssl, "\x00\x00\x00\x08\x04\xd2\x16\x2f", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := echo(ssl, startup("store-cluster")+"rollback", 2*time.Second); err != nil {
		t.Fatalf("a startup message after an SSLRequest naming the pattern: %v, want it forwarded", err)
	}
	if err := echo(other, "ROLLBACK", 2*time.Second); err != nil {
		t.Fatalf("another application's rollback: %v, want it forwarded", err)
	}
	if m := p.Mode(); m != faulttest.Forward {
		t.Fatalf("mode after another application's rollback: %v, want forward", m)
	}
	if err := echo(claim, "rollback", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the bound application's rollback: %v, want a timeout", err)
	}
	if m := p.Mode(); m != faulttest.BlackHole {
		t.Errorf("mode after the bound application's rollback: %v, want black-hole", m)
	}
}
