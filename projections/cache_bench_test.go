package projections

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// nodeGroupRecord is the creation (or deletion) event of one node group.
func nodeGroupRecord(seq uint64, tenant, name string, deleted bool) *eventstore.Record {
	action, typ := domain.ActionCreated, "NodeGroupCreated"
	if deleted {
		action, typ = domain.ActionDeleted, "NodeGroupDeleted"
	}
	created := time.Unix(1700000000, 0).UTC()
	obj := &domain.Object{
		APIVersion: domain.APIVersion, Kind: domain.NodeGroupKind.Kind,
		Metadata: domain.ObjectMeta{Name: name, Tenant: tenant, UID: fmt.Sprintf("uid-%d", seq),
			Labels: map[string]string{"pool": "a"}, CreationTimestamp: &created},
		Spec: []byte(`{"role":"worker","count":3,"provider":"emu"}`),
	}
	return &eventstore.Record{Seq: seq, Event: &domain.Event{Type: typ, Action: action, Object: obj}}
}

// BenchmarkCacheEventThenRead is the read model's cost per event as the
// stream's consumers see it: an object created and one deleted (so the
// tenant keeps its size), each followed by a count and a first page of the
// tenant's node groups, as the triggers and the API read after a write. The
// cost must not grow with the number of objects in the tenant.
func BenchmarkCacheEventThenRead(b *testing.B) {
	for _, n := range []int{100, 1000, 10000, 100000} {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			c := NewCache(nil, nil)
			seq := uint64(0)
			for i := 0; i < n; i++ {
				seq++
				c.apply(nodeGroupRecord(seq, "acme", fmt.Sprintf("ng-%07d", i), false))
			}
			c.Count(domain.NodeGroupKind.Kind, "acme")
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				seq++
				c.apply(nodeGroupRecord(seq, "acme", fmt.Sprintf("ng-%07d", n+i), false))
				if c.Count(domain.NodeGroupKind.Kind, "acme") != n+1 {
					b.Fatal("count")
				}
				seq++
				c.apply(nodeGroupRecord(seq, "acme", fmt.Sprintf("ng-%07d", i), true))
				if res, err := c.List(domain.NodeGroupKind.Kind, ListOptions{Tenant: "acme", Limit: 1}); err != nil || len(res.Items) != 1 {
					b.Fatal("list", err)
				}
			}
		})
	}
}

// BenchmarkChangeFeedEvent is the web UI change feed's cost per event: the
// read model applies a node group event in a tenant with n objects and tells
// 64 open live pages (half watching the tenant, half another) whose filters
// match. The cost must not grow with n.
func BenchmarkChangeFeedEvent(b *testing.B) {
	for _, n := range []int{100, 1000, 10000, 100000} {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			c := NewCache(nil, nil)
			seq := uint64(0)
			for i := 0; i < n; i++ {
				seq++
				c.apply(nodeGroupRecord(seq, "acme", fmt.Sprintf("ng-%07d", i), false))
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var feeds []<-chan uint64
			for i := range 64 {
				tenant := "acme"
				if i%2 == 1 {
					tenant = "other"
				}
				ch, _, err := c.Changes(ctx, []string{domain.SubjectFilter(domain.NodeGroupKind, tenant, "")})
				if err != nil {
					b.Fatal(err)
				}
				feeds = append(feeds, ch)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				seq++
				rec := nodeGroupRecord(seq, "acme", fmt.Sprintf("ng-%07d", n+i), false)
				rec.Subject = domain.ObjectRef(domain.NodeGroupKind, "acme", rec.Event.Object.Metadata.Name).Subject()
				c.apply(rec)
				if got := <-feeds[0]; got != seq {
					b.Fatalf("feed got %d, want %d", got, seq)
				}
			}
		})
	}
}

// BenchmarkCacheListAll is what a list of every node group costs the read
// model (the handler writes the items it returns as they are): 50,000 in
// 10,000 tenants, as rezusbench populates.
func BenchmarkCacheListAll(b *testing.B) {
	c := NewCache(nil, nil)
	const tenants, groups = 10000, 50000
	for i := range groups {
		c.apply(nodeGroupRecord(uint64(i+1), fmt.Sprintf("t%05d", i%tenants), fmt.Sprintf("ng-%06d", i), false))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		res, err := c.List(domain.NodeGroupKind.Kind, ListOptions{})
		if err != nil || len(res.Items) != groups {
			b.Fatalf("%d items, %v", len(res.Items), err)
		}
	}
}

// BenchmarkNodeGroupsOfProvider is what a Provider event costs the apply
// worker (which tenants it may change) and a Provider type change costs the
// API: the node groups naming the Provider, 10 of them, among 100 to 50,000.
// The cost must stay flat; "list" is the scan it replaced.
func BenchmarkNodeGroupsOfProvider(b *testing.B) {
	for _, n := range []int{100, 1000, 10000, 50000} {
		c := NewCache(nil, nil)
		for i := range n {
			r := nodeGroupRecord(uint64(i+1), fmt.Sprintf("t%04d", i/10), fmt.Sprintf("ng-%d", i%10), false)
			if i%(n/10) == 0 {
				r.Event.Object.Spec = []byte(`{"role":"worker","count":3,"provider":"rare"}`)
			}
			c.apply(r)
		}
		b.Run(fmt.Sprintf("index/groups=%d", n), func(b *testing.B) {
			for b.Loop() {
				if got := len(c.NodeGroupsOf("rare")); got != 10 {
					b.Fatalf("%d node groups of rare", got)
				}
			}
		})
		b.Run(fmt.Sprintf("list/groups=%d", n), func(b *testing.B) {
			for b.Loop() {
				all, err := List[domain.NodeGroup](c, domain.NodeGroupKind, ListOptions{})
				if err != nil {
					b.Fatal(err)
				}
				found := 0
				for _, g := range all {
					if g.Spec.Provider == "rare" {
						found++
					}
				}
				if found != 10 {
					b.Fatalf("%d node groups of rare", found)
				}
			}
		})
	}
}
