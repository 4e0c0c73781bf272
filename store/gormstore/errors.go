package gormstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"reflect"
	"strings"
	"syscall"

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
	switch {
	case errors.Is(err, gorm.ErrDuplicatedKey):
		return store.ErrConflict, false
	case errors.Is(err, gorm.ErrForeignKeyViolated):
		return store.ErrNotFound, false
	case errors.Is(err, gorm.ErrRecordNotFound), errors.Is(err, sql.ErrNoRows):
		return store.ErrNotFound, false
	}
	// PostgreSQL (pgx's *pgconn.PgError, and lib/pq) reports its SQLSTATE.
	var pe interface{ SQLState() string }
	if errors.As(err, &pe) {
		switch code := pe.SQLState(); {
		case code == "23505":
			return store.ErrConflict, false
		case code == "23503":
			return store.ErrNotFound, false
		case code == "40001", code == "40P01":
			return store.ErrUnavailable, true
		case len(code) == 5 && (code[:2] == "08" || code[:2] == "53" || code[:2] == "57"):
			// connection exception, insufficient resources, operator
			// intervention (including statement timeout, 57014)
			return store.ErrUnavailable, false
		}
		return nil, false
	}
	if code, ok := sqliteCode(err); ok {
		switch code & 0xff {
		case sqliteBusy, sqliteLocked:
			return store.ErrUnavailable, true
		case sqliteConstraint:
			switch code {
			case sqliteConstraintUnique, sqliteConstraintPrimaryKey:
				return store.ErrConflict, false
			case sqliteConstraintForeignKey:
				return store.ErrNotFound, false
			}
			return nil, false
		case sqliteCantOpen, sqliteIOErr, sqliteFull, sqliteNotADB, sqliteCorrupt:
			return store.ErrUnavailable, false
		}
		return nil, false
	}
	switch {
	case errors.Is(err, context.Canceled):
		return nil, false
	case errors.Is(err, context.DeadlineExceeded):
		return store.ErrUnavailable, false
	case errors.Is(err, sql.ErrConnDone), errors.Is(err, sql.ErrTxDone), errors.Is(err, gorm.ErrInvalidTransaction),
		errors.Is(err, driver.ErrBadConn), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, net.ErrClosed):
		return store.ErrUnavailable, false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return store.ErrUnavailable, false
	}
	// Driver errors that carry no code: a closed database/sql pool, pgx's
	// closed or timed-out connection, a failed connect.
	msg := err.Error()
	for _, s := range []string{"sql: database is closed", "conn closed", "timeout", "failed to connect", "connection refused"} {
		if strings.Contains(msg, s) {
			return store.ErrUnavailable, false
		}
	}
	return nil, false
}

// SQLite result codes (https://www.sqlite.org/rescode.html).
const (
	sqliteBusy                 = 5
	sqliteLocked               = 6
	sqliteIOErr                = 10
	sqliteCorrupt              = 11
	sqliteFull                 = 13
	sqliteCantOpen             = 14
	sqliteConstraint           = 19
	sqliteNotADB               = 26
	sqliteConstraintForeignKey = 787
	sqliteConstraintPrimaryKey = 1555
	sqliteConstraintUnique     = 2067
)

// sqliteCode returns the extended result code of a SQLite driver error
// without importing the driver (which needs cgo): mattn/go-sqlite3's Error,
// as gorm.io/driver/sqlite's own error translation, is read through its
// exported fields Code and ExtendedCode. The pure-Go drivers built on
// modernc.org/sqlite report Code() int.
func sqliteCode(err error) (int, bool) {
	var coder interface{ Code() int }
	if errors.As(err, &coder) {
		return coder.Code(), true
	}
	v := reflect.ValueOf(err)
	if v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	if v.Kind() == reflect.Struct && strings.Contains(v.Type().PkgPath(), "sqlite") {
		code, ext := v.FieldByName("Code"), v.FieldByName("ExtendedCode")
		if code.IsValid() && code.CanInt() {
			if ext.IsValid() && ext.CanInt() && ext.Int() != 0 {
				return int(ext.Int()), true
			}
			return int(code.Int()), true
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		if e := u.Unwrap(); e != nil {
			return sqliteCode(e)
		}
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

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }
