package projections

// Reads of the cache: one object, counts, lists with label selectors and
// continue tokens, and the refs the finalizers and controllers ask for.

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/rezuscloud/rezuscloud/domain"
)

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
