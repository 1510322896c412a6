package projections

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// Cache is this replica's in-memory index of every live object, fed by an
// ordered consumer of the event stream. It is rebuilt from JetStream at start,
// so nothing that matters lives only here.
type Cache struct {
	store *eventstore.Store
	log   *slog.Logger

	mu    sync.RWMutex
	kinds map[string]*kindIndex
	seq   uint64
	// advanced is closed and replaced whenever seq moves, waking WaitFor callers.
	advanced chan struct{}
	// children counts each tenant's tenant-scoped objects, so orphans are found
	// without scanning every object.
	children map[string]int

	ready   atomic.Bool
	applied atomic.Uint64

	// subs are the open change feeds (Changes), under mu.
	subs map[*changeSub]struct{}
	// addresses indexes the machine addresses Machines and NodeGroups hold
	// (cache_address.go), under mu.
	addresses addressIndex
}

// entry is one object as the cache keeps it: the JSON served to clients plus
// the few fields queries need, instead of a decoded object, to keep memory low.
type entry struct {
	raw      []byte
	tenant   string
	name     string
	labels   domain.LabelPairs
	deleting bool
	seq      uint64
	// ref is the index key of what the object names (kindIndex.byRef): a
	// Machine's "<tenant>.<spec.nodeGroup>", a NodeGroup's
	// "provider/<spec.provider>"; "" for other kinds.
	ref string
	// uid and generation identify the object's incarnation and spec
	// version, read by Identity without decoding raw.
	uid        string
	generation int64
	// addrs are the machine addresses the object holds, canonical
	// (entryAddresses).
	addrs []string
}

// NewCache returns an empty cache; Run fills it.
func NewCache(store *eventstore.Store, log *slog.Logger) *Cache {
	if log == nil {
		log = slog.Default()
	}
	c := &Cache{store: store, log: log, kinds: map[string]*kindIndex{}, advanced: make(chan struct{}), children: map[string]int{},
		addresses: addressIndex{}}
	for _, k := range domain.Kinds() {
		c.kinds[k.Kind] = newKindIndex()
	}
	return c
}

// Run fills the cache and then follows the stream until ctx ends. It starts
// from the projector's KV buckets (the snapshots: every object as of the
// projector's checkpoint, or later) and replays only the events after the
// checkpoint, so start-up follows the number of objects, not the length of
// the history; without a usable snapshot it replays the stream from the start.
// Events replayed over a newer snapshot entry leave the same final state: each
// event carries its whole object, and the replay runs to the stream's end
// before the cache says it is ready.
func (c *Cache) Run(ctx context.Context) error {
	_, last, err := c.store.Bounds(ctx)
	if err != nil {
		return fmt.Errorf("cache: reading stream bounds: %w", err)
	}
	from := uint64(1)
	if last > 0 {
		started := time.Now()
		objects, ckpt, err := c.loadSnapshot(ctx, last)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return nil
			}
			c.log.Warn("cache: no usable snapshot in the projections, replaying the stream from the start", "err", err)
		case ckpt > 0:
			from = ckpt + 1
			c.log.Info("cache: loaded the projections", "objects", objects, "checkpoint", ckpt, "took", time.Since(started).Round(time.Millisecond))
		}
	}
	if last < from {
		c.ready.Store(true)
		c.log.Info("cache caught up", "seq", last, "replayed", 0)
	} else {
		c.log.Info("cache replaying the stream", "from", from, "to", last)
	}
	cur, err := c.store.Follow(ctx, from, nil)
	if err != nil {
		return fmt.Errorf("cache: following stream: %w", err)
	}
	defer cur.Stop()
	for {
		rec, err := cur.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("cache: %w", err)
		}
		c.apply(rec)
		if !c.ready.Load() && rec.Seq >= last {
			c.ready.Store(true)
			c.log.Info("cache caught up", "seq", rec.Seq, "replayed", c.applied.Load())
		}
	}
}

// Ready reports whether the cache has caught up with the stream as it was at start.
func (c *Cache) Ready() bool { return c.ready.Load() }

// Seq is the last stream sequence the cache applied.
func (c *Cache) Seq() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.seq
}

func (c *Cache) apply(rec *eventstore.Record) {
	var e *entry
	if state := rec.State(); state != nil {
		raw, err := json.Marshal(state)
		if err != nil {
			c.log.Error("cache: encoding object", "seq", rec.Seq, "err", err)
		} else {
			e = newEntry(state, raw, rec.Seq)
		}
	}
	ref := rec.Event.Ref()
	c.mu.Lock()
	c.set(ref, e)
	c.seq = rec.Seq
	if len(c.subs) > 0 && rec.Subject != "" {
		c.notify(rec.Subject, rec.Seq)
	}
	ch := c.advanced
	c.advanced = make(chan struct{})
	c.mu.Unlock()
	close(ch)
	c.applied.Add(1)
}

// newEntry is the cache's record of an object whose JSON is raw.
func newEntry(state *domain.Object, raw []byte, seq uint64) *entry {
	e := &entry{raw: raw, tenant: state.Metadata.Tenant, name: state.Metadata.Name,
		labels: domain.NewLabelPairs(state.Metadata.Labels), deleting: state.Terminating(), seq: seq,
		uid: state.Metadata.UID, generation: state.Metadata.Generation}
	switch state.Kind {
	case domain.MachineKind.Kind:
		if g := machineGroup(state.Spec); g != "" {
			e.ref = state.Metadata.Tenant + "." + g
		}
	case domain.NodeGroupKind.Kind:
		if p := nodeGroupProvider(state.Spec); p != "" {
			e.ref = providerRef(p)
		}
	}
	e.addrs = entryAddresses(state)
	return e
}

// set puts an object's entry at ref (nil: the object is gone) and keeps the
// indexes in step. The caller holds c.mu.
func (c *Cache) set(ref domain.Ref, e *entry) {
	idx := c.kinds[ref.Kind]
	if idx == nil {
		return
	}
	key := ref.Key()
	old, existed := idx.items[key]
	idx.version++
	c.addresses.update(ref, old, e)
	if existed && old.ref != "" && (e == nil || e.ref != old.ref) {
		idx.unref(old.ref, key)
	}
	if e != nil && e.ref != "" {
		g := idx.byRef[e.ref]
		if g == nil {
			g = map[string]struct{}{}
			idx.byRef[e.ref] = g
		}
		g[key] = struct{}{}
	}
	if e == nil {
		if existed {
			delete(idx.items, key)
			delete(idx.terminating, key)
			idx.keys.Delete(key)
			idx.members++
			if ref.Tenant != "" {
				if c.children[ref.Tenant]--; c.children[ref.Tenant] <= 0 {
					delete(c.children, ref.Tenant)
				}
				if idx.perTenant[ref.Tenant]--; idx.perTenant[ref.Tenant] <= 0 {
					delete(idx.perTenant, ref.Tenant)
				}
			}
		}
		return
	}
	idx.items[key] = e
	if e.deleting {
		idx.terminating[key] = struct{}{}
	}
	if !existed {
		idx.keys.ReplaceOrInsert(key)
		idx.members++
		if ref.Tenant != "" {
			c.children[ref.Tenant]++
			idx.perTenant[ref.Tenant]++
		}
	}
}

// WaitFor blocks until the cache has applied sequence seq, so a response to a
// write and any read after it see the write.
func (c *Cache) WaitFor(ctx context.Context, seq uint64) error {
	for {
		c.mu.RLock()
		cur, ch := c.seq, c.advanced
		c.mu.RUnlock()
		if cur >= seq {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the read model to reach %d (at %d): %w", seq, cur, ctx.Err())
		}
	}
}

// Sync waits until the cache has applied everything in the stream now: a read
// barrier for replicas that did not take the write themselves.
func (c *Cache) Sync(ctx context.Context) error {
	_, last, err := c.store.Bounds(ctx)
	if err != nil {
		return err
	}
	return c.WaitFor(ctx, last)
}

// Applied is how many events this cache has applied since it started (not
// counting what it loaded from the projections).
func (c *Cache) Applied() uint64 { return c.applied.Load() }
