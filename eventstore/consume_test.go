package eventstore_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

// A consumer that stops (a replica losing its lease, a restart) hands back
// what it pulled but did not handle: the next ConsumeDurable of the durable
// gets an event appended right after the stop at once, not after the
// consumer's AckWait (an hour here, so the test cannot pass by waiting it out).
func TestConsumeDurableHandsBackOnStop(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	_, err := env.Store.JetStream().CreateConsumer(ctx, eventstore.StreamName, jetstream.ConsumerConfig{
		Durable: "handback", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour})
	require.NoError(t, err)

	got := make(chan string, 16)
	consume := func() (stop func()) {
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- env.Store.ConsumeDurable(cctx, "handback", slog.Default(), func(_ context.Context, m jetstream.Msg) error {
				got <- m.Subject()
				return nil
			})
		}()
		return func() {
			cancel()
			require.NoError(t, <-done)
		}
	}

	stop := consume()
	mustExecute(t, ctx, env.Store, createCmd(tenantRef("first"), "u1"))
	require.Equal(t, tenantRef("first").Subject(), recv(t, got, 10*time.Second, "the first event"))
	stop()

	mustExecute(t, ctx, env.Store, createCmd(tenantRef("second"), "u2"))
	stop = consume()
	defer stop()
	require.Equal(t, tenantRef("second").Subject(), recv(t, got, 20*time.Second, "the event appended after the stop"))
}
