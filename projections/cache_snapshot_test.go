package projections_test

import (
	"context"
	"fmt"
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
