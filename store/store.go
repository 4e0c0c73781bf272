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
	InTx(ctx context.Context, fn func(tx Tx) error) error
	// Close releases the adapter's resources. Calls after Close fail.
	Close() error
}

// Tx is everything a handler may do inside one transaction.
type Tx interface {
	Accounts
	Users
	Catalog
	Provisioning
	Sessions
	Threads
	Quotas
}
