package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
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
func (r *Runtime) schedule(ctx context.Context, q *Queue) error {
	watch, err := q.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watching queue %s: %w", r.cfg.Queue, err)
	}
	defer func() { _ = watch.Stop() }()
	clock := r.cfg.Clock
	queue := map[string]queued{}
	attempts := map[string]int{}
	notBefore := map[string]time.Time{}
	running := map[string]bool{}
	results := make(chan ended)
	var runs sync.WaitGroup
	defer runs.Wait()
	// Runs end with the scheduler, whatever ends it.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	for {
		now := clock.Now()
		var next time.Time
		var due []string
		for k, p := range queue {
			if running[k] {
				continue
			}
			at := r.c.Due(k, r.absorbed.peek(k, p.entry))
			if nb := notBefore[k]; nb.After(at) {
				at = nb
			}
			if !at.After(now) {
				due = append(due, k)
			} else if next.IsZero() || at.Before(next) {
				next = at
			}
		}
		sort.Slice(due, func(i, j int) bool {
			a, b := queue[due[i]].entry.First, queue[due[j]].entry.First
			if !a.Equal(b) {
				return a.Before(b)
			}
			return due[i] < due[j]
		})
		for _, k := range due {
			if len(running) >= r.cfg.Concurrency {
				break
			}
			p := queue[k]
			running[k] = true
			// Changes absorbed from here on would be missed by the run: the
			// next event writes the bucket, which the run's dequeue sees.
			entry, _ := r.absorbed.take(k, p.entry)
			runs.Add(1)
			go func(attempt int) {
				defer runs.Done()
				res := r.c.Reconcile(ctx, k, entry, attempt)
				select {
				case results <- ended{key: k, rev: p.rev, result: res}:
				case <-ctx.Done():
				}
			}(attempts[k] + 1)
		}
		var timer <-chan time.Time
		if !next.IsZero() {
			timer = clock.At(next)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-timer:
		case <-r.absorbed.moved:
		case e, ok := <-watch.Updates():
			if !ok {
				return nil
			}
			if e == nil {
				continue // the initial values are all in
			}
			if e.Operation() != jetstream.KeyValuePut {
				delete(queue, e.Key())
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
				}
			}
		case e := <-results:
			delete(running, e.key)
			if p, ok := queue[e.key]; ok && p.rev != e.rev {
				// A follow-up was put during the run: untaken, open now.
				r.absorbed.open(e.key)
			}
			switch e.result.kind {
			case resultDone:
				delete(attempts, e.key)
				delete(notBefore, e.key)
				r.dequeue(ctx, q, queue, e)
			case resultLater:
				notBefore[e.key] = clock.Now().Add(e.result.after)
			case resultRetry:
				attempts[e.key]++
				notBefore[e.key] = clock.Now().Add(r.cfg.Backoff(attempts[e.key]))
			}
		}
	}
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

// dequeue drops the entry a finished run started from; an entry changed
// since (a newer revision) stays queued as the follow-up.
func (r *Runtime) dequeue(ctx context.Context, q *Queue, queue map[string]queued, e ended) {
	err := q.kv.Delete(ctx, e.key, jetstream.LastRevision(e.rev))
	switch {
	case err == nil:
		// The watch reports the deletion later; until then the entry must
		// not look due again.
		if p, ok := queue[e.key]; ok && p.rev == e.rev {
			delete(queue, e.key)
		}
	case errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err):
		// Changed during the run: stays queued as the follow-up.
	case ctx.Err() == nil:
		r.cfg.Log.Warn("dequeuing", "queue", r.cfg.Queue, "key", e.key, "err", err)
	}
}
