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
	// ErrLimit reports that a write would pass a limit it was given: the
	// account's persistent external users or new ephemeral users per
	// minute ([UserUpsert]), or its embed tenants
	// ([Catalog.EnsureEmbedTenant]).
	ErrLimit = errors.New("store: limit reached")
	// ErrUnavailable reports that the database could not be reached or did not
	// answer in time. Nothing of the failed call was committed.
	ErrUnavailable = errors.New("store: database unavailable")
)
