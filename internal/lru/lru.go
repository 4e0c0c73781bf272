// Package lru is a size-bounded in-memory cache with least-recently-used
// eviction and optional expiry per entry, so that no cache of embedkit
// grows with what clients send.
package lru

import (
	"container/list"
	"sync"
	"time"
)

// Cache maps keys to values, holding at most a fixed number of entries: an
// Add beyond it evicts the least recently used entry. A Cache is safe for
// concurrent use.
type Cache[K comparable, V any] struct {
	mu    sync.Mutex
	max   int
	order list.List // of *entry[K, V]; the front is the most recently used
	byKey map[K]*list.Element
}

type entry[K comparable, V any] struct {
	key     K
	val     V
	expires time.Time // zero: never
}

// New returns a cache of at most size entries (at least 1).
func New[K comparable, V any](size int) *Cache[K, V] {
	return &Cache[K, V]{max: max(size, 1), byKey: make(map[K]*list.Element)}
}

// Get returns the value of key unless it is missing or expired at now (an
// expired entry is dropped).
func (c *Cache[K, V]) Get(key K, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var zero V
	el, ok := c.byKey[key]
	if !ok {
		return zero, false
	}
	e := el.Value.(*entry[K, V])
	if !e.expires.IsZero() && !now.Before(e.expires) {
		c.order.Remove(el)
		delete(c.byKey, key)
		return zero, false
	}
	c.order.MoveToFront(el)
	return e.val, true
}

// Add sets the value of key, valid until expires (the zero time: until it
// is evicted), evicting the least recently used entry when the cache is
// full.
func (c *Cache[K, V]) Add(key K, val V, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		e := el.Value.(*entry[K, V])
		e.val, e.expires = val, expires
		c.order.MoveToFront(el)
		return
	}
	if c.order.Len() >= c.max {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.byKey, oldest.Value.(*entry[K, V]).key)
	}
	c.byKey[key] = c.order.PushFront(&entry[K, V]{key: key, val: val, expires: expires})
}

// Remove drops key.
func (c *Cache[K, V]) Remove(key K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		c.order.Remove(el)
		delete(c.byKey, key)
	}
}

// Len returns the number of entries, expired ones included until they are
// looked up or evicted.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
