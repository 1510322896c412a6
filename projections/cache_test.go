package projections

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// pageAll lists a tenant's node groups page by page and returns the names in
// the order served and each page's remaining count.
func pageAll(t *testing.T, c *Cache, opts ListOptions, between func(page int)) (names []string, remaining []int) {
	t.Helper()
	for page := 0; ; page++ {
		res, err := c.List(domain.NodeGroupKind.Kind, opts)
		require.NoError(t, err)
		names = append(names, res.Keys...)
		remaining = append(remaining, res.Remaining)
		if res.Continue == "" {
			return names, remaining
		}
		opts.Continue = res.Continue
		if between != nil {
			between(page)
		}
	}
}

func TestCacheListPages(t *testing.T) {
	c := NewCache(nil, nil)
	seq := uint64(0)
	add := func(tenant, name string) {
		seq++
		c.apply(nodeGroupRecord(seq, tenant, name, false))
	}
	del := func(tenant, name string) {
		seq++
		c.apply(nodeGroupRecord(seq, tenant, name, true))
	}
	for i := 0; i < 10; i++ {
		add("acme", fmt.Sprintf("ng-%02d", i))
		add("beta", fmt.Sprintf("ng-%02d", i))
	}
	add("acme-2", "ng-00") // a tenant whose name extends another's

	names, remaining := pageAll(t, c, ListOptions{Tenant: "acme", Limit: 4}, nil)
	require.Len(t, names, 10)
	require.Equal(t, "acme.ng-00", names[0])
	require.Equal(t, "acme.ng-09", names[9])
	require.Equal(t, []int{6, 2, 0}, remaining, "remaining counts what the next pages hold")
	require.Equal(t, 10, c.Count(domain.NodeGroupKind.Kind, "acme"))
	require.Equal(t, 1, c.Count(domain.NodeGroupKind.Kind, "acme-2"))
	require.Equal(t, 21, c.Count(domain.NodeGroupKind.Kind, ""))

	all, remaining := pageAll(t, c, ListOptions{Limit: 8}, nil)
	require.Len(t, all, 21)
	require.Equal(t, []int{13, 5, 0}, remaining)
	require.IsIncreasing(t, all)

	// Objects created and deleted between pages: none that lived throughout
	// is skipped or served twice; a new one after the cursor is served.
	names, _ = pageAll(t, c, ListOptions{Tenant: "acme", Limit: 3}, func(page int) {
		if page == 0 {
			del("acme", "ng-01")  // already served
			del("acme", "ng-05")  // not served yet: gone
			add("acme", "ng-00a") // before the cursor: not served
			add("acme", "ng-07a") // after it: served
		}
	})
	require.Equal(t, []string{"acme.ng-00", "acme.ng-01", "acme.ng-02", "acme.ng-03", "acme.ng-04", "acme.ng-06",
		"acme.ng-07", "acme.ng-07a", "acme.ng-08", "acme.ng-09"}, names)

	// A selector pages by matches and gives no remaining count.
	sel, err := domain.ParseSelector("pool=a")
	require.NoError(t, err)
	names, remaining = pageAll(t, c, ListOptions{Tenant: "beta", Selector: sel, Limit: 6}, nil)
	require.Len(t, names, 10)
	require.Equal(t, []int{0, 0}, remaining)

	refs := c.Children("acme")
	require.Len(t, refs, 10)
	require.Equal(t, 10, c.Count(domain.NodeGroupKind.Kind, "acme"))
	for _, r := range refs {
		del(r.Tenant, r.Name)
	}
	require.Zero(t, c.Count(domain.NodeGroupKind.Kind, "acme"))
	require.Empty(t, c.Children("acme"))
	require.Len(t, c.Children("acme-2"), 1)
}

func machineRecord(seq uint64, tenant, name, group string, deleted bool) *eventstore.Record {
	r := nodeGroupRecord(seq, tenant, name, deleted)
	r.Event.Object.Kind = domain.MachineKind.Kind
	r.Event.Object.Spec = []byte(fmt.Sprintf(`{"nodeGroup":%q,"role":"worker"}`, group))
	return r
}

// A node group's machines are found through the group index as machines
// come, move between groups and go.
func TestCacheInGroup(t *testing.T) {
	c := NewCache(nil, nil)
	names := func(tenant, group string) []string {
		var out []string
		ms, err := InGroup[domain.Machine](c, domain.MachineKind, tenant, group)
		require.NoError(t, err)
		for _, m := range ms {
			require.Equal(t, group, m.Spec.NodeGroup)
			out = append(out, m.Metadata.Name)
		}
		return out
	}
	c.apply(machineRecord(1, "acme", "w-1", "workers", false))
	c.apply(machineRecord(2, "acme", "w-0", "workers", false))
	c.apply(machineRecord(3, "acme", "cp-0", "cp", false))
	c.apply(machineRecord(4, "beta", "w-0", "workers", false))
	require.Equal(t, []string{"w-0", "w-1"}, names("acme", "workers"))
	require.Equal(t, []string{"cp-0"}, names("acme", "cp"))
	require.Equal(t, []string{"w-0"}, names("beta", "workers"))

	c.apply(machineRecord(5, "acme", "w-1", "gpu", false)) // moved
	require.Equal(t, []string{"w-0"}, names("acme", "workers"))
	require.Equal(t, []string{"w-1"}, names("acme", "gpu"))

	c.apply(machineRecord(6, "acme", "w-0", "workers", true))
	require.Empty(t, names("acme", "workers"))
	require.Empty(t, c.kinds[domain.MachineKind.Kind].byRef["acme.workers"], "an empty group leaves no set behind")
}

// The node groups of a Provider are found through the provider index as
// they come, change provider and go, across tenants.
func TestCacheNodeGroupsOf(t *testing.T) {
	c := NewCache(nil, nil)
	group := func(seq uint64, tenant, name, provider string, deleted bool) *eventstore.Record {
		r := nodeGroupRecord(seq, tenant, name, deleted)
		r.Event.Object.Spec = []byte(fmt.Sprintf(`{"role":"worker","count":1,"provider":%q}`, provider))
		return r
	}
	of := func(provider string) []string {
		var out []string
		for _, raw := range c.NodeGroupsOf(provider) {
			var ng domain.NodeGroup
			require.NoError(t, json.Unmarshal(raw, &ng))
			require.Equal(t, provider, ng.Spec.Provider)
			out = append(out, ng.Metadata.Tenant+"/"+ng.Metadata.Name)
		}
		return out
	}
	c.apply(group(1, "acme", "workers", "oci", false))
	c.apply(group(2, "beta", "workers", "oci", false))
	c.apply(group(3, "acme", "cp", "metal", false))
	require.Equal(t, []string{"acme/workers", "beta/workers"}, of("oci"))
	require.Equal(t, []string{"acme/cp"}, of("metal"))

	c.apply(group(4, "beta", "workers", "metal", false)) // moved to another provider
	require.Equal(t, []string{"acme/workers"}, of("oci"))
	require.Equal(t, []string{"acme/cp", "beta/workers"}, of("metal"))

	c.apply(group(5, "acme", "workers", "oci", true))
	require.Empty(t, of("oci"))
	require.Empty(t, c.kinds[domain.NodeGroupKind.Kind].byRef[providerRef("oci")], "no set left behind")
}

// Members moves only when objects come or go; Names lists them undecoded.
func TestCacheMembersAndNames(t *testing.T) {
	c := NewCache(nil, nil)
	tenant := func(seq uint64, name string, deleted bool) *eventstore.Record {
		r := nodeGroupRecord(seq, "", name, deleted)
		r.Event.Object.Kind = domain.TenantKind.Kind
		return r
	}
	kind := domain.TenantKind.Kind
	m0 := c.Members(kind)
	c.apply(tenant(1, "beta", false))
	c.apply(tenant(2, "acme", false))
	m1 := c.Members(kind)
	require.NotEqual(t, m0, m1)
	require.Equal(t, []string{"acme", "beta"}, c.Names(kind))
	c.apply(tenant(3, "acme", false)) // a change, not a new member
	require.Equal(t, m1, c.Members(kind))
	c.apply(tenant(4, "acme", true))
	require.NotEqual(t, m1, c.Members(kind))
	require.Equal(t, []string{"beta"}, c.Names(kind))
}

// Identity and IsTerminating answer from the entry, as the decoded object
// would: the uid and generation of the object's last event, and whether its
// deletion was requested.
func TestCacheIdentityAndTerminatingWithoutDecoding(t *testing.T) {
	c := NewCache(nil, nil)
	ref := domain.Ref{Kind: domain.NodeGroupKind.Kind, Tenant: "acme", Name: "workers"}
	_, _, ok := c.Identity(ref)
	require.False(t, ok)
	_, ok = c.IsTerminating(ref)
	require.False(t, ok)

	r := nodeGroupRecord(1, "acme", "workers", false)
	r.Event.Object.Metadata.UID, r.Event.Object.Metadata.Generation = "u-1", 3
	c.apply(r)
	uid, gen, ok := c.Identity(ref)
	require.True(t, ok)
	require.Equal(t, "u-1", uid)
	require.EqualValues(t, 3, gen)
	terminating, ok := c.IsTerminating(ref)
	require.True(t, ok)
	require.False(t, terminating)

	r = nodeGroupRecord(2, "acme", "workers", false)
	r.Event.Object.Metadata.UID, r.Event.Object.Metadata.Generation = "u-1", 4
	now := time.Now()
	r.Event.Object.Metadata.DeletionTimestamp = &now
	c.apply(r)
	obj, ok := c.GetObject(ref)
	require.True(t, ok)
	uid, gen, _ = c.Identity(ref)
	require.Equal(t, obj.Metadata.UID, uid)
	require.Equal(t, obj.Metadata.Generation, gen)
	terminating, _ = c.IsTerminating(ref)
	require.Equal(t, obj.Terminating(), terminating)
	require.True(t, terminating)

	c.apply(nodeGroupRecord(3, "acme", "workers", true))
	_, _, ok = c.Identity(ref)
	require.False(t, ok)
}
