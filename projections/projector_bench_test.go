package projections_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/projections"
)

// BenchmarkProjectorNodeGroupEvent is the KV projector's cost per node group
// event in a tenant that already has n node groups: the write, the event
// decoded and its object written to the kind's bucket, pipelined, with the
// checkpoint after each batch. The cost must not grow with n.
func BenchmarkProjectorNodeGroupEvent(b *testing.B) {
	for _, n := range []int{100, 1000, 10000, 100000} {
		b.Run(fmt.Sprintf("groups=%d", n), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			env := eventstoretest.Start(b)
			env.Create(b, domain.TenantKind, "", "acme", `{"talosVersion":"v1.13.0"}`)
			spec := `{"role":"worker","count":1,"provider":"emu"}`
			env.Populate(b, domain.NodeGroupKind, "acme", "ng", n, spec)
			p := projections.NewProjector(env.Store, nil, "bench")
			done := make(chan error, 1)
			go func() { done <- p.Run(ctx) }()
			defer func() { cancel(); <-done }()
			caughtUp := func(seq uint64) {
				for p.Checkpoint() < seq {
					time.Sleep(time.Millisecond)
				}
			}
			_, last, err := env.Store.Bounds(ctx)
			if err != nil {
				b.Fatal(err)
			}
			caughtUp(last)
			b.ResetTimer()
			for i := range b.N {
				last = env.Create(b, domain.NodeGroupKind, "acme", fmt.Sprintf("new-%07d", i), spec)
			}
			caughtUp(last)
		})
	}
}
