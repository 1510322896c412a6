package controller

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// queued is a key's entry at the revision the queue last reported.
type queued struct {
	rev   uint64
	entry Entry
}

type ended struct {
	key    string
	rev    uint64
	result Result
}

// schedule starts runs for queued keys once they are due: one per key at a
// time, up to Concurrency at once, oldest first. It keeps the queue's
// entries in memory from a watch of the bucket, so a decision costs nothing
// per stored object; the bucket stays the truth a new leader starts from.
//
// A wake-up costs O(log n) per key it concerns, not a pass over the queue:
// waiting holds an item at the due time of every queued key that is neither
// running nor due, pushed again whenever what the time depends on changes
// (a put, an absorbed change, a run's end); scheduled says which of a key's
// items is current, and the others are dropped as they come up. Keys that
// are due wait in ready, oldest change first, for a free slot; each is
// checked against the key as it is then before it starts.
//
// With Tenants (changed signals a change of this replica's holds), a key
// runs only on the replica holding its tenant: a key whose tenant is not
// held here waits in blocked, out of the heaps, until a change of the holds
// (or of the lease, which a run needs while a replica of an earlier release
// runs) may let it run.
func (r *Runtime) schedule(ctx context.Context, q *Queue, changed <-chan struct{}) error {
	watch, err := q.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watching queue %s: %w", r.cfg.Queue, err)
	}
	defer func() { _ = watch.Stop() }()
	clock := r.cfg.Clock
	queue := map[string]queued{}
	attempts := map[string]int{}
	notBefore := map[string]time.Time{}
	// later are the keys whose notBefore a Later run set: a change after
	// that run started makes them due on their debounce again.
	later := map[string]bool{}
	running := map[string]bool{}
	var waiting dueHeap
	var ready readyHeap
	scheduled := map[string]time.Time{}
	inReady := map[string]bool{}
	// blocked are the due keys of tenants this replica could not hold, by
	// tenant; terms the term of each tenant's hold the last run started in.
	blocked := map[string]map[string]bool{}
	terms := map[string]uint64{}
	dueAt := func(k string, p queued) time.Time {
		at := r.c.Due(k, r.absorbed.peek(k, p.entry))
		if nb := notBefore[k]; nb.After(at) {
			at = nb
		}
		return at
	}
	schedule := func(k string, at time.Time) {
		scheduled[k] = at
		heap.Push(&waiting, dueItem{at: at, key: k})
	}
	// wait (re)considers key: it gets an item at its due time as it is now.
	wait := func(k string) {
		if p, ok := queue[k]; ok && !running[k] && !inReady[k] {
			schedule(k, dueAt(k, p))
		}
	}
	// changed (re)considers a key an event changed: a Later run's wait is
	// over, as it was decided without that change (an in-place config, a
	// new machine must not wait for the window a rebooting one waits for).
	touched := func(k string) {
		if later[k] {
			delete(later, k)
			delete(notBefore, k)
		}
		if p, ok := queue[k]; ok && !running[k] && !inReady[k] {
			schedule(k, dueAt(k, p))
		}
	}
	results := make(chan ended)
	var runs sync.WaitGroup
	defer runs.Wait()
	// Runs end with the scheduler, whatever ends it.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	for {
		now := clock.Now()
		for waiting.Len() > 0 {
			it := waiting[0]
			if at, ok := scheduled[it.key]; !ok || !at.Equal(it.at) {
				heap.Pop(&waiting) // superseded
				continue
			}
			if it.at.After(now) {
				break
			}
			heap.Pop(&waiting)
			delete(scheduled, it.key)
			p, ok := queue[it.key]
			if !ok || running[it.key] {
				continue // gone, or running (its end considers it again)
			}
			if at := dueAt(it.key, p); at.After(now) {
				schedule(it.key, at) // moved later by a change not seen yet
				continue
			}
			heap.Push(&ready, readyItem{first: p.entry.First, key: it.key})
			inReady[it.key] = true
		}
		for len(running) < r.cfg.Concurrency && ready.Len() > 0 {
			it := heap.Pop(&ready).(readyItem)
			delete(inReady, it.key)
			p, ok := queue[it.key]
			if !ok || running[it.key] {
				continue
			}
			if at := dueAt(it.key, p); at.After(now) {
				// Changed while it waited for a slot: not due any more.
				schedule(it.key, at)
				continue
			}
			k := it.key
			var hold Hold
			if ts := r.cfg.Tenants; ts != nil {
				tenant := r.cfg.TenantOf(k)
				var ok bool
				if hold, ok = ts.Begin(tenant, r.leadContext() != nil); !ok {
					if blocked[tenant] == nil {
						blocked[tenant] = map[string]bool{}
					}
					blocked[tenant][k] = true
					continue
				}
			}
			running[k] = true
			// Changes absorbed from here on would be missed by the run: the
			// next event writes the bucket, which the run's dequeue sees.
			entry, _ := r.absorbed.take(k, p.entry)
			r.runStarted(k)
			runs.Add(1)
			acquired := false
			if hold.End != nil {
				tenant := r.cfg.TenantOf(k)
				acquired = terms[tenant] != hold.Term
				terms[tenant] = hold.Term
			}
			go func(attempt int) {
				defer runs.Done()
				var res Result
				if hold.End == nil {
					res = r.c.Reconcile(ctx, k, entry, attempt)
				} else {
					res = r.runHeld(ctx, hold, k, entry, attempt, acquired, q)
				}
				select {
				case results <- ended{key: k, rev: p.rev, result: res}:
				case <-ctx.Done():
					if res.kind == resultDone {
						r.dequeueAfterTerm(ctx, q, k, p.rev)
					}
				}
			}(attempts[k] + 1)
		}
		var timer <-chan time.Time
		if waiting.Len() > 0 {
			timer = clock.At(waiting[0].at)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			unblock(blocked, wait)
		case <-r.kick:
			unblock(blocked, wait)
		case <-timer:
		case <-r.absorbed.moved:
			for _, k := range r.absorbed.takeMoved() {
				touched(k)
			}
		case e, ok := <-watch.Updates():
			if !ok {
				return nil
			}
			if e == nil {
				continue // the initial values are all in
			}
			if e.Operation() != jetstream.KeyValuePut {
				delete(queue, e.Key())
				delete(scheduled, e.Key())
				r.unabsorb(ctx, q, e.Key())
				continue
			}
			var entry Entry
			if json.Unmarshal(e.Value(), &entry) == nil {
				queue[e.Key()] = queued{rev: e.Revision(), entry: entry}
				// A put is never the entry a run in flight started from
				// (that one came before): it is untaken. While the key
				// runs it stays closed, so every change meanwhile writes
				// the bucket (the run's dequeue must see it); it opens
				// when the run ends.
				if !running[e.Key()] {
					r.absorbed.open(e.Key())
					touched(e.Key())
				}
			}
		case e := <-results:
			delete(running, e.key)
			r.runEnded(e.key, e.rev)
			followUp := false
			if p, ok := queue[e.key]; ok && p.rev != e.rev {
				// A follow-up was put during the run: untaken, open now.
				r.absorbed.open(e.key)
				followUp = true
			}
			delete(later, e.key)
			switch e.result.kind {
			case resultDone:
				delete(attempts, e.key)
				delete(notBefore, e.key)
				r.dequeue(ctx, q, queue, e)
			case resultLater:
				// A Later run decided without the follow-up: that runs on
				// its debounce. CI once saw a tenant's in-window change wait
				// for the window's next opening, as it came during the run
				// that deferred its rebooting config.
				delete(notBefore, e.key)
				if !followUp {
					notBefore[e.key] = e.result.at(clock.Now())
					later[e.key] = true
				}
			case resultRetry:
				attempts[e.key]++
				notBefore[e.key] = clock.Now().Add(r.cfg.Backoff(attempts[e.key]))
			}
			wait(e.key)
		}
	}
}

// unblock considers the blocked keys again: each runs if its tenant is
// held here by then, or waits in blocked again.
func unblock(blocked map[string]map[string]bool, wait func(string)) {
	for tenant, keys := range blocked {
		delete(blocked, tenant)
		for k := range keys {
			wait(k)
		}
	}
}

// dueItem says key may be due at.
type dueItem struct {
	at  time.Time
	key string
}

// dueHeap orders items by time, then key.
type dueHeap []dueItem

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].key < h[j].key
}
func (h dueHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)   { *h = append(*h, x.(dueItem)) }
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// readyItem is a due key and when its oldest change was queued.
type readyItem struct {
	first time.Time
	key   string
}

// readyHeap orders due keys by their oldest change, then key.
type readyHeap []readyItem

func (h readyHeap) Len() int { return len(h) }
func (h readyHeap) Less(i, j int) bool {
	if !h[i].first.Equal(h[j].first) {
		return h[i].first.Before(h[j].first)
	}
	return h[i].key < h[j].key
}
func (h readyHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *readyHeap) Push(x any)   { *h = append(*h, x.(readyItem)) }
func (h *readyHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// unabsorb closes a key whose entry left the bucket. A run's dequeue
// succeeds only when nothing was written since the run took the key, and an
// untaken entry is not dequeued, so nothing is absorbed here; should that
// ever be wrong, the absorbed changes go back to the bucket rather than be lost.
func (r *Runtime) unabsorb(ctx context.Context, q *Queue, key string) {
	e, had := r.absorbed.take(key, Entry{})
	if !had {
		return
	}
	for _, src := range e.Sources {
		if err := q.Add(ctx, key, src); err != nil && ctx.Err() == nil {
			r.cfg.Log.Warn("queueing absorbed changes again", "queue", r.cfg.Queue, "key", key, "err", err)
		}
	}
	if len(e.Sources) == 0 {
		if err := q.Add(ctx, key, ""); err != nil && ctx.Err() == nil {
			r.cfg.Log.Warn("queueing absorbed changes again", "queue", r.cfg.Queue, "key", key, "err", err)
		}
	}
}

// dequeueAfterTerm drops the entry a run that finished its work started
// from, when the term ended as it finished (a lame duck's SIGTERM, a lost
// lease): left in the bucket, the next leader would run the work again (CI
// saw a second Succeeded apply of one change in a rolling upgrade). The
// delete holds only if nobody wrote the entry since the run took it, so a
// change that came meanwhile stays queued for the next leader; it is
// bounded, since the term is over.
func (r *Runtime) dequeueAfterTerm(ctx context.Context, q *Queue, key string, rev uint64) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := q.kv.Delete(dctx, key, jetstream.LastRevision(rev))
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) && !isWrongLastSequence(err) {
		r.cfg.Log.Warn("dequeuing after the term ended", "queue", r.cfg.Queue, "key", key, "err", err)
	}
}

// dequeue drops the entry a finished run started from; an entry changed
// since (a newer revision) stays queued as the follow-up.
func (r *Runtime) dequeue(ctx context.Context, q *Queue, queue map[string]queued, e ended) {
	// The work is done even when the term ends now: the delete holds only at
	// the run's revision, so it goes on, bounded (dequeueAfterTerm).
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := q.kv.Delete(dctx, e.key, jetstream.LastRevision(e.rev))
	switch {
	case err == nil:
		// The watch reports the deletion later; until then the entry must
		// not look due again.
		if p, ok := queue[e.key]; ok && p.rev == e.rev {
			delete(queue, e.key)
		}
	case errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err):
		// Changed during the run: stays queued as the follow-up. Its put
		// may not have come through the watch yet, and then the entry
		// held is the run's own: dropped until the watch brings the newer
		// one, or the follow-up would start at once from the old entry
		// (CI, loaded: its sources ended at the first event, not the last).
		if p, ok := queue[e.key]; ok && p.rev == e.rev {
			delete(queue, e.key)
		}
	case ctx.Err() == nil:
		r.cfg.Log.Warn("dequeuing", "queue", r.cfg.Queue, "key", e.key, "err", err)
	}
}
