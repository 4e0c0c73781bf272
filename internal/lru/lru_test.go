package lru_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/embedkit/embedkit/internal/lru"
)

func TestBoundedLRU(t *testing.T) {
	now := time.Unix(1000, 0)
	c := lru.New[string, int](3)
	for i := range 3 {
		c.Add(fmt.Sprint(i), i, time.Time{})
	}
	if _, ok := c.Get("0", now); !ok { // "0" becomes the most recent
		t.Fatal("0 missing")
	}
	c.Add("3", 3, time.Time{}) // evicts "1", the least recently used
	if _, ok := c.Get("1", now); ok {
		t.Error("1 was not evicted")
	}
	for _, k := range []string{"0", "2", "3"} {
		if _, ok := c.Get(k, now); !ok {
			t.Errorf("%s was evicted", k)
		}
	}
	if c.Len() != 3 {
		t.Errorf("Len = %d", c.Len())
	}
	c.Add("x", 9, now.Add(time.Second))
	if v, ok := c.Get("x", now); !ok || v != 9 {
		t.Error("x missing before it expires")
	}
	if _, ok := c.Get("x", now.Add(time.Second)); ok {
		t.Error("x returned once expired")
	}
	// Adding x evicted "0"; the expired x is gone too.
	c.Remove("2")
	if _, ok := c.Get("2", now); ok || c.Len() != 1 {
		t.Errorf("Remove: Len %d", c.Len())
	}
}

func TestConcurrentAddsStayBounded(t *testing.T) {
	c := lru.New[int, int](100)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 5000 {
				c.Add(g*10000+i, i, time.Time{})
				c.Get(g*10000+i/2, time.Now())
			}
		})
	}
	wg.Wait()
	if c.Len() != 100 {
		t.Errorf("Len = %d, want 100", c.Len())
	}
}
