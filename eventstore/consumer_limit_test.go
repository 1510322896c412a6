package eventstore_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

// Issue 13, defect 4: the event stream's consumer limit is set explicitly to
// the watch limit plus a reserve for the server's own consumers, so watches
// refused at their limit can never take the consumers the server needs; an
// existing stream (made by an older version, without a limit) gets it on
// the next start.
func TestEventStreamConsumerLimit(t *testing.T) {
	ctx := testCtx(t)
	env := eventstoretest.Start(t)
	js := env.Store.JetStream()
	maxConsumers := func() int {
		t.Helper()
		st, err := js.Stream(ctx, eventstore.StreamName)
		require.NoError(t, err)
		info, err := st.Info(ctx)
		require.NoError(t, err)
		return info.Config.MaxConsumers
	}
	require.Equal(t, eventstore.DefaultMaxWatches+eventstore.InternalConsumerReserve, maxConsumers(), "the default")

	// A stream as older versions left it: no limit of its own.
	st, err := js.Stream(ctx, eventstore.StreamName)
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	cfg.MaxConsumers = -1
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	require.Equal(t, -1, maxConsumers())

	_, err = eventstore.Open(ctx, env.Conn, eventstore.Config{MaxWatches: 3})
	require.NoError(t, err)
	require.Equal(t, 3+eventstore.InternalConsumerReserve, maxConsumers(), "updated on start")

	// The limit holds: beyond it JetStream refuses another consumer.
	for range 3 + eventstore.InternalConsumerReserve {
		_, err := js.OrderedConsumer(ctx, eventstore.StreamName, jetstream.OrderedConsumerConfig{})
		require.NoError(t, err)
	}
	_, err = js.OrderedConsumer(ctx, eventstore.StreamName, jetstream.OrderedConsumerConfig{})
	require.ErrorIs(t, err, jetstream.ErrMaximumConsumersLimit)
}
