package journal

import (
	"fmt"
	"sync"
	"testing"
)

func TestActionCacheKeepsRecentKeysWithinItsBound(t *testing.T) {
	c := newActionCache(4)
	for i := range 8 { // 0–3 become the previous generation
		c.put("", fmt.Sprint(i), fmt.Sprint("a", i))
	}
	if a, ok := c.get("", "0"); !ok || a != "a0" { // found in the previous generation, and kept
		t.Fatalf("0: %q %v", a, ok)
	}
	for i := 8; i < 11; i++ {
		c.put("", fmt.Sprint(i), fmt.Sprint("a", i))
	}
	if _, ok := c.get("", "1"); ok {
		t.Error("1, never used again, outlived two generations")
	}
	for _, k := range []string{"0", "5", "10"} {
		if a, ok := c.get("", k); !ok || a != "a"+k {
			t.Errorf("%s: %q %v, want a%s", k, a, ok, k)
		}
	}
	if a, ok := c.get("other", "7"); ok {
		t.Errorf("another tenant's key 7: %q", a)
	}
	if n := len(c.cur) + len(c.prev); n > 8 {
		t.Errorf("%d entries, want at most 2×4", n)
	}
}

func TestActionCacheConcurrentUse(t *testing.T) {
	c := newActionCache(64)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				k := fmt.Sprint(g, ":", i%100)
				c.put("t", k, k)
				if a, ok := c.get("t", k); ok && a != k {
					t.Errorf("%s: got %s", k, a)
				}
			}
		})
	}
	wg.Wait()
}
