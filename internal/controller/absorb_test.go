package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
)

// queueWrites is how many writes the queue bucket has taken.
func (h *harness) queueWrites(t *testing.T) uint64 {
	info, err := h.env.Store.JetStream().Stream(context.Background(), "KV_"+h.cfg.Queue)
	require.NoError(t, err)
	return info.CachedInfo().State.LastSeq
}

// consumed waits until the runtime's consumer has handled every event in
// the stream now. NumPending alone is not enough: the server counts a new
// message for a consumer when the stream signals it, asynchronously, so on
// a loaded machine it read 0 before the last touch was counted (CI: the run
// got 5 of 6 sources). The ack floor reaching the stream's last sequence is.
func (h *harness) consumed(t *testing.T) {
	ctx := context.Background()
	stream, err := h.env.Store.JetStream().Stream(ctx, eventstore.StreamName)
	require.NoError(t, err)
	sinfo, err := stream.Info(ctx)
	require.NoError(t, err)
	last := sinfo.State.LastSeq
	cons, err := h.env.Store.JetStream().Consumer(ctx, eventstore.StreamName, h.cfg.Consumer.Durable)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.AckFloor.Stream >= last && info.NumPending == 0 && info.NumAckPending == 0
	}, 10*time.Second, 5*time.Millisecond)
}

// Events for a key that is queued and not taken by a run cost no queue
// write: the run reads the read model when it starts, and gets the events'
// times (the debounce counts from the last) and sources with its entry. An
// event during a run still writes the bucket: that is the follow-up.
func TestEventsForAQueuedKeyAreAbsorbed(t *testing.T) {
	h := newHarness(t)
	f := newFake()
	f.debounce = 2 * time.Second
	f.gated = true
	_, stop := h.run(t, f)

	h.touch(t, "a")
	// The scheduler has seen the entry once it waits for its debounce.
	require.Eventually(t, func() bool { return h.clock.Waiting().Equal(t0.Add(2 * time.Second)) }, 10*time.Second, 5*time.Millisecond)
	writes := h.queueWrites(t)
	h.clock.Advance(time.Second)
	for range 5 {
		h.touch(t, "a")
	}
	h.consumed(t)
	require.Equal(t, writes, h.queueWrites(t), "events for a queued key wrote the bucket")

	// The debounce counts from the last event: not due at t0+2s.
	h.clock.Advance(time.Second)
	require.Eventually(t, func() bool { return h.clock.Waiting().Equal(t0.Add(3 * time.Second)) }, 10*time.Second, 5*time.Millisecond)
	require.Empty(t, f.started)
	h.clock.Advance(time.Second)
	s := recv(t, f.started, "the run")
	require.Len(t, s.entry.Sources, 6, "every event's source reaches the run: %v", s.entry.Sources)
	require.Equal(t, t0, s.entry.First)
	require.Equal(t, t0.Add(time.Second), s.entry.Last)

	// During the run, an event writes the bucket: a follow-up run comes.
	h.touch(t, "a")
	h.consumed(t)
	require.Greater(t, h.queueWrites(t), writes)
	f.release("a")
	// The follow-up waits for its debounce, or (the event's own debounce
	// over by the time the run ended, on a loaded host) starts at once:
	// either way it comes. CI once timed out here waiting for the wait
	// alone (not reproduced in 70 local runs, under load too).
	require.Eventually(t, func() bool { return !h.clock.Waiting().IsZero() || len(f.started) > 0 }, 10*time.Second, 5*time.Millisecond)
	if w := h.clock.Waiting(); len(f.started) == 0 && !w.IsZero() {
		h.clock.Advance(w.Sub(h.clock.Now()))
	}
	s = recv(t, f.started, "the follow-up")
	require.Equal(t, "Tenant/a@7", s.entry.Sources[len(s.entry.Sources)-1])
	f.release("a")
	require.Eventually(t, func() bool { return !h.queued(t, "a") }, 10*time.Second, 5*time.Millisecond, "done: dequeued")
	require.NoError(t, stop())
}
