package gormstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/mattn/go-sqlite3"
	"gorm.io/gorm"

	"github.com/embedkit/embedkit/store"
)

// opError is a driver error translated for callers: it wraps the store
// sentinel (kind, may be nil) and the driver's error, so errors.Is works for
// both.
type opError struct {
	op    string
	kind  error // a store sentinel or nil
	err   error
	retry bool // a transaction that failed on it may succeed when run again
}

func (e *opError) Error() string {
	if e.kind == nil {
		return "gormstore: " + e.op + ": " + e.err.Error()
	}
	if e.err == nil {
		return "gormstore: " + e.op + ": " + e.kind.Error()
	}
	return "gormstore: " + e.op + ": " + e.kind.Error() + ": " + e.err.Error()
}

func (e *opError) Unwrap() []error {
	var errs []error
	if e.kind != nil {
		errs = append(errs, e.kind)
	}
	if e.err != nil {
		errs = append(errs, e.err)
	}
	return errs
}

// newErr reports a contract condition (not found, conflict, limit) found by
// the adapter itself.
func newErr(op string, kind error) error { return &opError{op: op, kind: kind} }

// wrapErr translates a driver or GORM error:
//
//   - unique or primary-key violation: [store.ErrConflict];
//   - foreign-key violation (a referenced row is missing): [store.ErrNotFound];
//   - record not found: [store.ErrNotFound];
//   - SQLite busy or locked, PostgreSQL serialization failure or deadlock:
//     [store.ErrUnavailable], retried by [Store.InTx];
//   - connection refused, lost or closed, pool or statement deadline, too many
//     connections, server shutdown: [store.ErrUnavailable];
//   - a canceled context: returned wrapped as is (errors.Is(err,
//     context.Canceled) holds).
//
// Anything else is wrapped without a sentinel.
func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var oe *opError
	if errors.As(err, &oe) {
		return err
	}
	kind, retry := classify(err)
	return &opError{op: op, kind: kind, err: err, retry: retry}
}

func classify(err error) (kind error, retry bool) {
	var se sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code {
		case sqlite3.ErrBusy, sqlite3.ErrLocked:
			return store.ErrUnavailable, true
		case sqlite3.ErrConstraint:
			switch se.ExtendedCode {
			case sqlite3.ErrConstraintUnique, sqlite3.ErrConstraintPrimaryKey:
				return store.ErrConflict, false
			case sqlite3.ErrConstraintForeignKey:
				return store.ErrNotFound, false
			}
			return nil, false
		case sqlite3.ErrCantOpen, sqlite3.ErrIoErr, sqlite3.ErrFull, sqlite3.ErrNotADB, sqlite3.ErrCorrupt:
			return store.ErrUnavailable, false
		}
		return nil, false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "23505":
			return store.ErrConflict, false
		case pe.Code == "23503":
			return store.ErrNotFound, false
		case pe.Code == "40001", pe.Code == "40P01":
			return store.ErrUnavailable, true
		case pe.Code == "57014": // query_canceled (statement timeout)
			return store.ErrUnavailable, false
		case len(pe.Code) == 5 && (pe.Code[:2] == "08" || pe.Code[:2] == "53" || pe.Code[:2] == "57"):
			// connection exception, insufficient resources, operator intervention
			return store.ErrUnavailable, false
		}
		return nil, false
	}
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound), errors.Is(err, sql.ErrNoRows):
		return store.ErrNotFound, false
	case errors.Is(err, context.Canceled):
		return nil, false
	case errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err):
		return store.ErrUnavailable, false
	case errors.Is(err, sql.ErrConnDone), errors.Is(err, sql.ErrTxDone),
		errors.Is(err, driver.ErrBadConn), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, net.ErrClosed), errors.Is(err, pgconn.ErrConnClosed):
		return store.ErrUnavailable, false
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return store.ErrUnavailable, false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return store.ErrUnavailable, false
	}
	if err.Error() == "sql: database is closed" {
		return store.ErrUnavailable, false
	}
	return nil, false
}

// isRetryable reports whether a transaction that failed with err may succeed
// when run again.
func isRetryable(err error) bool {
	var oe *opError
	return errors.As(err, &oe) && oe.retry
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }
