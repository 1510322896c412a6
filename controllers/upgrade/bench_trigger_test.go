package upgrade_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/controllers/upgrade"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/projections"
)

// BenchmarkTriggerNodeGroupEvent is the upgrade trigger's cost per node
// group event in a tenant that already has n node groups: each new group is
// remembered at its version (a key in the versions bucket), which the
// benchmark waits for. The cost must not grow with n (it decoded every group
// and machine of the tenant on every event before).
func BenchmarkTriggerNodeGroupEvent(b *testing.B) {
	for _, n := range []int{100, 1000, 10000, 100000} {
		b.Run(fmt.Sprintf("groups=%d", n), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			env := eventstoretest.Start(b)
			cache := projections.NewCache(env.Store, nil)
			cacheDone := make(chan error, 1)
			go func() { cacheDone <- cache.Run(ctx) }()
			defer func() { cancel(); <-cacheDone }()
			create := func(kind *domain.KindInfo, tenant, name, spec string) {
				_, err := env.Store.Execute(ctx, domain.Command{Op: domain.OpCreate, Ref: domain.Ref{Kind: kind.Kind, Tenant: tenant, Name: name},
					Object: &domain.Object{Metadata: domain.ObjectMeta{Name: name, Tenant: tenant}, Spec: json.RawMessage(spec)},
					Actor:  "bench", Now: time.Now(), NewUID: uuid.NewString()}, eventstore.UpdateOptions{})
				require.NoError(b, err)
			}
			create(domain.TenantKind, "", "acme", `{"talosVersion":"v1.13.0"}`)
			groupSpec := `{"role":"worker","count":1,"provider":"emu"}`
			var wg sync.WaitGroup
			const writers = 16
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; i < n; i += writers {
						create(domain.NodeGroupKind, "acme", fmt.Sprintf("ng-%06d", i), groupSpec)
					}
				}()
			}
			wg.Wait()
			require.NoError(b, cache.Sync(ctx))
			saga := upgrade.New(upgrade.Config{Store: env.Store, Cache: cache, Holder: "bench"})
			sagaDone := make(chan error, 1)
			sagaCtx, stopSaga := context.WithCancel(ctx)
			go func() { sagaDone <- saga.Run(sagaCtx) }()
			defer func() { stopSaga(); <-sagaDone }()
			kv, err := env.Store.JetStream().KeyValue(ctx, upgrade.VersionsBucket)
			for err != nil {
				time.Sleep(10 * time.Millisecond)
				kv, err = env.Store.JetStream().KeyValue(ctx, upgrade.VersionsBucket)
			}
			remembered := func(want int) {
				for {
					st, err := kv.Status(ctx)
					require.NoError(b, err)
					if int(st.Values()) >= want {
						return
					}
					time.Sleep(time.Millisecond)
				}
			}
			remembered(n)
			b.ResetTimer()
			for i := range b.N {
				create(domain.NodeGroupKind, "acme", fmt.Sprintf("new-%06d", i), groupSpec)
			}
			remembered(n + b.N)
		})
	}
}
