// Package controllertest gives tests of controllers a clock they move by
// hand, so that debounce and backoff are tested without sleeping.
package controllertest

import (
	"sync"
	"time"
)

// Clock is a controller.Clock that moves only when Advance moves it.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// NewClock returns a clock standing at t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// At delivers once the clock reaches t.
func (c *Clock) At(t time.Time) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if !t.After(c.now) {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{at: t, ch: ch})
	return ch
}

// Advance moves the clock by d and wakes whoever waits for a time it passed.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now
	}
	c.waiters = kept
}

// Waiting is when the earliest wait ends (zero when none waits): a test
// advances to it once the code under test is waiting.
func (c *Clock) Waiting() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first time.Time
	for _, w := range c.waiters {
		if first.IsZero() || w.at.Before(first) {
			first = w.at
		}
	}
	return first
}

// Waits are the instants waited for, in no order: a test sees from them that
// the code under test has taken in what it was told (a new deadline).
func (c *Clock) Waits() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]time.Time, len(c.waiters))
	for i, w := range c.waiters {
		out[i] = w.at
	}
	return out
}
