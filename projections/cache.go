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
	"time"

	"github.com/google/btree"
	"github.com/nats-io/nats.go/jetstream"

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
}

type kindIndex struct {
	items map[string]*entry
	// terminating holds the keys of objects whose deletion was requested.
	terminating map[string]struct{}
	// keys is items' keys in order, kept as they come and go (O(log n) per
	// event): lists, counts and pages read ranges of it by prefix.
	keys *btree.BTreeG[string]
	// perTenant counts a tenant-scoped kind's objects in each tenant.
	perTenant map[string]int
	// members counts insertions and deletions: it moves only when the set of
	// objects changes (Members).
	members uint64
	// version moves with every change of the kind's objects (KindVersion).
	version uint64
	// byRef holds the keys of the objects naming each thing (entry.ref):
	// Machines by their node group, NodeGroups by their Provider.
	byRef map[string]map[string]struct{}
}

func newKindIndex() *kindIndex {
	return &kindIndex{items: map[string]*entry{}, terminating: map[string]struct{}{},
		keys: btree.NewOrderedG[string](32), perTenant: map[string]int{}, byRef: map[string]map[string]struct{}{}}
}

// unref takes key out of ref's set.
func (idx *kindIndex) unref(ref, key string) {
	if g := idx.byRef[ref]; g != nil {
		delete(g, key)
		if len(g) == 0 {
			delete(idx.byRef, ref)
		}
	}
}

// machineGroup is the node group a Machine's spec names.
func machineGroup(spec json.RawMessage) string {
	var s struct {
		NodeGroup string `json:"nodeGroup"`
	}
	if json.Unmarshal(spec, &s) != nil {
		return ""
	}
	return s.NodeGroup
}

// nodeGroupProvider is the Provider a NodeGroup's spec names.
func nodeGroupProvider(spec json.RawMessage) string {
	var s struct {
		Provider string `json:"provider"`
	}
	if json.Unmarshal(spec, &s) != nil {
		return ""
	}
	return s.Provider
}

// Members is a number that moves whenever an object of kind is created or
// deleted (not when one changes): a consumer that cares only about which
// objects exist checks it before looking.
func (c *Cache) Members(kind string) uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if idx := c.kinds[kind]; idx != nil {
		return idx.members
	}
	return 0
}

// KindVersion is a number that moves whenever an object of kind is created,
// changed or deleted: a consumer that compiles something from all objects
// of a small kind (group bindings) rebuilds it only when this moved.
func (c *Cache) KindVersion(kind string) uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if idx := c.kinds[kind]; idx != nil {
		return idx.version
	}
	return 0
}

// Names returns the names of the objects of a cluster-scoped kind, in order,
// without decoding them.
func (c *Cache) Names(kind string) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	idx := c.kinds[kind]
	if idx == nil {
		return nil
	}
	out := make([]string, 0, len(idx.items))
	idx.keys.Ascend(func(k string) bool {
		out = append(out, idx.items[k].name)
		return true
	})
	return out
}

// InGroup returns the JSON of the objects of kind in tenant that name group
// (Machines by spec.nodeGroup), in key order: work proportional to the
// group, not to the tenant.
func (c *Cache) InGroup(kind, tenant, group string) [][]byte {
	return c.referring(kind, tenant+"."+group)
}

// NodeGroupsOf returns the JSON of the NodeGroups, in every tenant, whose
// spec.provider is provider, in key order: work proportional to them, not
// to all node groups.
func (c *Cache) NodeGroupsOf(provider string) [][]byte {
	return c.referring(domain.NodeGroupKind.Kind, providerRef(provider))
}

func providerRef(provider string) string { return "provider/" + provider }

// referring returns the objects of kind indexed under ref, in key order.
func (c *Cache) referring(kind, ref string) [][]byte {
	c.mu.RLock()
	defer c.mu.RUnlock()
	idx := c.kinds[kind]
	if idx == nil {
		return nil
	}
	g := idx.byRef[ref]
	keys := make([]string, 0, len(g))
	for k := range g {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([][]byte, 0, len(keys))
	for _, k := range keys {
		out = append(out, idx.items[k].raw)
	}
	return out
}

// ascend calls fn for the keys from start on that have prefix, in order,
// until fn returns false.
func (idx *kindIndex) ascend(prefix, start string, fn func(key string) bool) {
	if start < prefix {
		start = prefix
	}
	idx.keys.AscendGreaterOrEqual(start, func(k string) bool {
		return strings.HasPrefix(k, prefix) && fn(k)
	})
}

// NewCache returns an empty cache; Run fills it.
func NewCache(store *eventstore.Store, log *slog.Logger) *Cache {
	if log == nil {
		log = slog.Default()
	}
	c := &Cache{store: store, log: log, kinds: map[string]*kindIndex{}, advanced: make(chan struct{}), children: map[string]int{}}
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

// snapshotEntry is one object read from a projection bucket.
type snapshotEntry struct {
	ref domain.Ref
	e   *entry
}

// loadSnapshot reads every projection bucket and the projector's checkpoint,
// and fills the empty cache with them; ckpt 0 means there was none (nothing
// loaded). An error leaves the cache empty.
func (c *Cache) loadSnapshot(ctx context.Context, last uint64) (objects int, ckpt uint64, err error) {
	js := c.store.JetStream()
	ckv, err := js.KeyValue(ctx, CheckpointBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	// The checkpoint first: whatever the buckets hold is at least as new.
	ce, err := ckv.Get(ctx, "checkpoint")
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	if ckpt, err = strconv.ParseUint(string(ce.Value()), 10, 64); err != nil || ckpt == 0 {
		return 0, 0, fmt.Errorf("checkpoint %q is not a sequence", ce.Value())
	}
	if ckpt > last {
		// The stream lost its tail (a kill -9 before JetStream wrote its
		// buffered messages out) while the projections kept theirs: they
		// hold states no event has, and the next events will reuse those
		// sequences. Only the stream is the truth.
		return 0, 0, fmt.Errorf("the projections (checkpoint %d) are ahead of the event stream (last %d)", ckpt, last)
	}
	var all []snapshotEntry
	for _, k := range domain.Kinds() {
		got, err := readBucket(ctx, js, k)
		if err != nil {
			return 0, 0, err
		}
		all = append(all, got...)
	}
	c.mu.Lock()
	for _, s := range all {
		c.set(s.ref, s.e)
	}
	c.seq = ckpt
	// Wake whoever waits for a sequence (WaitFor, Sync): the snapshot may
	// be all they wait for, with no event coming after it.
	ch := c.advanced
	c.advanced = make(chan struct{})
	c.mu.Unlock()
	close(ch)
	return len(all), ckpt, nil
}

// readBucket reads the current value of every key of a kind's projection.
//
// The watch behind it may be served by a replica still catching up (a
// replica that has just restarted; see eventstore.ReadUntil): a snapshot read
// there would miss the newest keys while the checkpoint, read before, says
// they are in it, and the replay after the checkpoint would never bring them
// back (CI lost a write this way on a restarted replica). So the read goes
// on until it has the bucket's last sequence as the stream's leader reports
// it, asked after the checkpoint was read: what it returns is then at least
// as new as the checkpoint, which is all the replay after it needs. A
// replica behind for eventstore.BucketLagLimit fails the read, and the cache
// replays the stream from the start instead, slower and as correct.
func readBucket(ctx context.Context, js jetstream.JetStream, k *domain.KindInfo) ([]snapshotEntry, error) {
	kv, err := js.KeyValue(ctx, BucketName(k))
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", BucketName(k), err)
	}
	last, err := eventstore.BucketLastSeq(ctx, kv)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", BucketName(k), err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", BucketName(k), err)
	}
	defer func() { _ = w.Stop() }()
	out, err := readUpdates(ctx, k, w.Updates(), last, eventstore.BucketLagLimit)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", BucketName(k), err)
	}
	return out, nil
}

// readUpdates collects a projection bucket's watch until it has the bucket's
// end (last); later updates of a key replace earlier ones, deletes remove it.
func readUpdates(ctx context.Context, k *domain.KindInfo, updates <-chan jetstream.KeyValueEntry, last uint64, lagLimit time.Duration) ([]snapshotEntry, error) {
	var out []snapshotEntry
	var at map[string]int // key → index in out, once an update follows the initial values
	err := eventstore.ReadUntil(ctx, updates, last, lagLimit, func(kve jetstream.KeyValueEntry, afterInitial bool) error {
		if afterInitial && at == nil {
			at = make(map[string]int, len(out))
			for i, s := range out {
				at[s.ref.Key()] = i
			}
		}
		if kve.Operation() != jetstream.KeyValuePut {
			if i, ok := at[kve.Key()]; ok {
				out[i].e = nil
			}
			return nil
		}
		s, err := decodeBucketEntry(k, kve)
		if err != nil {
			return err
		}
		if i, ok := at[kve.Key()]; ok {
			out[i] = s
			return nil
		}
		if at != nil {
			at[kve.Key()] = len(out)
		}
		out = append(out, s)
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Keys deleted after the initial values are dropped.
	kept := out[:0]
	for _, s := range out {
		if s.e != nil {
			kept = append(kept, s)
		}
	}
	return kept, nil
}

// decodeBucketEntry is one projection bucket value as the cache holds it.
func decodeBucketEntry(k *domain.KindInfo, kve jetstream.KeyValueEntry) (snapshotEntry, error) {
	obj := &domain.Object{}
	if err := json.Unmarshal(kve.Value(), obj); err != nil {
		return snapshotEntry{}, fmt.Errorf("key %s: %w", kve.Key(), err)
	}
	seq, err := strconv.ParseUint(obj.Metadata.ResourceVersion, 10, 64)
	if err != nil {
		return snapshotEntry{}, fmt.Errorf("key %s: resourceVersion %q", kve.Key(), obj.Metadata.ResourceVersion)
	}
	ref := domain.Ref{Kind: k.Kind, Tenant: obj.Metadata.Tenant, Name: obj.Metadata.Name}
	if ref.Key() != kve.Key() {
		return snapshotEntry{}, fmt.Errorf("key %s holds %s", kve.Key(), ref)
	}
	return snapshotEntry{ref: ref, e: newEntry(obj, kve.Value(), seq)}, nil
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

// Identity returns the uid and generation of one object without decoding
// it: what a consumer needs to tell a stale event from the current one.
func (c *Cache) Identity(ref domain.Ref) (uid string, generation int64, ok bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	idx := c.kinds[ref.Kind]
	if idx == nil {
		return "", 0, false
	}
	e, ok := idx.items[ref.Key()]
	if !ok {
		return "", 0, false
	}
	return e.uid, e.generation, true
}

// IsTerminating reports whether one object's deletion was requested, without
// decoding it; ok is false when the object does not exist.
func (c *Cache) IsTerminating(ref domain.Ref) (terminating, ok bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	idx := c.kinds[ref.Kind]
	if idx == nil {
		return false, false
	}
	e, ok := idx.items[ref.Key()]
	if !ok {
		return false, false
	}
	return e.deleting, true
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
	c.mu.RLock()
	defer c.mu.RUnlock()
	idx := c.kinds[kind]
	if idx == nil {
		return 0
	}
	if tenant == "" {
		return len(idx.items)
	}
	return idx.perTenant[tenant]
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
	// N is how many objects the pages before served (lists without a
	// selector), for Remaining without counting what is left.
	N int `json:"n,omitempty"`
}

// ErrBadContinue is returned for a continue token this server did not issue.
var ErrBadContinue = errors.New("continue token is not valid")

// List returns matching objects in key order. Continue tokens carry the last key
// served, so objects created or deleted between pages never make a page skip or
// repeat an object that existed throughout.
func (c *Cache) List(kind string, opts ListOptions) (ListResult, error) {
	after, served := "", 0
	if opts.Continue != "" {
		tok, err := decodeContinue(opts.Continue)
		if err != nil {
			return ListResult{}, err
		}
		after, served = tok.Key, tok.N
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	idx := c.kinds[kind]
	if idx == nil {
		return ListResult{}, fmt.Errorf("unknown kind %q", kind)
	}
	prefix := ""
	if opts.Tenant != "" {
		prefix = opts.Tenant + "."
	}
	start := prefix
	if after != "" {
		start = after + "\x00" // the first key after the last one served
	}
	res := ListResult{Seq: c.seq}
	// Room for every object in scope (or a page), so a list of 50,000 does
	// not grow its slices seventeen times over.
	room := len(idx.items)
	if opts.Tenant != "" {
		room = idx.perTenant[opts.Tenant]
	}
	if opts.Limit > 0 {
		room = min(room, opts.Limit)
	}
	res.Items, res.Keys = make([][]byte, 0, room), make([]string, 0, room)
	last := ""
	idx.ascend(prefix, start, func(k string) bool {
		e := idx.items[k]
		if e == nil || !opts.Selector.MatchesPairs(e.labels) {
			return true
		}
		if opts.Limit > 0 && len(res.Items) == opts.Limit {
			served += len(res.Items)
			res.Continue = encodeContinue(continueToken{Key: last, Seq: c.seq, N: served})
			if opts.Selector.Empty() {
				// Like Kubernetes' remainingItemCount, an estimate when
				// objects came or went before the cursor between pages.
				total := len(idx.items)
				if opts.Tenant != "" {
					total = idx.perTenant[opts.Tenant]
				}
				res.Remaining = max(total-served, 1)
			}
			return false
		}
		res.Items = append(res.Items, e.raw)
		res.Keys = append(res.Keys, k)
		last = k
		return true
	})
	return res, nil
}

// Children returns the refs of every object in a tenant, across tenant-scoped kinds.
func (c *Cache) Children(tenant string) []domain.Ref {
	var out []domain.Ref
	for _, k := range domain.Kinds() {
		if !k.TenantScoped {
			continue
		}
		c.mu.RLock()
		idx := c.kinds[k.Kind]
		idx.ascend(tenant+".", "", func(key string) bool {
			if e := idx.items[key]; e != nil {
				out = append(out, domain.Ref{Kind: k.Kind, Tenant: e.tenant, Name: e.name})
			}
			return true
		})
		c.mu.RUnlock()
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

// Applied is how many events this cache has applied since it started (not
// counting what it loaded from the projections).
func (c *Cache) Applied() uint64 { return c.applied.Load() }
