package keyrevoke

import (
	"fmt"
	"testing"
)

func TestForget(t *testing.T) {
	a, b := "hash-a", "hash-b"
	g := Gen()
	if !Valid(a, g) {
		t.Fatal("an entry is stale with nothing revoked")
	}
	Forget([]byte(a))
	if Valid(a, g) {
		t.Error("a key revoked after it was cached is still valid")
	}
	if !Valid(b, g) {
		t.Error("another key became stale")
	}
	if !Valid(a, Gen()) {
		t.Error("a key looked up again after its revocation (re-created) is stale")
	}
}

func TestForgetBounded(t *testing.T) {
	g := Gen()
	for i := range maxKeys + 1 {
		Forget(fmt.Appendf(nil, "k%d", i))
	}
	mu.Lock()
	n := len(keys)
	mu.Unlock()
	if n > maxKeys {
		t.Errorf("%d revocations remembered, want at most %d", n, maxKeys)
	}
	if Valid("unrelated", g) {
		t.Error("an entry cached before the record was cleared is still valid")
	}
	if !Valid("unrelated", Gen()) {
		t.Error("an entry cached after the clear is stale")
	}
}
