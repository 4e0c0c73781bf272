// Package memstore is an in-memory implementation of the [store.Store]
// contract, in pure Go: it needs no cgo, no database and no files.
//
// Use it for test harnesses (a fresh store per test costs a few maps), for
// programs built with CGO_ENABLED=0 that can do without persistence, and for
// demos. It serves one process only: replicas do not share it, and its data
// is lost at [Store.Close] or when the process ends. For anything that must
// survive a restart or span several processes use
// [github.com/embedkit/embedkit/store/gormstore] (SQLite or PostgreSQL).
//
// It passes the same conformance suite as the GORM adapter
// ([github.com/embedkit/embedkit/store/storetest]):
//
//	storetest.Run(t, func(t *testing.T) store.Store {
//		st := memstore.New()
//		t.Cleanup(func() { st.Close() })
//		return st
//	})
//
// Mounting the handlers on it is the same as on any adapter:
//
//	st := memstore.New()
//	defer st.Close()
//	h := embedsession.NewHandler(st)
//
// # Transactions and concurrency
//
// One read-write lock guards the data. Reads outside a transaction share the
// read lock; each write outside a transaction, and each [Store.InTx], holds
// the write lock, so transactions run one at a time (serializable) and never
// fail for transient reasons: fn is called exactly once. A failed write, a
// failed Tx method and a failed or panicking fn are undone through an undo
// log, so nothing of them is kept. fn must not call the Store itself, only
// its Tx (the write lock is not reentrant). Waiting for the lock does not
// observe the context; a context already done when a call starts fails it.
// Because writers never overlap, the limits a write is given (persistent
// users, ephemeral users per minute, embed tenants) are exact with plain
// counters, and a write refused with [store.ErrLimit] is undone like any
// failed write.
//
// # Semantics
//
// Everything the [store] package documents holds, with the choices of the
// GORM adapter where the contract leaves room: IDs are int64 per table,
// increasing from 1 and never reused (an ID taken by a rolled-back write is
// skipped, as with PostgreSQL sequences); rows that reference a missing
// account, user, attribute or thread are refused with [store.ErrNotFound],
// as foreign keys would refuse them; times are returned in UTC without a
// monotonic reading; returned slices and JSON values are copies the caller
// may modify. Nothing in this package imports cgo: `CGO_ENABLED=0 go build`
// and `CGO_ENABLED=0 go vet` of the package succeed (TestNoCgo checks it).
package memstore
