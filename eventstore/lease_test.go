package eventstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

func TestLeasesDoCancelsWorkWhenTheLeaseIsLost(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	leases, err := eventstore.OpenLeases(ctx, env.Store, ttl)
	require.NoError(t, err)
	kv, err := env.Store.JetStream().KeyValue(ctx, eventstore.LeaseBucket)
	require.NoError(t, err)

	started := make(chan context.Context, 1)
	done := make(chan error, 1)
	go func() {
		done <- leases.Do(ctx, "once", "a", func(wctx context.Context) error {
			started <- wctx
			<-wctx.Done()
			return wctx.Err()
		})
	}()
	wctx := recv(t, started, 5*time.Second, "work to start")

	// Another replica took the lease after a's expired.
	require.NoError(t, kv.Delete(ctx, "once"))
	_, err = kv.Create(ctx, "once", []byte("intruder"))
	require.NoError(t, err)

	select {
	case <-wctx.Done():
	case <-time.After(3 * ttl):
		t.Fatal("work went on after its lease was lost")
	}
	require.ErrorIs(t, recv(t, done, 5*time.Second, "Do to return"), context.Canceled)
	require.NoError(t, ctx.Err(), "only the work's context ended")
	e, err := kv.Get(ctx, "once")
	require.NoError(t, err)
	require.Equal(t, "intruder", string(e.Value()), "Do released no lease of someone else's")
}

func TestLeasesDoReleasesAfterWork(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	leases, err := eventstore.OpenLeases(ctx, env.Store, time.Second)
	require.NoError(t, err)
	kv, err := env.Store.JetStream().KeyValue(ctx, eventstore.LeaseBucket)
	require.NoError(t, err)
	ran := false
	require.NoError(t, leases.Do(ctx, "short", "a", func(context.Context) error { ran = true; return nil }))
	require.True(t, ran)
	_, err = kv.Get(ctx, "short")
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "the lease was released, not left to expire")
}
