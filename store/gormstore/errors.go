package gormstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"gorm.io/gorm"

	"github.com/embedkit/embedkit/store"
)

// opError is an error of the store: "gormstore: <op>: " and the sentinel
// of the contract, if any, then the driver's error.
type opError struct{ error }

func (e opError) Unwrap() error { return e.error }

// newErr reports a condition of the contract the adapter found itself.
func newErr(op string, kind error) error { return opError{fmt.Errorf("gormstore: %s: %w", op, kind)} }

// wrapErr translates a driver or GORM error (see txn.do for the dialect's
// translation of constraint violations): a duplicate key is
// [store.ErrConflict], a missing referenced row [store.ErrNotFound]; busy,
// locked, serialization failure or deadlock (retried by [Store.InTx]) and a
// lost connection, deadline or shutdown are [store.ErrUnavailable].
func wrapErr(op string, err error) error {
	if err == nil || errors.As(err, new(opError)) {
		return err
	}
	if kind, _ := classify(err); kind != nil {
		return opError{fmt.Errorf("gormstore: %s: %w: %w", op, kind, err)}
	}
	return opError{fmt.Errorf("gormstore: %s: %w", op, err)}
}

func classify(err error) (kind error, retry bool) {
	switch {
	case errors.Is(err, errGroupAborted):
		return store.ErrUnavailable, true
	case errors.Is(err, gorm.ErrDuplicatedKey):
		return store.ErrConflict, false
	case errors.Is(err, gorm.ErrForeignKeyViolated), errors.Is(err, gorm.ErrRecordNotFound):
		return store.ErrNotFound, false
	}
	// PostgreSQL (pgx's *pgconn.PgError, lib/pq) reports its SQLSTATE.
	var pe interface{ SQLState() string }
	if errors.As(err, &pe) {
		switch code := pe.SQLState(); {
		case code == "40001", code == "40P01":
			return store.ErrUnavailable, true
		case code[:2] == "08" || code[:2] == "53" || code[:2] == "57": // connection, resources, operator intervention
			return store.ErrUnavailable, false
		}
		return nil, false
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "database is locked"), strings.Contains(msg, "database table is locked"):
		return store.ErrUnavailable, true // SQLite busy or locked
	case errors.Is(err, context.Canceled):
		return nil, false
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, sql.ErrConnDone), errors.Is(err, sql.ErrTxDone),
		errors.Is(err, gorm.ErrInvalidTransaction), errors.Is(err, driver.ErrBadConn), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed), errors.As(err, new(net.Error)):
		return store.ErrUnavailable, false
	}
	// Errors without a code: a closed pool or connection, SQLite's file.
	for _, s := range []string{"sql: database is closed", "conn closed", "timeout", "failed to connect", "connection refused",
		"disk I/O error", "database or disk is full", "unable to open database file", "file is not a database"} {
		if strings.Contains(msg, s) {
			return store.ErrUnavailable, false
		}
	}
	return nil, false
}

// isRetryable reports whether a transaction that failed with err may succeed again.
func isRetryable(err error) bool {
	_, retry := classify(err)
	return retry
}
