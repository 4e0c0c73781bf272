package store

import "context"

// Store is a storage adapter. Its embedded [Tx] runs each method as a single
// statement (or an adapter-chosen transaction) outside any caller transaction.
// A Store is safe for concurrent use.
type Store interface {
	Tx
	// InTx runs fn in one database transaction and commits it if and only if
	// fn returns nil. fn must use only the Tx it is given. fn may be called
	// more than once when the adapter retries a transient failure (busy
	// database, serialization failure), so it must not have side effects
	// outside the transaction. The error of fn is returned unchanged.
	//
	// A Tx method that fails with an error other than [ErrNotFound] or
	// [ErrLimit] (a conflict, an unavailable database, an ended context)
	// aborts the transaction, as a failed SQL statement does on
	// PostgreSQL: the later calls of the Tx fail, and InTx returns that
	// error and commits nothing, even when fn ignores it and returns nil.
	// ErrNotFound and ErrLimit change nothing and leave the transaction
	// usable, except that a write refused because a row it references is
	// missing (ErrNotFound from a foreign key) may abort it too.
	InTx(ctx context.Context, fn func(tx Tx) error) error
	// Close releases the adapter's resources. Calls after Close fail.
	Close() error
}

// Tx is everything a handler may do inside one transaction.
type Tx interface {
	Accounts
	Users
	Catalog
	Sessions
	Threads
	Expiry
}
