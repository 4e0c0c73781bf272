// Package keyrevoke tells every API-key cache of this process that a key was
// revoked or changed (its admin flag), so that the process that revokes or
// changes a key serves it as stored at once, while other processes notice
// within their cache's lifetime.
//
// A cache reads [Gen] before it looks a key up in the store and keeps that
// generation with the cached entry; [Valid] then reports whether the key was
// revoked since. [Forget] is called after the revocation is committed. The
// record is bounded: past maxKeys revocations it is cleared and every entry
// cached before is treated as stale.
package keyrevoke

import (
	"sync"
	"sync/atomic"
)

// maxKeys bounds the revocations remembered one by one.
const maxKeys = 4096

var (
	gen   atomic.Uint64 // bumped by every Forget
	mu    sync.Mutex
	floor uint64                    // entries cached at a generation below it are stale
	keys  = make(map[string]uint64) // key hash → generation of its revocation
)

// Gen returns the current generation. Read it before looking a key up.
func Gen() uint64 { return gen.Load() }

// Forget records that the key with this SHA-256 hash was revoked: entries
// cached at an earlier generation are no longer [Valid].
func Forget(hash []byte) {
	mu.Lock()
	defer mu.Unlock()
	n := gen.Add(1)
	if len(keys) >= maxKeys {
		keys = make(map[string]uint64)
		floor = n
	}
	keys[string(hash)] = n
}

// Valid reports whether an entry for the key with this hash, cached at
// generation g (read with [Gen] before the lookup), may still be served.
func Valid(hash string, g uint64) bool {
	if gen.Load() == g {
		return true // nothing revoked since
	}
	mu.Lock()
	defer mu.Unlock()
	if g < floor {
		return false
	}
	r, ok := keys[hash]
	return !ok || r <= g
}
