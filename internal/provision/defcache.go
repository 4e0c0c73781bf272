package provision

import (
	"sync/atomic"
	"time"

	"github.com/embedkit/embedkit/internal/lru"
	"github.com/embedkit/embedkit/store"
)

// DefinitionCache remembers attribute and group definitions by scope and
// name for a TTL, so that a request naming only known definitions skips
// its [store.Catalog.Lookup] ([Request.KnownDefinitions]). Within the TTL,
// a definition deleted by another process may still be used: the user's
// value of it is stored and ignored by every read, as definition IDs are
// never reused. A nil *DefinitionCache caches nothing.
type DefinitionCache struct {
	ttl    time.Duration
	attrs  *lru.Cache[defKey, store.Attribute]
	groups *lru.Cache[defKey, store.Group]
	gen    atomic.Int64 // Forget starts a new generation: older entries are never found
}

type defKey struct {
	gen   int64
	scope store.Scope
	name  string
}

// NewDefinitionCache returns a cache of at most size definitions of each
// kind, each kept for ttl; nil when ttl is not positive.
func NewDefinitionCache(size int, ttl time.Duration) *DefinitionCache {
	if ttl <= 0 {
		return nil
	}
	return &DefinitionCache{ttl: ttl, attrs: lru.New[defKey, store.Attribute](size), groups: lru.New[defKey, store.Group](size)}
}

// Known returns the cached definitions of every attribute and group name of
// r, or nil if one is missing or r defines any (then the transaction reads
// them). The scope must be known: in creator mode, the embed tenant's
// (r.KnownEmbedTenant).
func (c *DefinitionCache) Known(accountID int64, r Request) *store.LookupResult {
	if c == nil {
		return nil
	}
	scope := store.TenantWide(accountID)
	if r.CreatorMode {
		scope.EmbedTenantID = r.KnownEmbedTenant.ID
	}
	if scope.EmbedTenantID == 0 && r.CreatorMode || len(r.AttributeDefinitions)+len(r.GroupDefinitions) > 0 || r.InternalID != "" {
		return nil
	}
	gen, now := c.gen.Load(), time.Now()
	var k store.LookupResult
	for _, in := range r.Attributes {
		a, ok := c.attrs.Get(defKey{gen, scope, in.Name}, now)
		if !ok {
			return nil
		}
		k.Attributes = append(k.Attributes, a)
	}
	for _, n := range r.Groups {
		g, ok := c.groups.Get(defKey{gen, scope, n}, now)
		if !ok {
			return nil
		}
		k.Groups = append(k.Groups, g)
	}
	return &k
}

// Generation returns the current generation, to be passed to Add with what
// a request read.
func (c *DefinitionCache) Generation() int64 {
	if c == nil {
		return 0
	}
	return c.gen.Load()
}

// Add remembers the definitions a committed request read (Result.Found,
// which may be nil), unless Forget ran since gen was taken.
func (c *DefinitionCache) Add(gen int64, found *store.LookupResult) {
	if c == nil || found == nil {
		return
	}
	exp := time.Now().Add(c.ttl)
	for _, a := range found.Attributes {
		c.attrs.Add(defKey{gen, a.Scope, a.Name}, a, exp)
	}
	for _, g := range found.Groups {
		c.groups.Add(defKey{gen, g.Scope, g.Name}, g, exp)
	}
}

// Forget forgets every cached definition, as after a deletion.
func (c *DefinitionCache) Forget() {
	if c != nil {
		c.gen.Add(1)
	}
}
