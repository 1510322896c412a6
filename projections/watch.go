package projections

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Watch event types.
const (
	WatchAdded    = "ADDED"
	WatchModified = "MODIFIED"
	WatchDeleted  = "DELETED"
	WatchBookmark = "BOOKMARK"
	WatchError    = "ERROR"
)

// WatchOptions select what a watch sees.
type WatchOptions struct {
	Kind *domain.KindInfo
	// Tenant narrows a tenant-scoped kind to one tenant ("" = all tenants).
	Tenant string
	// Name narrows the watch to one object ("" = all).
	Name     string
	Selector domain.Selector
	// ResourceVersion: 0 sends every current object as ADDED first, then changes;
	// N > 0 sends exactly the changes after stream sequence N.
	ResourceVersion uint64
}

// WatchEvent is one change as a watch client sees it.
type WatchEvent struct {
	Type   string
	Object json.RawMessage
	// Seq is the resourceVersion of the change.
	Seq uint64
}

// Watcher streams WatchEvents until stopped; its channel is closed when it ends.
type Watcher struct {
	ch     chan WatchEvent
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	err    error
}

// Events is the stream of changes; closed when the watch ends (see Err).
func (w *Watcher) Events() <-chan WatchEvent { return w.ch }

// Err says why the watch ended; nil after Stop.
func (w *Watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Stop ends the watch and waits for its goroutine.
func (w *Watcher) Stop() {
	w.cancel()
	<-w.done
}

// Watch starts a watch. Each watch reads the stream through its own ordered
// consumer from the requested version, so resuming after N neither skips nor
// repeats a change, and a slow client only holds back its own consumer. A
// version older than the stream's first event fails with Gone.
func (c *Cache) Watch(ctx context.Context, opts WatchOptions) (*Watcher, error) {
	first, _, err := c.store.Bounds(ctx)
	if err != nil {
		return nil, err
	}
	if opts.ResourceVersion > 0 && first > 0 && opts.ResourceVersion+1 < first {
		return nil, domain.NewGone(fmt.Sprintf("too old resource version: %d (the oldest available is %d)", opts.ResourceVersion, first-1))
	}
	var initial [][]byte
	from := opts.ResourceVersion + 1
	matched := map[string]bool{}
	if opts.ResourceVersion == 0 {
		res, err := c.List(opts.Kind.Kind, ListOptions{Tenant: opts.Tenant, Selector: opts.Selector})
		if err != nil {
			return nil, err
		}
		for i, raw := range res.Items {
			key := res.Keys[i]
			if opts.Name != "" && !strings.HasSuffix(key, "."+opts.Name) {
				continue
			}
			initial = append(initial, raw)
			matched[key] = true
		}
		from = res.Seq + 1
	}
	filter := domain.SubjectFilter(opts.Kind, opts.Tenant, opts.Name)
	wctx, cancel := context.WithCancel(ctx)
	cur, err := c.store.Follow(wctx, from, []string{filter})
	if err != nil {
		cancel()
		return nil, err
	}
	w := &Watcher{ch: make(chan WatchEvent), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer close(w.ch)
		defer cur.Stop()
		send := func(ev WatchEvent) bool {
			select {
			case w.ch <- ev:
				return true
			case <-wctx.Done():
				return false
			}
		}
		for _, raw := range initial {
			if !send(WatchEvent{Type: WatchAdded, Object: raw, Seq: from - 1}) {
				return
			}
		}
		for {
			rec, err := cur.Next(wctx)
			if err != nil {
				if wctx.Err() == nil {
					w.mu.Lock()
					w.err = err
					w.mu.Unlock()
				}
				return
			}
			ev, ok := watchEventFor(rec.Event, rec.Seq, opts.Selector, matched, opts.ResourceVersion == 0)
			if ok && !send(ev) {
				return
			}
		}
	}()
	return w, nil
}

// watchEventFor turns a stream event into what a selector-filtered watcher should
// see: an object that stops matching is DELETED for it, one that starts matching
// ADDED. tracked says matched is complete (the watch began with a snapshot); a
// resumed watch does not know what matched before, so it keeps MODIFIED.
func watchEventFor(ev *domain.Event, seq uint64, sel domain.Selector, matched map[string]bool, tracked bool) (WatchEvent, bool) {
	img := ev.Object.DeepCopy()
	img.Metadata.ResourceVersion = seqString(seq)
	raw, err := json.Marshal(img)
	if err != nil {
		return WatchEvent{}, false
	}
	key := img.Ref().Key()
	matches := sel.Matches(img.Metadata.Labels)
	was := matched[key]
	typ := ev.Action.WatchType()
	switch {
	case ev.Action == domain.ActionDeleted:
		delete(matched, key)
		if !matches && !was {
			return WatchEvent{}, false
		}
	case matches:
		if tracked && !was && ev.Action != domain.ActionCreated && !sel.Empty() {
			typ = WatchAdded
		}
		if !sel.Empty() {
			matched[key] = true
		}
	case was:
		delete(matched, key)
		typ = WatchDeleted
	default:
		return WatchEvent{}, false
	}
	return WatchEvent{Type: typ, Object: raw, Seq: seq}, true
}
