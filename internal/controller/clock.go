package controller

import "time"

// Clock is the time a runtime schedules by, injected so tests can move it
// instead of sleeping.
type Clock interface {
	Now() time.Time
	// At delivers once the clock reaches t, at once when it already has.
	// Waits are given as instants, not durations, so that a test moving the
	// clock between a Now and an At cannot push the wait further out.
	At(t time.Time) <-chan time.Time
}

// RealClock is the wall clock; now, when not nil, replaces time.Now (for
// callers that only fix the timestamps they record).
func RealClock(now func() time.Time) Clock {
	if now == nil {
		now = time.Now
	}
	return realClock{now: now}
}

type realClock struct{ now func() time.Time }

func (c realClock) Now() time.Time { return c.now() }

func (c realClock) At(t time.Time) <-chan time.Time { return time.After(t.Sub(c.now())) }
