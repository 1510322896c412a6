package controller_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
)

// A burst of events is queued a few writes at a time, each event acked once
// its key is in: every key runs, and a runtime stopped in the middle of the
// burst leaves nothing to wait out the consumer's ack deadline, since the
// next one takes the rest at once.
func TestABurstOfEventsIsQueuedAndAcked(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	const n = 100
	for i := range n {
		h.touch(t, "t"+strconv.Itoa(i))
	}
	f := newFake()
	_, stop := h.run(t, f)
	seen := map[string]bool{}
	for len(seen) < n/4 {
		seen[recv(t, f.started, "a run").key] = true
	}
	require.NoError(t, stop())
	f2 := newFake()
	h.cfg.Holder = "replica-2"
	h.run(t, f2)
	for len(seen) < n {
		select {
		case s := <-f.started:
			seen[s.key] = true
		case s := <-f2.started:
			seen[s.key] = true
		case <-time.After(10 * time.Second):
			for i := range n {
				if k := "t" + strconv.Itoa(i); !seen[k] {
					t.Logf("%s did not run; queued: %v", k, h.queued(t, k))
				}
			}
			t.Fatalf("%d of %d keys ran", len(seen), n)
		}
	}
	cons, err := h.env.Store.JetStream().Consumer(ctx, eventstore.StreamName, "test")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}, 10*time.Second, 10*time.Millisecond, "every event acked")
}

// Events for one key while it runs (none absorbed: the key is closed) are
// written one after another by that key's writer, all acked, and their
// changes run once more after the run.
func TestABurstForOneRunningKeyIsWrittenInOrder(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	f := newFake()
	f.gated = true
	h.run(t, f)
	h.touch(t, "acme")
	recv(t, f.started, "the first run")
	const n = 50
	for range n {
		h.touch(t, "acme")
	}
	cons, err := h.env.Store.JetStream().Consumer(ctx, eventstore.StreamName, "test")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0
	}, 10*time.Second, 10*time.Millisecond, "every event acked, none delivered again")
	require.True(t, h.queued(t, "acme"), "the changes wait in the bucket")
	f.release("acme")
	recv(t, f.started, "the follow-up run")
	f.release("acme")
}
