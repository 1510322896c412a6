package controller

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Controller is what a controller decides and does; the Runtime does the
// rest (lease, consumer, queue, scheduling, backoff).
type Controller interface {
	// Keys names the keys an event of the consumer touches; seq is the
	// event's stream sequence. It may act on the event too (cancel a run,
	// say). An error redelivers the event. It returns only once the read
	// model the runs read has the event (Cache.WaitFor(seq)): an event for
	// a key already queued is absorbed into that entry without a queue
	// write, and the run that takes the entry must see it.
	Keys(ctx context.Context, ev *domain.Event, seq uint64) ([]string, error)
	// Due is when a queued key may run, from its entry (a debounce, or the
	// entry's Last for no delay); a backoff or a Later comes on top.
	Due(key string, e Entry) time.Time
	// Reconcile runs key once; attempt counts from 1 and grows with each
	// Retry. ctx ends when the lease is lost or the runtime stops.
	Reconcile(ctx context.Context, key string, e Entry, attempt int) Result
}

// Leader is a Controller with work to do each time its replica takes the
// lease, before events are consumed: catch up a read model, queue what a
// previous leader left, subscribe to requests only the leader answers.
// stop, when not nil, runs when the lease ends.
type Leader interface {
	Lead(ctx context.Context, q *Queue) (stop func(), err error)
}

// Resyncer is a Controller that queues keys periodically (Config.Resync),
// to catch what no event announces (drift, a retry after a failed destroy).
type Resyncer interface {
	Resync(ctx context.Context) ([]string, error)
}

// Result is how a run ended: Done, Retry or Later.
type Result struct {
	kind  resultKind
	after time.Duration
	// until, when set, is Later's instant (Until).
	until time.Time
}

// at is when a Later run's key is due again, now being its end.
func (r Result) at(now time.Time) time.Time {
	if !r.until.IsZero() {
		return r.until
	}
	return now.Add(r.after)
}

type resultKind int

const (
	resultDone resultKind = iota
	resultRetry
	resultLater
)

// Done says the work queued when the run started is done: the key leaves the
// queue, unless an event queued it again meanwhile (that stays, as a
// follow-up run).
func Done() Result { return Result{kind: resultDone} }

// Retry says the run failed: the key runs again after the backoff of its
// next attempt.
func Retry() Result { return Result{kind: resultRetry} }

// Later says the run did nothing and the key is looked at again after d,
// without counting as a failure, or sooner when an event changes it.
func Later(d time.Duration) Result { return Result{kind: resultLater, after: d} }

// Until is Later up to an instant (a maintenance window's opening): a wait
// decided from one reading of the clock is not pushed out by the time the
// run takes to end.
func Until(t time.Time) Result { return Result{kind: resultLater, until: t} }

// Exponential is a backoff doubling from base up to limit, jittered over its
// upper half so that keys failing together do not retry together.
func Exponential(base, limit time.Duration) func(attempt int) time.Duration {
	return func(n int) time.Duration {
		d := base
		for i := 1; i < n && d < limit; i++ {
			d *= 2
		}
		d = min(d, limit)
		return d/2 + rand.N(d/2+1)
	}
}
