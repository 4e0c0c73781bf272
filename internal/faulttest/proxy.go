// Package faulttest injects database faults under embedkit's handlers: a
// TCP [Proxy] between the store and PostgreSQL that can refuse connections
// (PostgreSQL stopped), black-hole them (a network that drops every packet)
// and recover, without touching the real server that other tests share.
//
// The fault tests themselves live in this package's _test files; they run
// on PostgreSQL when EMBEDKIT_TEST_POSTGRES_DSN is set and skip otherwise.
//
//	p := faulttest.NewProxy(t, "127.0.0.1:5432")
//	dsn, _ := faulttest.ProxiedDSN(base, p.Addr())
//	st, _ := postgres.Open(dsn, gormstore.WithQueryTimeout(time.Second))
//	p.Cut()     // connections closed, new ones refused
//	p.Restore() // accepting and forwarding again
package faulttest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Mode is how a [Proxy] treats connections.
type Mode int

// The modes of a [Proxy].
const (
	// Forward passes bytes both ways.
	Forward Mode = iota
	// Refuse closes every open connection and the listener: a new
	// connection is refused at once (ECONNREFUSED), as when PostgreSQL is
	// stopped.
	Refuse
	// BlackHole stops forwarding on every open connection and accepts new
	// ones without ever answering, as when the network drops every packet:
	// only the client's own timeouts end its calls.
	BlackHole
)

func (m Mode) String() string {
	switch m {
	case Forward:
		return "forward"
	case Refuse:
		return "refuse"
	case BlackHole:
		return "black-hole"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Proxy is a TCP proxy on 127.0.0.1 in front of one target address. It is
// safe for concurrent use.
type Proxy struct {
	target string
	addr   string // the listening address, stable across Refuse/Restore

	mu     sync.Mutex
	mode   Mode
	ln     net.Listener // nil while refusing
	conns  map[*pair]struct{}
	held   map[net.Conn]struct{} // connections accepted while black-holing
	closed bool
	// trigger, when set, switches to BlackHole as soon as a client sends
	// bytes containing it (those bytes are dropped too); with triggerApp
	// set, only a client whose startup message names that application.
	trigger    []byte
	triggerApp []byte
	wg         sync.WaitGroup
}

// pair is one proxied connection.
type pair struct {
	client, server net.Conn
	silent         bool // guarded by Proxy.mu: bytes are dropped, not forwarded
	// head is the start of what the client sent (its startup message, which
	// names its application), kept for BlackHoleOnApp; started is set once
	// head holds the startup message (after an SSLRequest, if any). Both
	// guarded by Proxy.mu.
	head    []byte
	started bool
}

// headSize bounds pair.head: a startup message is a few hundred bytes.
const headSize = 2 << 10

// NewProxy starts a proxy to target (host:port) on 127.0.0.1:0 in
// [Forward] mode; it is closed in t.Cleanup.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faulttest: listen: %v", err)
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), conns: map[*pair]struct{}{}, held: map[net.Conn]struct{}{}}
	p.serve(ln)
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's address (host:port); it stays the same through
// [Proxy.Cut] and [Proxy.Restore].
func (p *Proxy) Addr() string { return p.addr }

// Mode returns the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Cut switches to [Refuse]: every open connection is closed and new ones
// are refused until [Proxy.Restore].
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = Refuse
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	p.dropLocked()
}

// BlackHole switches to [BlackHole]: open connections stay open but carry
// nothing more, and new connections are accepted and never answered, until
// [Proxy.Restore] closes them all.
func (p *Proxy) BlackHole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = BlackHole
	for c := range p.conns {
		c.silent = true
	}
}

// BlackHoleOn arms a trigger: the first time a client sends bytes that
// contain pattern in any case (for example a statement's text, such as
// "ROLLBACK"; a connection's startup message is not matched), the
// proxy switches to [BlackHole] before forwarding them, so the fault hits
// exactly that statement. [Proxy.Restore] disarms it.
func (p *Proxy) BlackHoleOn(pattern string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trigger, p.triggerApp = bytes.ToUpper([]byte(pattern)), nil
}

// BlackHoleOnApp is [Proxy.BlackHoleOn] for the connections of one client
// only: those whose startup message sets application_name to app (the
// same bytes from another pool's connection pass). When several pools
// share the proxy, this binds the fault to one pool's statement.
func (p *Proxy) BlackHoleOnApp(app, pattern string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trigger = bytes.ToUpper([]byte(pattern))
	p.triggerApp = []byte("application_name\x00" + app + "\x00")
}

// Restore switches back to [Forward]. Connections left over from a black
// hole are closed (their peers would have timed out anyway); a refused
// listener is opened again on the same address. It fails only when that
// address cannot be bound again.
func (p *Proxy) Restore() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("faulttest: proxy closed")
	}
	prev := p.mode
	p.mode = Forward
	p.trigger, p.triggerApp = nil, nil
	switch prev {
	case BlackHole:
		for c := range p.conns {
			if c.silent {
				_ = c.client.Close()
				_ = c.server.Close()
				delete(p.conns, c)
			}
		}
		for c := range p.held {
			_ = c.Close()
			delete(p.held, c)
		}
	case Refuse:
		var ln net.Listener
		var err error
		for range 50 { // the port was ours a moment ago; retry briefly
			if ln, err = net.Listen("tcp", p.addr); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("faulttest: listen again on %s: %w", p.addr, err)
		}
		p.serveLocked(ln)
	}
	return nil
}

// Close stops the proxy, closes every connection and waits for its
// goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	p.dropLocked()
	p.mu.Unlock()
	p.wg.Wait()
}

// dropLocked closes every connection.
func (p *Proxy) dropLocked() {
	for c := range p.conns {
		_ = c.client.Close()
		_ = c.server.Close()
		delete(p.conns, c)
	}
	for c := range p.held {
		_ = c.Close()
		delete(p.held, c)
	}
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serveLocked(ln)
}

func (p *Proxy) serveLocked(ln net.Listener) {
	p.ln = ln
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by Cut or Close
			}
			p.handle(c)
		}
	}()
}

// handle proxies one accepted connection according to the mode.
func (p *Proxy) handle(c net.Conn) {
	p.mu.Lock()
	mode := p.mode
	if p.closed || mode == Refuse {
		p.mu.Unlock()
		_ = c.Close()
		return
	}
	if mode == BlackHole {
		p.held[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(io.Discard, c) // read and drop until Restore closes it
		}()
		return
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			return
		}
		pr := &pair{client: c, server: s}
		p.mu.Lock()
		if p.closed || p.mode != Forward {
			// The mode changed while dialing.
			silent := p.mode == BlackHole && !p.closed
			if !silent {
				p.mu.Unlock()
				_ = c.Close()
				_ = s.Close()
				return
			}
			pr.silent = true
		}
		p.conns[pr] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(pr, c, s, true)
		go p.pipe(pr, s, c, false)
	}()
}

// pipe copies src to dst until either side closes; while the pair is
// silent the bytes read are dropped. fromClient marks the direction the
// trigger of BlackHoleOn watches.
func (p *Proxy) pipe(pr *pair, src, dst net.Conn, fromClient bool) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			// The startup message is not a statement: its names (an
			// application's, a database's) are not matched, nor is
			// anything sent before it (an SSLRequest). Every startup
			// message names its user.
			started := pr.started
			if fromClient && len(pr.head) < headSize {
				pr.head = append(pr.head, buf[:min(n, headSize-len(pr.head))]...)
				pr.started = bytes.Contains(pr.head, []byte("user\x00"))
			}
			if fromClient && started && p.trigger != nil && bytes.Contains(bytes.ToUpper(buf[:n]), p.trigger) &&
				(p.triggerApp == nil || bytes.Contains(pr.head, p.triggerApp)) {
				p.trigger, p.triggerApp = nil, nil
				p.mode = BlackHole
				for c := range p.conns {
					c.silent = true
				}
			}
			silent := pr.silent
			p.mu.Unlock()
			if !silent {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
		}
		if err != nil {
			break
		}
	}
	p.mu.Lock()
	silent := pr.silent
	if !silent {
		delete(p.conns, pr)
	}
	p.mu.Unlock()
	if !silent {
		_ = pr.client.Close()
		_ = pr.server.Close()
	}
}

// PostgresAddr returns the host:port of a PostgreSQL DSN (URL or
// keyword/value form); a missing host or port takes libpq's defaults.
func PostgresAddr(dsn string) (string, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "", fmt.Errorf("faulttest: parse DSN: %w", err)
	}
	if strings.HasPrefix(cfg.Host, "/") {
		return "", fmt.Errorf("faulttest: DSN uses a Unix socket (%s); the proxy needs TCP", cfg.Host)
	}
	return net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port)), nil
}

// ProxiedDSN returns dsn with its host and port replaced by addr, keeping
// every other parameter (database, user, search_path, ...).
func ProxiedDSN(dsn, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("faulttest: parse DSN: %w", err)
		}
		u.Host = addr
		return u.String(), nil
	}
	// Keyword/value: a later keyword overrides an earlier one.
	return dsn + " host=" + host + " port=" + port, nil
}
