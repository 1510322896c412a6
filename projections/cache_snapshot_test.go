package projections_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/projections"
)

// everything lists every object of every kind as the cache serves it.
func everything(t *testing.T, c *projections.Cache) map[string]string {
	out := map[string]string{}
	for _, k := range domain.Kinds() {
		res, err := c.List(k.Kind, projections.ListOptions{})
		require.NoError(t, err)
		for i, key := range res.Keys {
			out[k.Kind+"/"+key] = string(res.Items[i])
		}
	}
	return out
}

func startCache(t *testing.T, store *eventstore.Store) *projections.Cache {
	c := projections.NewCache(store, nil)
	run(t, c.Run)
	require.Eventually(t, c.Ready, 10*time.Second, 2*time.Millisecond)
	require.NoError(t, c.Sync(context.Background()))
	return c
}

// A cache starts from the projector's buckets and replays only the events
// after its checkpoint, and ends up serving exactly what a cache replaying the
// whole stream serves: the tail's creates, updates and deletes included, and
// the group index and counts built from the snapshot.
func TestCacheStartsFromTheProjections(t *testing.T) {
	env := eventstoretest.Start(t)
	store := env.Store
	writeHistory(t, store)
	machine := func(name, group string) {
		exec(t, store, domain.Command{Op: domain.OpCreate, Ref: domain.Ref{Kind: "Machine", Tenant: "t01", Name: name},
			Object: obj("Machine", "t01", name, fmt.Sprintf(`{"nodeGroup":%q,"role":"worker"}`, group), nil)})
	}
	machine("w-0", "workers")
	machine("w-1", "workers")
	p := projections.NewProjector(store, nil, "test")
	pr := run(t, p.Run)
	_, last, err := store.Bounds(context.Background())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return p.Checkpoint() >= last }, 10*time.Second, 2*time.Millisecond)
	pr.stop()

	// A tail the projector has not written: a create, an update, a delete,
	// a machine moving groups.
	exec(t, store, domain.Command{Op: domain.OpCreate, Ref: domain.Ref{Kind: "Tenant", Name: "late"}, Object: obj("Tenant", "", "late", `{}`, nil)})
	exec(t, store, domain.Command{Op: domain.OpUpdate, Ref: domain.Ref{Kind: "NodeGroup", Tenant: "t01", Name: "workers"},
		Object: obj("NodeGroup", "t01", "workers", `{"role":"worker","count":9,"provider":"emu"}`, nil)})
	exec(t, store, domain.Command{Op: domain.OpDelete, Ref: domain.Ref{Kind: "Tenant", Name: "t03"}})
	exec(t, store, domain.Command{Op: domain.OpUpdate, Ref: domain.Ref{Kind: "Machine", Tenant: "t01", Name: "w-1"},
		Object: obj("Machine", "t01", "w-1", `{"nodeGroup":"gpu","role":"worker"}`, nil)})

	fromSnapshot := startCache(t, store)
	require.Equal(t, uint64(4), fromSnapshot.Applied(), "only the events after the checkpoint are replayed")

	// The same store without projections: a full replay.
	js := store.JetStream()
	require.NoError(t, js.DeleteKeyValue(context.Background(), projections.CheckpointBucket))
	full := startCache(t, store)
	require.Greater(t, full.Applied(), uint64(40))

	require.Equal(t, everything(t, full), everything(t, fromSnapshot))
	for _, c := range []*projections.Cache{full, fromSnapshot} {
		require.Len(t, c.InGroup("Machine", "t01", "workers"), 1)
		require.Len(t, c.InGroup("Machine", "t01", "gpu"), 1)
		require.Equal(t, full.Count("NodeGroup", ""), c.Count("NodeGroup", ""))
		require.Equal(t, full.Count("Machine", "t01"), c.Count("Machine", "t01"))
		require.Equal(t, full.Seq(), c.Seq())
		require.Equal(t, full.Children("t01"), c.Children("t01"))
		require.Equal(t, full.Terminating("Tenant"), c.Terminating("Tenant"))
	}
}

// A cache started from projections that hold the whole stream (nothing to
// replay) follows the events written after it started, as a restarted
// server's read model must: two kill -9 tests saw a restarted server serve
// the state at its checkpoint for minutes.
func TestCacheFromTheProjectionsFollowsNewEvents(t *testing.T) {
	env := eventstoretest.Start(t)
	store := env.Store
	writeHistory(t, store)
	p := projections.NewProjector(store, nil, "test")
	pr := run(t, p.Run)
	_, last, err := store.Bounds(context.Background())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return p.Checkpoint() >= last }, 10*time.Second, 2*time.Millisecond)
	pr.stop()

	c := startCache(t, store)
	require.Zero(t, c.Applied(), "nothing after the checkpoint")
	for i := range 3 {
		res := exec(t, store, domain.Command{Op: domain.OpCreate, Ref: domain.Ref{Kind: "Tenant", Name: fmt.Sprintf("after-%d", i)},
			Object: obj("Tenant", "", fmt.Sprintf("after-%d", i), `{}`, nil)})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		require.NoError(t, c.WaitFor(ctx, res.Seq), "event %d after the start", i)
		cancel()
		_, ok := c.Get(domain.Ref{Kind: "Tenant", Name: fmt.Sprintf("after-%d", i)})
		require.True(t, ok)
	}
}

// After a crash the event stream can have lost its last messages (JetStream
// writes them out asynchronously) while the projections kept them: a
// checkpoint beyond the stream's end. The read model then replays the
// stream, the projector rebuilds the buckets from it, and the events that
// reuse the lost sequences are seen by both.
func TestProjectionsAheadOfTheStreamAreRebuilt(t *testing.T) {
	env := eventstoretest.Start(t)
	store := env.Store
	writeHistory(t, store)
	p := projections.NewProjector(store, nil, "test")
	pr := run(t, p.Run)
	_, last, err := store.Bounds(context.Background())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return p.Checkpoint() >= last }, 10*time.Second, 2*time.Millisecond)
	pr.stop()
	// What the crash leaves: projections of events the stream no longer has.
	ctx := context.Background()
	kv, err := store.JetStream().KeyValue(ctx, projections.CheckpointBucket)
	require.NoError(t, err)
	_, err = kv.Put(ctx, "checkpoint", []byte(fmt.Sprint(last+3)))
	require.NoError(t, err)
	tenants, err := store.JetStream().KeyValue(ctx, projections.BucketName(domain.TenantKind))
	require.NoError(t, err)
	phantom, _ := json.Marshal(obj("Tenant", "", "phantom", `{}`, nil))
	phantom = []byte(strings.Replace(string(phantom), `"metadata":{`, fmt.Sprintf(`"metadata":{"resourceVersion":"%d",`, last+2), 1))
	_, err = tenants.Put(ctx, "_.phantom", phantom)
	require.NoError(t, err)

	c := startCache(t, store)
	require.Equal(t, last, c.Applied(), "the whole stream replayed")
	_, ok := c.Get(domain.Ref{Kind: "Tenant", Name: "phantom"})
	require.False(t, ok, "a state no event has")

	p2 := projections.NewProjector(store, nil, "test")
	run(t, p2.Run)
	res := exec(t, store, domain.Command{Op: domain.OpCreate, Ref: domain.Ref{Kind: "Tenant", Name: "next"}, Object: obj("Tenant", "", "next", `{}`, nil)})
	require.Equal(t, last+1, res.Seq, "the next event takes the first lost sequence")
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, c.WaitFor(wctx, res.Seq))
	require.Eventually(t, func() bool { return p2.Checkpoint() == res.Seq }, 10*time.Second, 2*time.Millisecond)
	_, err = tenants.Get(ctx, "_.phantom")
	require.Error(t, err, "the phantom left the rebuilt bucket")
	tenants, err = store.JetStream().KeyValue(ctx, projections.BucketName(domain.TenantKind))
	require.NoError(t, err)
	_, err = tenants.Get(ctx, "_.next")
	require.NoError(t, err)
	// A cache started now, from the rebuilt projections, agrees.
	require.Equal(t, everything(t, c), everything(t, startCache(t, store)))
}

// Whoever waits for a sequence while the read model loads the projections
// (a controller taking its lease, the emulator's provider registration at
// start) is woken by the load: no event may come after it. Two kill -9 e2e
// tests saw a restarted server wait for minutes here.
func TestWaitersAreWokenByTheSnapshot(t *testing.T) {
	env := eventstoretest.Start(t)
	store := env.Store
	writeHistory(t, store)
	p := projections.NewProjector(store, nil, "test")
	pr := run(t, p.Run)
	_, last, err := store.Bounds(context.Background())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return p.Checkpoint() >= last }, 10*time.Second, 2*time.Millisecond)
	pr.stop()

	c := projections.NewCache(store, nil)
	waited := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		waited <- c.WaitFor(ctx, last)
	}()
	// The waiter is in before the cache starts: it can only be woken by the load.
	time.Sleep(50 * time.Millisecond)
	run(t, c.Run)
	require.NoError(t, <-waited)
	require.Zero(t, c.Applied(), "woken by the snapshot, not by an event")
}
