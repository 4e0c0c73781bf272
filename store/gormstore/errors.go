package gormstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"gorm.io/gorm"

	"github.com/embedkit/embedkit/store"
)

// opError is an error of the store: it wraps a store sentinel (kind, may
// be nil) and the driver's error, so errors.Is works for both.
type opError struct {
	op    string
	kind  error
	err   error
	retry bool // a transaction that failed on it may succeed when run again
}

func (e *opError) Error() string {
	msg := "gormstore: " + e.op
	for _, err := range e.Unwrap() {
		msg += ": " + err.Error()
	}
	return msg
}

func (e *opError) Unwrap() []error {
	var errs []error
	for _, err := range []error{e.kind, e.err} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// newErr reports a contract condition (not found, conflict, limit) found by
// the adapter itself.
func newErr(op string, kind error) error { return &opError{op: op, kind: kind} }

// wrapErr translates a driver or GORM error: a unique or primary-key
// violation is [store.ErrConflict], a foreign-key violation (a referenced
// row is missing) [store.ErrNotFound]; SQLite busy or locked and
// PostgreSQL serialization failure or deadlock are [store.ErrUnavailable]
// and retried by [Store.InTx]; a lost, refused or closed connection, a
// deadline, a server shutting down are [store.ErrUnavailable]; a canceled
// context is wrapped as is. Anything else is wrapped without a sentinel.
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
	switch {
	case errors.Is(err, gorm.ErrDuplicatedKey):
		return store.ErrConflict, false
	case errors.Is(err, gorm.ErrForeignKeyViolated), errors.Is(err, gorm.ErrRecordNotFound):
		return store.ErrNotFound, false
	}
	// PostgreSQL (pgx's *pgconn.PgError, lib/pq) reports its SQLSTATE.
	var pe interface{ SQLState() string }
	if errors.As(err, &pe) {
		switch code := pe.SQLState(); {
		case code == "23505":
			return store.ErrConflict, false
		case code == "23503":
			return store.ErrNotFound, false
		case code == "40001", code == "40P01":
			return store.ErrUnavailable, true
		case code[:2] == "08" || code[:2] == "53" || code[:2] == "57":
			// connection exception, insufficient resources, operator
			// intervention (statement timeout, shutdown)
			return store.ErrUnavailable, false
		}
		return nil, false
	}
	if code, ok := sqliteCode(err); ok {
		switch {
		case code == 1555 || code == 2067: // SQLITE_CONSTRAINT_PRIMARYKEY, _UNIQUE
			return store.ErrConflict, false
		case code == 787: // SQLITE_CONSTRAINT_FOREIGNKEY
			return store.ErrNotFound, false
		case code&0xff == 5 || code&0xff == 6: // SQLITE_BUSY, SQLITE_LOCKED
			return store.ErrUnavailable, true
		case code&0xff == 10 || code&0xff == 13 || code&0xff == 14: // IOERR, FULL, CANTOPEN
			return store.ErrUnavailable, false
		}
		return nil, false
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return nil, false
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, sql.ErrConnDone), errors.Is(err, sql.ErrTxDone),
		errors.Is(err, gorm.ErrInvalidTransaction), errors.Is(err, driver.ErrBadConn), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed), errors.As(err, &ne):
		return store.ErrUnavailable, false
	}
	// Errors that carry no code: a closed database/sql pool, pgx's closed
	// or timed-out connection, a failed connect.
	for _, s := range []string{"sql: database is closed", "conn closed", "timeout", "failed to connect", "connection refused"} {
		if strings.Contains(err.Error(), s) {
			return store.ErrUnavailable, false
		}
	}
	return nil, false
}

// sqliteCode returns the extended result code of a SQLite error
// (https://www.sqlite.org/rescode.html) without importing the driver,
// which needs cgo: mattn/go-sqlite3's Error is read through its exported
// fields, as gorm.io/driver/sqlite's error translation does; pure-Go
// drivers report Code() int.
func sqliteCode(err error) (int, bool) {
	var coder interface{ Code() int }
	if errors.As(err, &coder) {
		return coder.Code(), true
	}
	if strings.Contains(fmt.Sprintf("%T", err), "sqlite") {
		var m struct{ Code, ExtendedCode int }
		if b, jerr := json.Marshal(err); jerr == nil && json.Unmarshal(b, &m) == nil && m.Code != 0 {
			return max(m.ExtendedCode, m.Code), true
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return sqliteCode(u.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if c, ok := sqliteCode(e); ok {
				return c, true
			}
		}
	}
	return 0, false
}

// isRetryable reports whether a transaction that failed with err may succeed
// when run again.
func isRetryable(err error) bool {
	var oe *opError
	return errors.As(err, &oe) && oe.retry
}
