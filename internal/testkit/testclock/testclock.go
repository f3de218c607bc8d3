// Package testclock is a clock that tests move by hand. Given to a store
// (store.Clock) and to whatever else reads the time (the reconciler's
// Config.Now), it lets a test expire a lease or let a lag pass at once,
// instead of sleeping for the database clock.
package testclock

import (
	"sync"
	"time"
)

// Clock is a manually moved clock; safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock at the current time, in whole milliseconds (the
// SQLite store keeps milliseconds).
func New() *Clock { return &Clock{now: time.Now().UTC().Truncate(time.Millisecond)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// AdvanceTo moves the clock to t, if t is later.
func (c *Clock) AdvanceTo(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t.UTC()
	}
}
