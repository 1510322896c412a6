package eventstore_test

import (
	"context"
	"errors"
	"sync/atomic"
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

// leaseProbe runs lease holders and records who works when.
type leaseProbe struct {
	leases *eventstore.Leases
	// active counts holders inside work; max is the most ever seen at once.
	active, max atomic.Int32
	started     chan leaseStart
}

type leaseStart struct {
	holder string
	ctx    context.Context
}

func newLeaseProbe(leases *eventstore.Leases) *leaseProbe {
	return &leaseProbe{leases: leases, started: make(chan leaseStart, 64)}
}

// run starts holder on lease name; work reports its start, then returns
// workErr at once or, when nil, waits until its context ends.
func (p *leaseProbe) run(ctx context.Context, name, holder string, workErr error) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- p.leases.RunWhileHeld(ctx, name, holder, func(wctx context.Context) error {
			n := p.active.Add(1)
			defer p.active.Add(-1)
			for {
				m := p.max.Load()
				if n <= m || p.max.CompareAndSwap(m, n) {
					break
				}
			}
			p.started <- leaseStart{holder: holder, ctx: wctx}
			if workErr != nil {
				return workErr
			}
			<-wctx.Done()
			return nil
		})
	}()
	return done
}

func TestLeases(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	leases, err := eventstore.OpenLeases(ctx, env.Store, ttl)
	require.NoError(t, err)
	kv, err := env.Store.JetStream().KeyValue(ctx, eventstore.LeaseBucket)
	require.NoError(t, err)

	t.Run("one holder at a time, handed over on cancel", func(t *testing.T) {
		p := newLeaseProbe(leases)
		ctxs := map[string]context.CancelFunc{}
		dones := map[string]<-chan error{}
		for _, h := range []string{"a", "b"} {
			hctx, cancel := context.WithCancel(ctx)
			defer cancel()
			ctxs[h] = cancel
			dones[h] = p.run(hctx, "handover", h, nil)
		}

		first := recv(t, p.started, 5*time.Second, "the first holder")
		// Hold it for well over two TTLs: renewals must keep it, and the other must wait.
		select {
		case s := <-p.started:
			t.Fatalf("%s started while %s held the lease", s.holder, first.holder)
		case <-first.ctx.Done():
			t.Fatalf("%s lost the lease it was renewing", first.holder)
		case <-time.After(5 * ttl / 2):
		}

		ctxs[first.holder]()
		require.NoError(t, recv(t, dones[first.holder], 5*time.Second, "the first holder to stop"))
		second := recv(t, p.started, 5*time.Second, "the second holder")
		require.NotEqual(t, first.holder, second.holder)

		ctxs[second.holder]()
		require.NoError(t, recv(t, dones[second.holder], 5*time.Second, "the second holder to stop"))
		require.LessOrEqual(t, p.max.Load(), int32(1), "two holders worked at once")
	})

	t.Run("work error ends RunWhileHeld and releases the lease", func(t *testing.T) {
		p := newLeaseProbe(leases)
		boom := errors.New("boom")
		errDone := p.run(ctx, "failing", "a", boom)
		require.Equal(t, "a", recv(t, p.started, 5*time.Second, "a to start").holder)
		require.ErrorIs(t, recv(t, errDone, 5*time.Second, "a to return"), boom)

		_, err := kv.Get(ctx, "failing")
		require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "the lease was released, not left to expire")

		bctx, cancel := context.WithCancel(ctx)
		defer cancel()
		bDone := p.run(bctx, "failing", "b", nil)
		require.Equal(t, "b", recv(t, p.started, 5*time.Second, "b to take over").holder)
		cancel()
		require.NoError(t, recv(t, bDone, 5*time.Second, "b to stop"))
		require.LessOrEqual(t, p.max.Load(), int32(1))
	})

	t.Run("cancelling ctx ends a waiting holder", func(t *testing.T) {
		p := newLeaseProbe(leases)
		actx, cancelA := context.WithCancel(ctx)
		defer cancelA()
		aDone := p.run(actx, "waiting", "a", nil)
		require.Equal(t, "a", recv(t, p.started, 5*time.Second, "a to start").holder)

		bctx, cancelB := context.WithCancel(ctx)
		bDone := p.run(bctx, "waiting", "b", nil)
		cancelB()
		require.NoError(t, recv(t, bDone, 5*time.Second, "waiting b to stop"))

		cancelA()
		require.NoError(t, recv(t, aDone, 5*time.Second, "a to stop"))
		select {
		case s := <-p.started:
			t.Fatalf("%s started after its context was cancelled", s.holder)
		default:
		}
		_, err := kv.Get(ctx, "waiting")
		require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "a released the lease when cancelled")
	})

	t.Run("a holder that lost its lease leaves the new holder's alone", func(t *testing.T) {
		p := newLeaseProbe(leases)
		actx, cancelA := context.WithCancel(ctx)
		defer cancelA()
		aDone := p.run(actx, "stolen", "a", nil)
		a := recv(t, p.started, 5*time.Second, "a to start")

		// What happens when a's lease expired (a paused for longer than the TTL)
		// and another replica acquired it: the key is gone, then created anew.
		require.NoError(t, kv.Delete(ctx, "stolen"))
		rev, err := kv.Create(ctx, "stolen", []byte("intruder"))
		require.NoError(t, err)

		// a's next renewal fails, so its work must stop.
		select {
		case <-a.ctx.Done():
		case <-time.After(3 * ttl):
			t.Fatal("a kept working after its lease was taken")
		}

		// The intruder keeps renewing its lease; a must neither delete it nor work again.
		renew := time.NewTicker(ttl / 5)
		defer renew.Stop()
		for i := range 6 {
			<-renew.C
			select {
			case s := <-p.started:
				t.Fatalf("%s started working again while the intruder held the lease: the old holder released a lease that was no longer its own", s.holder)
			default:
			}
			next, err := kv.Update(ctx, "stolen", []byte("intruder"), rev)
			if err != nil {
				// A stall of this goroutine longer than the TTL lets the
				// intruder's own lease expire, which leaves no trace; a
				// release by a leaves a delete marker.
				_, herr := kv.History(ctx, "stolen")
				require.ErrorIs(t, herr, jetstream.ErrKeyNotFound, "renewal %d of the new holder's lease failed: the old holder released a lease that was no longer its own (%v)", i, err)
				next, err = kv.Create(ctx, "stolen", []byte("intruder"))
				require.NoError(t, err)
			}
			rev = next
		}
		cancelA()
		require.NoError(t, recv(t, aDone, 5*time.Second, "a to stop"))
		entry, err := kv.Get(ctx, "stolen")
		require.NoError(t, err)
		require.Equal(t, "intruder", string(entry.Value()))
	})
}
