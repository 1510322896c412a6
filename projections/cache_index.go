package projections

// The cache's indexes: per kind, the objects by key (ordered, for lists
// and pages), per tenant, and by what they name (a node group's machines, a
// Provider's node groups).

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/google/btree"

	"github.com/rezuscloud/rezuscloud/domain"
)

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
