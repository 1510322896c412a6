package projections

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

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
}

type kindIndex struct {
	items map[string]*entry
	// terminating holds the keys of objects whose deletion was requested.
	terminating map[string]struct{}
	// keys is items' keys in order; rebuilt lazily when dirty.
	keys  []string
	dirty bool
}

// NewCache returns an empty cache; Run fills it.
func NewCache(store *eventstore.Store, log *slog.Logger) *Cache {
	if log == nil {
		log = slog.Default()
	}
	c := &Cache{store: store, log: log, kinds: map[string]*kindIndex{}, advanced: make(chan struct{}), children: map[string]int{}}
	for _, k := range domain.Kinds() {
		c.kinds[k.Kind] = &kindIndex{items: map[string]*entry{}, terminating: map[string]struct{}{}}
	}
	return c
}

// Run replays the stream from the start and then follows it until ctx ends.
func (c *Cache) Run(ctx context.Context) error {
	_, last, err := c.store.Bounds(ctx)
	if err != nil {
		return fmt.Errorf("cache: reading stream bounds: %w", err)
	}
	if last == 0 {
		c.ready.Store(true)
	}
	cur, err := c.store.Follow(ctx, 1, nil)
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
			c.log.Info("cache caught up", "seq", rec.Seq)
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
			e = &entry{raw: raw, tenant: state.Metadata.Tenant, name: state.Metadata.Name,
				labels: domain.NewLabelPairs(state.Metadata.Labels), deleting: state.Terminating(), seq: rec.Seq}
		}
	}
	ref := rec.Event.Ref()
	c.mu.Lock()
	if idx := c.kinds[ref.Kind]; idx != nil {
		key := ref.Key()
		_, existed := idx.items[key]
		if e == nil {
			if existed {
				delete(idx.items, key)
				delete(idx.terminating, key)
				idx.dirty = true
				if ref.Tenant != "" {
					if c.children[ref.Tenant]--; c.children[ref.Tenant] <= 0 {
						delete(c.children, ref.Tenant)
					}
				}
			}
		} else {
			idx.items[key] = e
			if e.deleting {
				idx.terminating[key] = struct{}{}
			}
			if !existed {
				idx.dirty = true
				if ref.Tenant != "" {
					c.children[ref.Tenant]++
				}
			}
		}
	}
	c.seq = rec.Seq
	ch := c.advanced
	c.advanced = make(chan struct{})
	c.mu.Unlock()
	close(ch)
	c.applied.Add(1)
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

// Get returns the JSON of one object.
func (c *Cache) Get(ref domain.Ref) ([]byte, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	idx := c.kinds[ref.Kind]
	if idx == nil {
		return nil, false
	}
	e, ok := idx.items[ref.Key()]
	if !ok {
		return nil, false
	}
	return e.raw, true
}

// GetAt returns the JSON of one object and the sequence of its last event.
func (c *Cache) GetAt(ref domain.Ref) ([]byte, uint64, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	idx := c.kinds[ref.Kind]
	if idx == nil {
		return nil, 0, false
	}
	e, ok := idx.items[ref.Key()]
	if !ok {
		return nil, 0, false
	}
	return e.raw, e.seq, true
}

// GetObject returns one decoded object.
func (c *Cache) GetObject(ref domain.Ref) (*domain.Object, bool) {
	raw, ok := c.Get(ref)
	if !ok {
		return nil, false
	}
	obj := &domain.Object{}
	if err := json.Unmarshal(raw, obj); err != nil {
		return nil, false
	}
	return obj, true
}

// Count returns how many objects of a kind exist (in one tenant, or all when tenant is "").
func (c *Cache) Count(kind, tenant string) int {
	idx, unlock := c.index(kind)
	defer unlock()
	if idx == nil {
		return 0
	}
	if tenant == "" {
		return len(idx.items)
	}
	lo, hi := idx.prefixRange(tenant + ".")
	return hi - lo
}

// index returns a kind's index with its keys sorted, and the matching unlock.
// Sorting is lazy: writes only mark the index dirty, and the first reader after
// them sorts under the write lock; later readers share the read lock.
func (c *Cache) index(kind string) (*kindIndex, func()) {
	c.mu.RLock()
	idx := c.kinds[kind]
	if idx == nil || !idx.dirty {
		return idx, c.mu.RUnlock
	}
	c.mu.RUnlock()
	c.mu.Lock()
	if idx.dirty {
		keys := make([]string, 0, len(idx.items))
		for k := range idx.items {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		idx.keys = keys
		idx.dirty = false
	}
	return idx, c.mu.Unlock
}

func (idx *kindIndex) prefixRange(prefix string) (int, int) {
	lo := sort.SearchStrings(idx.keys, prefix)
	hi := lo + sort.Search(len(idx.keys)-lo, func(i int) bool { return !strings.HasPrefix(idx.keys[lo+i], prefix) })
	return lo, hi
}

// ListOptions select and page a list.
type ListOptions struct {
	// Tenant narrows a tenant-scoped kind to one tenant; "" lists across tenants.
	Tenant   string
	Selector domain.Selector
	// Limit is the page size; 0 means everything.
	Limit int
	// Continue is the token from the previous page.
	Continue string
}

// ListResult is one page of raw objects.
type ListResult struct {
	Items [][]byte
	// Keys are the items' "<tenant-or-_>.<name>" keys, in the same order.
	Keys     []string
	Seq      uint64
	Continue string
	// Remaining is how many more objects follow, when known without a selector.
	Remaining int
}

type continueToken struct {
	Key string `json:"k"`
	Seq uint64 `json:"s"`
}

// ErrBadContinue is returned for a continue token this server did not issue.
var ErrBadContinue = errors.New("continue token is not valid")

// List returns matching objects in key order. Continue tokens carry the last key
// served, so objects created or deleted between pages never make a page skip or
// repeat an object that existed throughout.
func (c *Cache) List(kind string, opts ListOptions) (ListResult, error) {
	after := ""
	if opts.Continue != "" {
		tok, err := decodeContinue(opts.Continue)
		if err != nil {
			return ListResult{}, err
		}
		after = tok.Key
	}
	idx, unlock := c.index(kind)
	defer unlock()
	if idx == nil {
		return ListResult{}, fmt.Errorf("unknown kind %q", kind)
	}
	lo, hi := 0, len(idx.keys)
	if opts.Tenant != "" {
		lo, hi = idx.prefixRange(opts.Tenant + ".")
	}
	if after != "" {
		lo += sort.Search(hi-lo, func(i int) bool { return idx.keys[lo+i] > after })
	}
	res := ListResult{Seq: c.seq}
	last := ""
	for i := lo; i < hi; i++ {
		k := idx.keys[i]
		e := idx.items[k]
		if e == nil || !opts.Selector.MatchesPairs(e.labels) {
			continue
		}
		if opts.Limit > 0 && len(res.Items) == opts.Limit {
			res.Continue = encodeContinue(continueToken{Key: last, Seq: c.seq})
			if opts.Selector.Empty() {
				res.Remaining = hi - i
			}
			break
		}
		res.Items = append(res.Items, e.raw)
		res.Keys = append(res.Keys, k)
		last = k
	}
	return res, nil
}

// Children returns the refs of every object in a tenant, across tenant-scoped kinds.
func (c *Cache) Children(tenant string) []domain.Ref {
	var out []domain.Ref
	for _, k := range domain.Kinds() {
		if !k.TenantScoped {
			continue
		}
		idx, unlock := c.index(k.Kind)
		lo, hi := idx.prefixRange(tenant + ".")
		for i := lo; i < hi; i++ {
			if e := idx.items[idx.keys[i]]; e != nil {
				out = append(out, domain.Ref{Kind: k.Kind, Tenant: e.tenant, Name: e.name})
			}
		}
		unlock()
	}
	return out
}

// Terminating returns the refs of objects of a kind whose deletion was requested.
func (c *Cache) Terminating(kind string) []domain.Ref {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []domain.Ref
	idx := c.kinds[kind]
	for key := range idx.terminating {
		e := idx.items[key]
		out = append(out, domain.Ref{Kind: kind, Tenant: e.tenant, Name: e.name})
	}
	return out
}

func encodeContinue(t continueToken) string {
	b, _ := json.Marshal(t)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeContinue(s string) (continueToken, error) {
	var t continueToken
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(b, &t) != nil || t.Key == "" {
		return t, ErrBadContinue
	}
	return t, nil
}

// seqString formats a sequence as a resourceVersion.
func seqString(seq uint64) string { return strconv.FormatUint(seq, 10) }

// Orphans returns tenant-scoped objects whose tenant does not exist.
func (c *Cache) Orphans() []domain.Ref {
	c.mu.RLock()
	tenants := c.kinds[domain.TenantKind.Kind].items
	var gone []string
	for t := range c.children {
		if _, ok := tenants[domain.ClusterScope+"."+t]; !ok {
			gone = append(gone, t)
		}
	}
	c.mu.RUnlock()
	var out []domain.Ref
	for _, t := range gone {
		out = append(out, c.Children(t)...)
	}
	return out
}

// Peek returns the cached state of an object and its last event's sequence, for
// eventstore.UpdateOptions.Hint: a write decides on it and the stream confirms it.
func (c *Cache) Peek(ref domain.Ref) (*domain.Object, uint64) {
	c.mu.RLock()
	idx := c.kinds[ref.Kind]
	var e *entry
	if idx != nil {
		e = idx.items[ref.Key()]
	}
	c.mu.RUnlock()
	if e == nil {
		return nil, 0
	}
	obj := &domain.Object{}
	if err := json.Unmarshal(e.raw, obj); err != nil {
		return nil, 0
	}
	return obj, e.seq
}
