package configsync_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/controllers/configsync"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// BenchmarkConfigSyncNodeGroupEvent is the config controller's cost per node
// group event in a tenant that already has n machines: the write, and the
// controller's consumer taking it (kind by subject, the read model caught
// up, the tenant counted as having machines, its key absorbed into its
// queued entry). Runs are held back by a long debounce, so only the event
// path is measured. The cost must not grow with n.
func BenchmarkConfigSyncNodeGroupEvent(b *testing.B) {
	for _, n := range []int{100, 1000, 10000, 100000} {
		b.Run(fmt.Sprintf("machines=%d", n), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			env := eventstoretest.Start(b)
			cache := projections.NewCache(env.Store, nil)
			cacheDone := make(chan error, 1)
			go func() { cacheDone <- cache.Run(ctx) }()
			defer func() { cancel(); <-cacheDone }()
			env.Create(b, domain.TenantKind, "", "acme", `{"talosVersion":"v1.13.0"}`)
			env.Populate(b, domain.MachineKind, "acme", "m", n, `{"nodeGroup":"workers","role":"worker","address":"10.0.0.1"}`)
			c := configsync.New(configsync.Config{Store: env.Store, Cache: cache, Holder: "bench",
				Talos: talos.NewService(cache, nil), Debounce: time.Hour})
			cctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- c.Run(cctx) }()
			defer func() { stop(); <-done }()
			consumedAll(b, env, configsync.Consumer)
			spec := `{"role":"worker","count":1,"provider":"emu"}`
			b.ResetTimer()
			for i := range b.N {
				env.Create(b, domain.NodeGroupKind, "acme", fmt.Sprintf("new-%07d", i), spec)
			}
			consumedAll(b, env, configsync.Consumer)
		})
	}
}

// consumedAll waits until the durable consumer has taken every event.
func consumedAll(b *testing.B, env *eventstoretest.Env, durable string) {
	b.Helper()
	ctx := context.Background()
	for {
		cons, err := env.Store.JetStream().Consumer(ctx, eventstore.StreamName, durable)
		if err == nil {
			if info, err := cons.Info(ctx); err == nil && info.NumPending == 0 && info.NumAckPending == 0 {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
}
