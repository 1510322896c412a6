package eventstore_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
)

// Replicas started together provision the same new R3 streams, buckets and
// object store at the same moment. nats-server creates each but may answer
// none of the three requests; each replica must still get its store, not a
// timeout (Open gave up with "context deadline exceeded" before
// ClusterCreateTimeout and the read-back existed).
func TestReplicasProvisionTheSameStoresAtOnce(t *testing.T) {
	secret := bytes.Repeat([]byte{6}, 32)
	addrs, dirs, others := threeNodeLayout(t)
	ns := make([]*node, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() { ns[i] = startNode(t, dirs[i], addrs[i], others(i), secret) })
	}
	wg.Wait()
	// The cluster first places a stream of its own, so that what follows
	// meets a formed cluster, as replicas that went on to provision do.
	js, err := jetstream.New(ns[0].nc)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "FORMED", Replicas: 3})
		return err == nil
	}, 2*time.Minute, 100*time.Millisecond)

	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			errs[i] = func() error {
				s, err := eventstore.Open(ctx, ns[i].nc, eventstore.Config{Replicas: 3})
				if err != nil {
					return fmt.Errorf("open: %w", err)
				}
				js := s.JetStream()
				if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "together", History: 5, Replicas: 3}); err != nil {
					return fmt.Errorf("bucket: %w", err)
				}
				if _, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "together", Replicas: 3}); err != nil {
					return fmt.Errorf("object store: %w", err)
				}
				return nil
			}()
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "node %d", i)
	}
}
