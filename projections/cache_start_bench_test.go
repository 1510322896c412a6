package projections_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/projections"
)

// BenchmarkCacheStartAfterHistory is a replica's start-up: the time until
// its read model is ready, with a history of events updates of 10,000 node
// groups already projected by the projector (the buckets and checkpoint a
// running server keeps), plus a tail of 1,000 events it has not projected.
// It should follow the number of objects, not the history's length.
func BenchmarkCacheStartAfterHistory(b *testing.B) {
	for _, events := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("events=%d", events), func(b *testing.B) {
			env := eventstoretest.Start(b)
			store := env.Store
			js := store.JetStream()
			const objects = 10_000
			created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			publish := func(i int) {
				name := fmt.Sprintf("ng-%05d", i%objects)
				action, typ := domain.ActionUpdated, "NodeGroupUpdated"
				if i < objects {
					action, typ = domain.ActionCreated, "NodeGroupCreated"
				}
				ev := domain.Event{Type: typ, Action: action, Actor: "bench", Object: &domain.Object{
					APIVersion: domain.APIVersion, Kind: "NodeGroup",
					Metadata: domain.ObjectMeta{Name: name, Tenant: "acme", UID: "uid-" + name, CreationTimestamp: &created, Generation: int64(i/objects + 1)},
					Spec:     json.RawMessage(fmt.Sprintf(`{"role":"worker","count":%d,"provider":"emu"}`, i%7+1))}}
				data, err := json.Marshal(ev)
				require.NoError(b, err)
				msg := &nats.Msg{Subject: ev.Ref().Subject(), Data: data, Header: nats.Header{}}
				msg.Header.Set(eventstore.HeaderEventType, typ)
				_, err = js.PublishMsgAsync(msg)
				require.NoError(b, err)
			}
			for i := range events {
				publish(i)
				if i%10_000 == 9_999 {
					<-js.PublishAsyncComplete()
				}
			}
			<-js.PublishAsyncComplete()
			p := projections.NewProjector(store, nil, "bench")
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- p.Run(ctx) }()
			_, last, err := store.Bounds(ctx)
			require.NoError(b, err)
			for p.Checkpoint() < last {
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
			<-done
			for i := range 1000 {
				publish(events + i)
			}
			<-js.PublishAsyncComplete()
			b.ResetTimer()
			for range b.N {
				c := projections.NewCache(store, nil)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- c.Run(ctx) }()
				for !c.Ready() {
					time.Sleep(time.Millisecond)
				}
				b.StopTimer()
				require.Equal(b, objects, c.Count("NodeGroup", "acme"))
				cancel()
				require.NoError(b, <-done)
				b.StartTimer()
			}
		})
	}
}
