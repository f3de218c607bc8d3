package journal

import "sync"

// actionCache remembers the action of operations this process has seen,
// so that a Claim, whose policy depends on the operation's action, does
// not have to read the row first. It is always right: an operation's
// action is fixed when its key is registered and never changes, and
// entries come only from rows the store returned. A miss (an operation
// registered through another replica, or evicted) just costs the read.
//
// Two generations bound its size without bookkeeping per entry: when the
// current map is full it becomes the previous one and the oldest is
// dropped, so recently used keys survive.
type actionCache struct {
	mu        sync.Mutex
	max       int
	cur, prev map[[2]string]string
}

// actionCacheSize is per generation: at most twice this many entries,
// about 100 bytes each with a typical key.
const actionCacheSize = 1 << 16

func newActionCache(max int) *actionCache {
	return &actionCache{max: max, cur: make(map[[2]string]string)}
}

func (c *actionCache) get(tenant, key string) (string, bool) {
	k := [2]string{tenant, key}
	c.mu.Lock()
	defer c.mu.Unlock()
	if a, ok := c.cur[k]; ok {
		return a, true
	}
	a, ok := c.prev[k]
	if ok {
		c.putLocked(k, a)
	}
	return a, ok
}

func (c *actionCache) put(tenant, key, action string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked([2]string{tenant, key}, action)
}

func (c *actionCache) putLocked(k [2]string, action string) {
	if len(c.cur) >= c.max {
		c.prev, c.cur = c.cur, make(map[[2]string]string, c.max)
	}
	c.cur[k] = action
}
