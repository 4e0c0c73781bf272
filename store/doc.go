// Package store defines the storage contract of embedkit: the small
// interfaces the HTTP handlers consume and the value types they exchange.
//
// The contract, which every adapter honours and [storetest.Run] checks:
//
//   - Every method takes a [context.Context] first and returns promptly once it
//     is done; a method that cannot reach its database in time returns an error
//     wrapping [ErrUnavailable].
//   - Secrets (session ids, tokens, API keys) reach the store only as hashes.
//   - Missing rows are reported with [ErrNotFound], unique-name clashes with
//     [ErrConflict], and a limit a write was given with [ErrLimit]; adapters wrap their driver errors into
//     these sentinels so callers use errors.Is.
//   - A request runs in one transaction ([Store.InTx]): either every write of
//     fn is committed or none is. A call that fails with anything but
//     [ErrNotFound] or [ErrLimit] aborts the transaction on every adapter,
//     even when fn ignores it. Adapters retry transient failures (SQLite's
//     busy state, serialization failures) themselves.
//   - The limit of persistent external users is the account's:
//     [Account.ExternalUserLimit].
//   - Every method is a meaning, not a plan: an adapter chooses its own
//     statements, and how many a method costs is the adapter's to document
//     and test.
//
// Hosts set their tenants up (accounts, API keys, deployments, agents,
// account-wide definitions) with [github.com/embedkit/embedkit/store/operator],
// which works on any adapter.
//
// Adapters: [github.com/embedkit/embedkit/store/gormstore] (SQLite and
// PostgreSQL through the host's GORM handle; DSN conveniences in its
// sqlite and postgres sub-packages) and
// [github.com/embedkit/embedkit/store/memstore] (in memory, no cgo). Both
// pass [github.com/embedkit/embedkit/store/storetest]. docs/storage.md
// describes the tables, migrations and read replicas.
package store
