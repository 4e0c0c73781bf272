package memstore

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/embedkit/embedkit/store"
)

// Keys of the tables.
type (
	// nameKey is a name within an account (external id, username, tenant).
	nameKey struct {
		accountID int64
		name      string
	}
	// scopeKey is a catalog name within a scope.
	scopeKey struct {
		scope store.Scope
		name  string
	}
	depKey   struct{ accountID, id int64 }
	agentKey struct {
		accountID int64
		id        string
	}
	threadKey struct {
		accountID int64
		chatID    string
	}
)

// session is a stored session id: its grant and whether it was exchanged.
type session struct {
	grant store.Session
	used  bool
}

// db holds every table and index of the store. Values are stored by value
// and never modified in place: a change stores a new value with [set] or
// [nset], which logs how to undo it. The caller holds the write lock for
// any mutation and the read lock (at least) for any read.
//
// IDs come from per-table counters that, like PostgreSQL sequences, are not
// rolled back: an ID taken by an undone write is never reused, so IDs only
// grow and the per-scope ID lists stay sorted by appending.
type db struct {
	clock store.Clock
	undo  []func() // how to undo the writes of the running transaction, in order

	lastAccountID, lastUserID, lastTenantID, lastGroupID, lastAttributeID int64

	accounts      map[int64]store.Account
	accountByName map[string]int64
	persistent    map[int64]int // account → number of persistent external users
	apiKeys       map[string]store.APIKey
	deployments   map[depKey]store.Deployment
	agents        map[agentKey]store.Agent

	users      map[int64]store.User
	userByExt  map[nameKey]int64
	userByInt  map[nameKey]int64
	ephemerals map[int64]struct{} // IDs of ephemeral users, for DeleteExpired

	tenants      map[int64]store.EmbedTenant
	tenantByName map[nameKey]int64

	groups         map[int64]store.Group
	groupByName    map[scopeKey]int64
	groupIDs       map[store.Scope][]int64 // increasing IDs, for keyset pages
	attributes     map[int64]store.Attribute
	attributeByKey map[scopeKey]int64
	attributeIDs   map[store.Scope][]int64

	values      map[int64]map[int64]json.RawMessage // user → attribute → value
	valueUsers  map[int64]map[int64]struct{}        // attribute → users with a value
	members     map[int64]map[int64]struct{}        // user → groups
	groupUsers  map[int64]map[int64]struct{}        // group → users
	sessions    map[string]session                  // by hash
	tokens      map[string]store.Session            // by hash
	userSess    map[int64]map[string]struct{}       // user → session hashes
	userTokens  map[int64]map[string]struct{}       // user → token hashes
	threads     map[threadKey]store.Thread
	userThreads map[int64]map[threadKey]struct{}
	messages    map[threadKey]map[string]store.ThreadMessage
	// ephemeralCounts counts the ephemeral users created under a limit per
	// account and clock minute.
	ephemeralCounts map[minuteKey]int
}

func newDB(clock store.Clock) *db {
	return &db{
		clock:           clock,
		accounts:        map[int64]store.Account{},
		accountByName:   map[string]int64{},
		persistent:      map[int64]int{},
		apiKeys:         map[string]store.APIKey{},
		deployments:     map[depKey]store.Deployment{},
		agents:          map[agentKey]store.Agent{},
		users:           map[int64]store.User{},
		userByExt:       map[nameKey]int64{},
		userByInt:       map[nameKey]int64{},
		ephemerals:      map[int64]struct{}{},
		tenants:         map[int64]store.EmbedTenant{},
		tenantByName:    map[nameKey]int64{},
		groups:          map[int64]store.Group{},
		groupByName:     map[scopeKey]int64{},
		groupIDs:        map[store.Scope][]int64{},
		attributes:      map[int64]store.Attribute{},
		attributeByKey:  map[scopeKey]int64{},
		attributeIDs:    map[store.Scope][]int64{},
		values:          map[int64]map[int64]json.RawMessage{},
		valueUsers:      map[int64]map[int64]struct{}{},
		members:         map[int64]map[int64]struct{}{},
		groupUsers:      map[int64]map[int64]struct{}{},
		sessions:        map[string]session{},
		tokens:          map[string]store.Session{},
		userSess:        map[int64]map[string]struct{}{},
		userTokens:      map[int64]map[string]struct{}{},
		threads:         map[threadKey]store.Thread{},
		userThreads:     map[int64]map[threadKey]struct{}{},
		messages:        map[threadKey]map[string]store.ThreadMessage{},
		ephemeralCounts: map[minuteKey]int{},
	}
}

// atomic runs f; when f fails, the writes f made are undone (and only those:
// earlier writes of the transaction stay), like a failed SQL statement.
func atomic[T any](d *db, f func(d *db) (T, error)) (T, error) {
	mark := len(d.undo)
	v, err := f(d)
	if err != nil {
		d.rollback(mark)
	}
	return v, err
}

// rollback undoes the writes logged since mark, newest first.
func (d *db) rollback(mark int) {
	for i := len(d.undo) - 1; i >= mark; i-- {
		d.undo[i]()
		d.undo[i] = nil
	}
	d.undo = d.undo[:mark]
}

// commit forgets the undo log: the writes stay.
func (d *db) commit() {
	clear(d.undo)
	d.undo = d.undo[:0]
}

// set stores m[k] = v and logs its undo.
func set[K comparable, V any](d *db, m map[K]V, k K, v V) {
	old, had := m[k]
	m[k] = v
	d.undo = append(d.undo, func() {
		if had {
			m[k] = old
		} else {
			delete(m, k)
		}
	})
}

// del deletes m[k] and logs its undo.
func del[K comparable, V any](d *db, m map[K]V, k K) {
	old, had := m[k]
	if !had {
		return
	}
	delete(m, k)
	d.undo = append(d.undo, func() { m[k] = old })
}

// nset stores m[a][b] = v and logs its undo. Inner maps are never empty:
// they are created on first use and deleted with their last entry.
func nset[A, B comparable, V any](d *db, m map[A]map[B]V, a A, b B, v V) {
	inner, ok := m[a]
	if !ok {
		inner = map[B]V{}
		m[a] = inner
	}
	old, had := inner[b]
	inner[b] = v
	d.undo = append(d.undo, func() {
		// Undone newest first, so m[a] holds b here.
		in := m[a]
		if had {
			in[b] = old
			return
		}
		delete(in, b)
		if len(in) == 0 {
			delete(m, a)
		}
	})
}

// ndel deletes m[a][b] and logs its undo.
func ndel[A, B comparable, V any](d *db, m map[A]map[B]V, a A, b B) {
	inner, ok := m[a]
	if !ok {
		return
	}
	old, had := inner[b]
	if !had {
		return
	}
	delete(inner, b)
	if len(inner) == 0 {
		delete(m, a)
	}
	d.undo = append(d.undo, func() {
		in, ok := m[a]
		if !ok {
			in = map[B]V{}
			m[a] = in
		}
		in[b] = old
	})
}

// appendID appends id, greater than every ID of the list, to m[s].
func appendID(d *db, m map[store.Scope][]int64, s store.Scope, id int64) {
	// append may write past the old slice's length in its backing array;
	// the old header logged by set still sees only its own elements, and
	// removeID never writes in place, so no logged header is disturbed.
	set(d, m, s, append(m[s], id))
}

// removeID removes id from the sorted list m[s], into a new backing array.
func removeID(d *db, m map[store.Scope][]int64, s store.Scope, id int64) {
	ids := m[s]
	i, found := slices.BinarySearch(ids, id)
	if !found {
		return
	}
	if len(ids) == 1 {
		del(d, m, s)
		return
	}
	set(d, m, s, slices.Concat(ids[:i:i], ids[i+1:]))
}

// page returns at most limit IDs of the sorted ids greater than after.
func page(ids []int64, after int64, limit int) []int64 {
	i, found := slices.BinarySearch(ids, after)
	if found {
		i++
	}
	return ids[i:min(len(ids), i+limit)]
}

// now returns t, or the clock's time when t is zero.
func (d *db) now(t time.Time) time.Time {
	if t.IsZero() {
		return norm(d.clock())
	}
	return norm(t)
}

// norm drops the monotonic reading and the location of t, as a round trip
// through a database does; the zero time stays zero.
func norm(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Round(0).UTC()
}

// clone copies a JSON value; nil stays nil.
func clone(v json.RawMessage) json.RawMessage {
	if v == nil {
		return nil
	}
	return slices.Clone(v)
}

func notFound(op string) error { return fmt.Errorf("memstore: %s: %w", op, store.ErrNotFound) }
func conflict(op string) error { return fmt.Errorf("memstore: %s: %w", op, store.ErrConflict) }

// sortedKeys returns the keys of m in increasing order.
func sortedKeys[K int64 | string, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// zeroTime asks [db.now] for the clock's time.
var zeroTime time.Time
