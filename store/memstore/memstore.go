package memstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/embedkit/embedkit/store"
)

// Store is an in-memory [store.Store]. Create it with [New]; the zero value
// is not usable. A Store is safe for concurrent use.
//
// Every call outside [Store.InTx] runs as its own transaction: a read holds
// the store's read lock, a write holds its write lock and is undone entirely
// when it fails. [Store.InTx] holds the write lock while fn runs, so
// transactions are serializable and never fail for transient reasons; fn is
// called exactly once.
type Store struct {
	mu sync.RWMutex
	d  *db // nil once closed
}

var _ store.Store = (*Store)(nil)

// How to add an option to this package: write a With function that checks
// its argument first and panics with "memstore: WithX: <what is wrong>, got
// <value>" when it is invalid (options are checked when the With function is
// called, never silently replaced by a default), then returns an Option: a
// func that sets a field of config. Its doc comment states the default and
// the valid range; add a row to TestInvalidOptionsPanic.

// Option configures a [Store] at [New]. An invalid value panics when its
// With function is called.
type Option func(*config)

type config struct {
	clock store.Clock
}

// WithClock sets the clock for the timestamps the contract does not pass
// explicitly: CreatedAt and UpdatedAt of embed tenants, groups and
// attribute definitions, UpdatedAt of a thread in AppendMessages, and "now"
// wherever a caller passes a zero time (UserUpsert.Now included). Expiry always uses the
// now arguments of the methods. Default: time.Now. c must not be nil;
// WithClock panics otherwise.
func WithClock(c store.Clock) Option {
	if c == nil {
		panic("memstore: WithClock: clock must not be nil, got nil")
	}
	return func(cfg *config) { cfg.clock = c }
}

// New returns an empty store. It starts no goroutine and holds no resource
// besides memory; [Store.Close] drops the data.
func New(opts ...Option) *Store {
	cfg := config{clock: time.Now}
	for _, o := range opts {
		o(&cfg)
	}
	return &Store{d: newDB(cfg.clock)}
}

// errClosed is returned by every call after [Store.Close].
var errClosed = fmt.Errorf("memstore: store closed: %w", store.ErrUnavailable)

// errTxDone is returned by a [store.Tx] used after its [Store.InTx] returned:
// a programming error, so it wraps no sentinel of the contract.
var errTxDone = errors.New("memstore: transaction has already ended")

// Close drops the store's data. Calls after Close fail with an error wrapping
// [store.ErrUnavailable]; a transaction running in [Store.InTx] finishes
// first. Close is idempotent and always returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.d = nil
	return nil
}

// InTx runs fn in one transaction; see [store.Store.InTx]. It holds the
// store's write lock while fn runs: other calls wait, so fn must not call the
// Store itself (that would deadlock), only the [store.Tx] it is given. When
// fn returns an error or panics, every write made through the Tx is undone;
// fn's error is returned unchanged. A Tx method that fails undoes its own
// partial writes, like a failed SQL statement. The Tx fails once InTx has
// returned, and is safe for use by several goroutines while fn runs. A Tx
// method that fails with an error other than [store.ErrNotFound] or
// [store.ErrLimit] aborts the transaction, as a failed SQL statement does:
// later calls fail with its error, and InTx returns it and commits nothing
// even when fn returns nil.
func (s *Store) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.d
	if d == nil {
		return errClosed
	}
	t := &txView{d: d}
	committed := false
	defer func() {
		t.mu.Lock()
		t.done = true
		t.mu.Unlock()
		if committed {
			d.commit()
		} else {
			d.rollback(0)
		}
	}()
	if err := fn(t); err != nil {
		return err
	}
	t.mu.Lock()
	aborted := t.aborted
	t.mu.Unlock()
	if aborted != nil {
		return aborted // fn ignored a failed call: nothing is committed
	}
	committed = true
	return nil
}

// ctxErr reports a done context: a deadline wraps [store.ErrUnavailable] (the
// call could not be served in time), a cancellation does not.
func ctxErr(ctx context.Context) error {
	err := ctx.Err()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("memstore: %w: %w", store.ErrUnavailable, err)
	default:
		return fmt.Errorf("memstore: %w", err)
	}
}

// read runs f under the read lock. f must not write.
func read[T any](s *Store, ctx context.Context, f func(d *db) (T, error)) (T, error) {
	var zero T
	if err := ctxErr(ctx); err != nil {
		return zero, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.d == nil {
		return zero, errClosed
	}
	return f(s.d)
}

// write runs f under the write lock as its own transaction: its writes are
// kept when it returns nil and undone otherwise.
func write[T any](s *Store, ctx context.Context, f func(d *db) (T, error)) (T, error) {
	var zero T
	if err := ctxErr(ctx); err != nil {
		return zero, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.d == nil {
		return zero, errClosed
	}
	v, err := atomic(s.d, f)
	s.d.commit() // after a failure the log is already empty
	return v, err
}

func write0(s *Store, ctx context.Context, f func(d *db) error) error {
	_, err := write(s, ctx, func(d *db) (struct{}, error) { return struct{}{}, f(d) })
	return err
}

// txView is the [store.Tx] handed to fn by [Store.InTx]. The store's write
// lock is held for its whole life; mu serializes its own methods and guards
// done.
type txView struct {
	d       *db
	mu      sync.Mutex
	done    bool
	aborted error // the failure that aborted the transaction
}

var _ store.Tx = (*txView)(nil)

// call runs f inside the transaction; a failing f undoes its own writes, and
// aborts the transaction unless it failed with ErrNotFound or ErrLimit.
func call[T any](t *txView, ctx context.Context, f func(d *db) (T, error)) (T, error) {
	var zero T
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return zero, errTxDone
	}
	if t.aborted != nil {
		return zero, t.aborted
	}
	if err := ctxErr(ctx); err != nil {
		t.aborted = err
		return zero, err
	}
	v, err := atomic(t.d, f)
	if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrLimit) {
		t.aborted = err
	}
	return v, err
}

func call0(t *txView, ctx context.Context, f func(d *db) error) error {
	_, err := call(t, ctx, func(d *db) (struct{}, error) { return struct{}{}, f(d) })
	return err
}
