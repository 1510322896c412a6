package projections_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/projections"
)

// runner runs a component until stopped.
type runner struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func run(t *testing.T, f func(context.Context) error) *runner {
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{cancel: cancel}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if err := f(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("run: %v", err)
		}
	}()
	t.Cleanup(r.stop)
	return r
}

func (r *runner) stop() { r.cancel(); r.wg.Wait() }

func exec(t *testing.T, store *eventstore.Store, cmd domain.Command) eventstore.Result {
	t.Helper()
	cmd.Now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if cmd.NewUID == "" {
		cmd.NewUID = fmt.Sprintf("uid-%s-%s", cmd.Ref.Tenant, cmd.Ref.Name)
	}
	res, err := store.Execute(context.Background(), cmd, eventstore.UpdateOptions{Retries: 3})
	require.NoError(t, err)
	return res
}

func obj(kind, tenant, name, spec string, labels map[string]string) *domain.Object {
	return &domain.Object{Kind: kind, Metadata: domain.ObjectMeta{Name: name, Tenant: tenant, Labels: labels}, Spec: []byte(spec)}
}

// writeHistory makes a varied history: creates, updates, status writes, deletes.
func writeHistory(t *testing.T, store *eventstore.Store) {
	for i := range 20 {
		name := fmt.Sprintf("t%02d", i)
		ref := domain.Ref{Kind: "Tenant", Name: name}
		exec(t, store, domain.Command{Op: domain.OpCreate, Ref: ref, Object: obj("Tenant", "", name, `{}`, map[string]string{"i": fmt.Sprint(i % 3)})})
		ng := domain.Ref{Kind: "NodeGroup", Tenant: name, Name: "workers"}
		exec(t, store, domain.Command{Op: domain.OpCreate, Ref: ng, Object: obj("NodeGroup", name, "workers", `{"role":"worker","count":1,"provider":"emu"}`, nil)})
		if i%2 == 0 {
			exec(t, store, domain.Command{Op: domain.OpUpdate, Ref: ng, Object: obj("NodeGroup", name, "workers", `{"role":"worker","count":4,"provider":"emu"}`, nil)})
		}
		if i%5 == 0 {
			exec(t, store, domain.Command{Op: domain.OpDelete, Ref: ng})
		}
	}
	exec(t, store, domain.Command{Op: domain.OpCreate, Ref: domain.Ref{Kind: "Provider", Name: "emu"},
		Object: obj("Provider", "", "emu", `{"type":"emulated","config":{"b":1,"a":2}}`, nil)})
}

// snapshot reads every key and value of every projection bucket.
func snapshot(t *testing.T, js jetstream.JetStream) map[string]string {
	ctx := context.Background()
	out := map[string]string{}
	for _, k := range domain.Kinds() {
		kv, err := js.KeyValue(ctx, projections.BucketName(k))
		require.NoError(t, err)
		keys, err := kv.Keys(ctx)
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			continue
		}
		require.NoError(t, err)
		for _, key := range keys {
			e, err := kv.Get(ctx, key)
			require.NoError(t, err)
			out[projections.BucketName(k)+"/"+key] = string(e.Value())
		}
	}
	return out
}

func TestProjectionRebuildIsByteIdentical(t *testing.T) {
	env := eventstoretest.Start(t)
	writeHistory(t, env.Store)
	_, last, err := env.Store.Bounds(context.Background())
	require.NoError(t, err)

	p := projections.NewProjector(env.Store, nil, "a")
	r := run(t, p.Run)
	require.Eventually(t, func() bool { return p.Checkpoint() == last }, 15*time.Second, 5*time.Millisecond)
	before := snapshot(t, env.Store.JetStream())
	require.Len(t, before, 20+16+1, "20 tenants, 16 live node groups, 1 provider")

	// The projection holds the same bytes the read model serves.
	cache := projections.NewCache(env.Store, nil)
	run(t, cache.Run)
	require.Eventually(t, cache.Ready, 15*time.Second, 5*time.Millisecond)
	raw, ok := cache.Get(domain.Ref{Kind: "NodeGroup", Tenant: "t02", Name: "workers"})
	require.True(t, ok)
	require.Equal(t, string(raw), before["rezus-nodegroups/t02.workers"])

	r.stop()
	require.NoError(t, p.Rebuild(context.Background()))
	require.Empty(t, snapshot(t, env.Store.JetStream()))
	p2 := projections.NewProjector(env.Store, nil, "b")
	run(t, p2.Run)
	require.Eventually(t, func() bool { return p2.Checkpoint() == last }, 15*time.Second, 5*time.Millisecond)
	require.Equal(t, before, snapshot(t, env.Store.JetStream()))
}

func TestProjectorFollowsLiveWritesAndResumes(t *testing.T) {
	env := eventstoretest.Start(t)
	p := projections.NewProjector(env.Store, nil, "a")
	r := run(t, p.Run)
	exec(t, env.Store, domain.Command{Op: domain.OpCreate, Ref: domain.Ref{Kind: "Tenant", Name: "a"}, Object: obj("Tenant", "", "a", `{}`, nil)})
	require.Eventually(t, func() bool { return p.Checkpoint() == 1 }, 15*time.Second, 5*time.Millisecond)
	r.stop()

	// Written while the projector is down; a new projector (same durable) resumes.
	exec(t, env.Store, domain.Command{Op: domain.OpCreate, Ref: domain.Ref{Kind: "Tenant", Name: "b"}, Object: obj("Tenant", "", "b", `{}`, nil)})
	exec(t, env.Store, domain.Command{Op: domain.OpDelete, Ref: domain.Ref{Kind: "Tenant", Name: "a"}})
	p2 := projections.NewProjector(env.Store, nil, "b")
	run(t, p2.Run)
	require.Eventually(t, func() bool { return p2.Checkpoint() == 3 }, 15*time.Second, 5*time.Millisecond)
	snap := snapshot(t, env.Store.JetStream())
	require.Contains(t, snap, "rezus-tenants/_.b")
	require.NotContains(t, snap, "rezus-tenants/_.a")
}

func TestCacheListsWithSelectorsAndPages(t *testing.T) {
	env := eventstoretest.Start(t)
	writeHistory(t, env.Store)
	cache := projections.NewCache(env.Store, nil)
	run(t, cache.Run)
	require.Eventually(t, cache.Ready, 15*time.Second, 5*time.Millisecond)

	sel, err := domain.ParseSelector("i in (0,2)")
	require.NoError(t, err)
	res, err := cache.List("Tenant", projections.ListOptions{Selector: sel})
	require.NoError(t, err)
	require.Equal(t, 13, len(res.Items)) // i%3 in {0,2}: 7 + 6 of 20

	notSel, err := domain.ParseSelector("i!=0,!missing")
	require.NoError(t, err)
	res, err = cache.List("Tenant", projections.ListOptions{Selector: notSel})
	require.NoError(t, err)
	require.Equal(t, 13, len(res.Items)) // i%3 != 0: 13 of 20

	var pages, items int
	cont := ""
	for {
		res, err := cache.List("NodeGroup", projections.ListOptions{Limit: 5, Continue: cont})
		require.NoError(t, err)
		require.LessOrEqual(t, len(res.Items), 5)
		items += len(res.Items)
		pages++
		if res.Continue == "" {
			break
		}
		cont = res.Continue
	}
	require.Equal(t, 16, items)
	require.Equal(t, 4, pages)
	require.Equal(t, 1, cache.Count("NodeGroup", "t01"))
	require.Equal(t, 0, cache.Count("NodeGroup", "t05"))

	_, err = cache.List("Tenant", projections.ListOptions{Continue: "garbage"})
	require.ErrorIs(t, err, projections.ErrBadContinue)
}

// An acknowledgement that never comes (a bucket changing leader in a rolling
// restart) must not stall the projector while it holds the lease: it gives
// the write up, and a later run projects the event. Without the ack timeout
// the projector waited for ever, and replicas started after that stayed
// "projections catching up" (CI, TestRollingUpgradeFromTheLastRelease).
func TestProjectorResumesAfterAnAckThatNeverCame(t *testing.T) {
	env := eventstoretest.Start(t)
	ctx := context.Background()
	store, err := eventstore.Open(ctx, env.Conn, eventstore.Config{AsyncAckTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	p := projections.NewProjector(store, nil, "a")
	run(t, p.Run)
	exec(t, env.Store, domain.Command{Op: domain.OpCreate, Ref: domain.Ref{Kind: "Tenant", Name: "a"}, Object: obj("Tenant", "", "a", `{}`, nil)})
	require.Eventually(t, func() bool { return p.Checkpoint() == 1 }, time.Minute, 5*time.Millisecond)

	// The tenants bucket's stream is gone and a subscriber that never
	// answers takes its subject: the projector's next write gets no ack.
	bucket := projections.BucketName(domain.MustKind("Tenant"))
	require.NoError(t, store.JetStream().DeleteKeyValue(ctx, bucket))
	swallowed := make(chan struct{}, 16)
	sub, err := env.Conn.Subscribe("$KV."+bucket+".>", func(*nats.Msg) {
		select {
		case swallowed <- struct{}{}:
		default:
		}
	})
	require.NoError(t, err)
	require.NoError(t, env.Conn.Flush())
	exec(t, env.Store, domain.Command{Op: domain.OpCreate, Ref: domain.Ref{Kind: "Tenant", Name: "b"}, Object: obj("Tenant", "", "b", `{}`, nil)})
	// The write went out twice: the first run gave it up and a second
	// started from the checkpoint.
	for range 2 {
		select {
		case <-swallowed:
		case <-time.After(time.Minute):
			t.Fatal("the projector did not write the event again after its ack never came")
		}
	}
	require.Equal(t, uint64(1), p.Checkpoint(), "no write of event 2 was acknowledged")

	// The bucket is back: a later run projects the event.
	require.NoError(t, sub.Unsubscribe())
	require.NoError(t, p.Provision(ctx))
	require.Eventually(t, func() bool { return p.Checkpoint() == 2 }, time.Minute, 10*time.Millisecond)
	require.Contains(t, snapshot(t, store.JetStream()), "rezus-tenants/_.b")
}
