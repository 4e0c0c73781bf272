package store

import "errors"

// Sentinel errors shared by every adapter. Adapters wrap them (with %w) so that
// callers can test with errors.Is.
var (
	// ErrNotFound reports a missing, expired, revoked or already used row.
	ErrNotFound = errors.New("store: not found")
	// ErrConflict reports a clash with an existing row: a duplicate key, or an
	// attribute definition whose stored type differs from the requested one.
	ErrConflict = errors.New("store: conflict")
	// ErrLimit reports that creating (or making persistent) an external user
	// would exceed the account's limit of persistent external users, or
	// that a quota counter ([Quotas.TakeQuota]) is full.
	ErrLimit = errors.New("store: limit reached")
	// ErrUnavailable reports that the database could not be reached or did not
	// answer in time. Nothing of the failed call was committed.
	ErrUnavailable = errors.New("store: database unavailable")
)
