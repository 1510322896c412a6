package apply

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/internal/controller/controllertest"
	"github.com/rezuscloud/rezuscloud/projections"
)

// The worker's debounce, on a clock the test moves: changes to a config patch
// of a tenant with nothing to build make runs that do nothing, so the runs
// counted are the debounce's. The changes after the first are absorbed
// (no queue write) and still move the debounce.
func TestDebounceMakesOneRunOfABurstAndCapsTheDelay(t *testing.T) {
	env := eventstoretest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	cache := projections.NewCache(env.Store, nil)
	cacheDone := make(chan error, 1)
	go func() { cacheDone <- cache.Run(ctx) }()
	clock := controllertest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	w := NewWorker(Config{Store: env.Store, Cache: cache, Holder: "test", Clock: clock,
		Debounce: 2 * time.Second, MaxDelay: 8 * time.Second, Resync: -1})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done); <-cacheDone })
	require.Eventually(t, w.Leading, 10*time.Second, 5*time.Millisecond)
	kv, err := openQueue(ctx, env.Store)
	require.NoError(t, err)

	// The tenant alone queues nothing: it has nothing to build.
	_, err = env.Store.Update(ctx, domain.TenantRef("acme"), eventstore.UpdateOptions{}, func(*domain.Object) ([]domain.Event, error) {
		return domain.Decide(nil, domain.Command{Op: domain.OpCreate, Ref: domain.TenantRef("acme"), Object: &domain.Object{}, Actor: "test", Now: clock.Now(), NewUID: "uid"})
	})
	require.NoError(t, err)
	cons, err := env.Store.JetStream().Consumer(ctx, eventstore.StreamName, WorkerConsumer)
	require.NoError(t, err)
	consumed := func() {
		t.Helper()
		require.Eventually(t, func() bool {
			info, err := cons.Info(ctx)
			return err == nil && info.NumPending == 0 && info.NumAckPending == 0
		}, 10*time.Second, 5*time.Millisecond, "the change consumed")
	}
	consumed()
	_, err = kv.Get(ctx, "acme")
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "a tenant without node groups was queued")

	// touch changes a config patch of the tenant and waits until the worker
	// has taken the change and waits for when it is due: the quiet time
	// after it, or the cap.
	ref := domain.ObjectRef(domain.ConfigPatchKind, "acme", "p")
	var first time.Time
	touch := func() {
		t.Helper()
		_, err := env.Store.Update(ctx, ref, eventstore.UpdateOptions{}, func(state *domain.Object) ([]domain.Event, error) {
			if state == nil {
				obj := &domain.Object{Metadata: domain.ObjectMeta{Name: "p"}, Spec: json.RawMessage(`{"patch":"machine:\n  env:\n    A: b\n"}`)}
				return domain.Decide(nil, domain.Command{Op: domain.OpCreate, Ref: ref, Object: obj, Actor: "test", Now: clock.Now(), NewUID: "uid-p"})
			}
			obj := state.DeepCopy()
			obj.Metadata.ResourceVersion = ""
			obj.Metadata.Labels = map[string]string{"rv": state.Metadata.ResourceVersion}
			return domain.Decide(state, domain.Command{Op: domain.OpUpdate, Ref: ref, Object: obj, Actor: "test", Now: clock.Now()})
		})
		require.NoError(t, err)
		consumed()
		if first.IsZero() {
			first = clock.Now()
		}
		due := clock.Now().Add(2 * time.Second)
		if limit := first.Add(8 * time.Second); limit.Before(due) {
			due = limit
		}
		require.Eventually(t, func() bool { return slices.ContainsFunc(clock.Waits(), due.Equal) }, 10*time.Second, 5*time.Millisecond, "the worker waits for %s", due)
	}

	// Five changes a second apart: never 2s of quiet, so no run.
	for range 5 {
		touch()
		clock.Advance(time.Second)
	}
	require.Zero(t, w.Started(), "a run inside the burst")
	// Quiet for the debounce: one run, and nothing stays queued.
	clock.Advance(time.Second)
	require.Eventually(t, func() bool { return w.Started() == 1 }, 10*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool {
		_, err := kv.Get(ctx, "acme")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	}, 10*time.Second, 5*time.Millisecond, "the run took the burst off the queue")

	// Changes that keep coming wait no longer than MaxDelay after the first.
	first = time.Time{}
	for range 8 {
		touch()
		require.Equal(t, 1, w.Started(), "a run inside the second burst before the cap")
		clock.Advance(time.Second)
	}
	require.Eventually(t, func() bool { return w.Started() == 2 }, 10*time.Second, 5*time.Millisecond, "a run once the first change waited 8s")
}
