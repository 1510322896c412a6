package controllertest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/internal/controller"
)

// Replica is one replica of a controller of the controllers/ wing: what
// controller.Build gives it (controller.Base) is all the kit needs.
type Replica interface {
	Run(ctx context.Context) error
	Leading() bool
	LastRun(key string) (rev uint64, running bool)
}

// Env is one subtest of Conformance: a real embedded store of its own, a
// context that ends with the subtest, a clock standing still for the
// replicas (the kit queues work at its time), and the gate the replicas'
// runs pass before their effect.
type Env struct {
	T     *testing.T
	Ctx   context.Context
	Store *eventstore.Store
	Clock *Clock
	Gate  *Gate
}

// Subject is what a controller's test hands Conformance. F is the
// subject's own fixture for one Env (a read model the replicas share,
// fakes), made by Setup.
type Subject[F any] struct {
	// Lease, Consumer and Queue are the controller's constants: its lease,
	// durable consumer and queue bucket.
	Lease, Consumer, Queue string
	// Setup makes the fixture of one Env; nil gives F's zero value.
	Setup func(e *Env) F
	// Replica builds a new replica (a new controller value) named holder
	// on e's store. Its runs must call e.Gate.Pass with their context
	// before the effect Effects counts, and return when it fails.
	Replica func(e *Env, f F, holder string) Replica
	// Work writes what gives the key it returns work (objects, events):
	// work whose effect is made once.
	Work func(e *Env, f F) (key string)
	// Effects counts the effect of key's work (events of a kind written by
	// the controller's actor, say: CountEvents) as the store holds it now.
	// It is called from require.Eventually's goroutine: it returns errors
	// rather than fail the test.
	Effects func(e *Env, f F, key string) (int, error)
}

// Conformance runs the behaviour every controller built on
// internal/controller owes its users, each subtest on a store of its own:
//
//   - restart: a replica stops while a key's run is in flight; a new
//     replica does the work, once (the queue lives in the store).
//   - lease loss: the lease is taken from the leader mid-run; it stops
//     leading, its run's context ends, and the next leader does the work,
//     once.
//   - redelivery: a key is queued again after its work was done (a
//     redelivered event); the effect is still there once (runs are
//     idempotent).
//
// "Once" is counted when the controller is settled: its consumer has
// nothing pending, no run of the key is in flight, and the key is either
// out of the queue or queued at the revision its last run started from.
func Conformance[F any](t *testing.T, s Subject[F]) {
	t.Run("restart", func(t *testing.T) { s.restart(newConformanceEnv(t)) })
	t.Run("lease loss", func(t *testing.T) { s.leaseLoss(newConformanceEnv(t)) })
	t.Run("redelivery", func(t *testing.T) { s.redelivery(newConformanceEnv(t)) })
}

func newConformanceEnv(t *testing.T) *Env {
	es := eventstoretest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &Env{T: t, Ctx: ctx, Store: es.Store, Clock: NewClock(time.Now().UTC().Truncate(time.Second)), Gate: &Gate{}}
}

// run is one subtest's fixture and its replicas.
type run[F any] struct {
	s Subject[F]
	e *Env
	f F
}

func (s Subject[F]) open(e *Env) *run[F] {
	r := &run[F]{s: s, e: e}
	if s.Setup != nil {
		r.f = s.Setup(e)
	}
	return r
}

// start starts a replica named holder and waits until it leads, when lead.
func (r *run[F]) start(holder string, lead bool) (Replica, func()) {
	r.e.T.Helper()
	rep := r.s.Replica(r.e, r.f, holder)
	stop := Start(r.e.T, r.e.Ctx, rep.Run)
	// A test failing with the gate closed lets the runs go before the
	// replicas stop: one that ignores its context would hold up the stop.
	r.e.T.Cleanup(r.e.Gate.Open)
	if lead {
		require.Eventually(r.e.T, rep.Leading, 30*time.Second, 5*time.Millisecond, "%s never led", holder)
	}
	return rep, stop
}

// inFlight makes work with the gate closed and waits until a run of it
// waits at the gate, before its effect.
func (r *run[F]) inFlight() string {
	t := r.e.T
	t.Helper()
	r.e.Gate.Close()
	key := r.s.Work(r.e, r.f)
	require.Eventually(t, func() bool { return r.e.Gate.Waiting() > 0 }, 30*time.Second, 5*time.Millisecond,
		"no run of %s reached the gate: the subject's runs must pass Env.Gate before their effect", key)
	require.Zero(t, r.effects(key), "the effect of %s came before the gate", key)
	return key
}

// effects is the subject's count, which must be had.
func (r *run[F]) effects(key string) int {
	r.e.T.Helper()
	n, err := r.s.Effects(r.e, r.f, key)
	require.NoError(r.e.T, err, "counting the effects of %s", key)
	return n
}

// once waits until rep has done key's work and is settled, then requires
// the effect exactly once.
func (r *run[F]) once(rep Replica, key string) {
	t := r.e.T
	t.Helper()
	require.Eventually(t, func() bool {
		n, err := r.s.Effects(r.e, r.f, key)
		return err == nil && n > 0
	}, 60*time.Second, 10*time.Millisecond, "the work of %s was never done", key)
	require.EventuallyWithT(t, func(ct *assert.CollectT) { r.settled(ct, rep, key) }, 60*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, r.effects(key), "the effect of %s, counted once the controller settled", key)
}

// settled holds when rep leads, its consumer has handed it every event,
// no run of key is in flight, and key is out of the queue or queued at the
// revision rep's last run of it started from (a run waiting for its time).
func (r *run[F]) settled(ct *assert.CollectT, rep Replica, key string) {
	ctx := r.e.Ctx
	require.True(ct, rep.Leading(), "the replica leads")
	js := r.e.Store.JetStream()
	cons, err := js.Consumer(ctx, eventstore.StreamName, r.s.Consumer)
	require.NoError(ct, err)
	info, err := cons.Info(ctx)
	require.NoError(ct, err)
	require.Zero(ct, info.NumPending, "events not delivered to %s", r.s.Consumer)
	require.Zero(ct, info.NumAckPending, "events %s has not handled", r.s.Consumer)
	ran, running := rep.LastRun(key)
	require.False(ct, running, "a run of %s is in flight", key)
	kv, err := js.KeyValue(ctx, r.s.Queue)
	require.NoError(ct, err)
	entry, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return
	}
	require.NoError(ct, err)
	require.Equal(ct, entry.Revision(), ran, "%s is queued at a revision no run has started from", key)
}

func (r *run[F]) queued(key string) bool {
	kv, err := r.e.Store.JetStream().KeyValue(r.e.Ctx, r.s.Queue)
	require.NoError(r.e.T, err)
	_, err = kv.Get(r.e.Ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false
	}
	require.NoError(r.e.T, err)
	return true
}

// restart: a replica stops while a run of the key is in flight; the key
// stays queued, and a new replica on the same store does the work once.
func (s Subject[F]) restart(e *Env) {
	r := s.open(e)
	_, stopA := r.start("replica-a", true)
	key := r.inFlight()
	stopA()
	require.True(e.T, r.queued(key), "%s left the queue with its run cut short", key)
	require.Zero(e.T, r.effects(key))

	e.Gate.Open()
	b, _ := r.start("replica-b", true)
	r.once(b, key)
}

// leaseLoss: the lease is overwritten under the leader mid-run, as another
// replica would after a partition. The leader's next renewal finds it gone:
// it stops leading, and its run's context ends (Leading turns false only
// once its runs have returned). Replica B takes the lease once the taker
// lets go, and does the work once. A, which would compete with B for the
// lease, is stopped first, so that B is the one to take it.
func (s Subject[F]) leaseLoss(e *Env) {
	r := s.open(e)
	a, stopA := r.start("replica-a", true)
	key := r.inFlight()

	leases, err := e.Store.JetStream().KeyValue(e.Ctx, eventstore.LeaseBucket)
	require.NoError(e.T, err)
	_, err = leases.Put(e.Ctx, s.Lease, []byte("taker"))
	require.NoError(e.T, err)
	require.Eventually(e.T, func() bool { return !a.Leading() }, 30*time.Second, 10*time.Millisecond,
		"replica-a leads on after its lease was taken")
	require.Positive(e.T, e.Gate.Abandoned(), "the run in flight went on after the lease was lost")
	require.Zero(e.T, e.Gate.Waiting())
	require.Zero(e.T, r.effects(key), "replica-a's cancelled run made the effect")

	b, _ := r.start("replica-b", false)
	stopA()
	e.Gate.Open()
	require.NoError(e.T, leases.Delete(e.Ctx, s.Lease))
	require.Eventually(e.T, b.Leading, 30*time.Second, 10*time.Millisecond, "replica-b never led")
	r.once(b, key)
}

// redelivery: once the key's work is done, the key is queued again as a
// redelivered event would queue it; its run changes nothing.
func (s Subject[F]) redelivery(e *Env) {
	r := s.open(e)
	a, _ := r.start("replica-a", true)
	key := s.Work(e, r.f)
	r.once(a, key)

	kv, err := e.Store.JetStream().KeyValue(e.Ctx, s.Queue)
	require.NoError(e.T, err)
	require.NoError(e.T, controller.Enqueue(e.Ctx, kv, key, "redelivered", e.Clock.Now(), 0))
	// A run deletes the entry only at the revision it started from: an
	// entry gone already was run, and done, from the redelivered revision.
	entry, err := kv.Get(e.Ctx, key)
	if !errors.Is(err, jetstream.ErrKeyNotFound) {
		require.NoError(e.T, err)
		rev := entry.Revision()
		require.Eventually(e.T, func() bool {
			ran, running := a.LastRun(key)
			return ran >= rev && !running
		}, 60*time.Second, 10*time.Millisecond, "the redelivered %s never ran", key)
	}
	r.once(a, key)
}

// Gate holds runs before their effect while it is closed: a run passes it
// when it opens, or gives up when its context ends (a lost lease, a stop).
// It is open until Close.
type Gate struct {
	mu        sync.Mutex
	open      chan struct{}
	waiting   int
	abandoned int
}

// Close makes runs wait at the gate.
func (g *Gate) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open == nil {
		g.open = make(chan struct{})
	}
}

// Open lets every run through.
func (g *Gate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open != nil {
		close(g.open)
		g.open = nil
	}
}

// Pass returns once the gate is open, or ctx's error when ctx ends first.
func (g *Gate) Pass(ctx context.Context) error {
	g.mu.Lock()
	ch := g.open
	if ch == nil {
		g.mu.Unlock()
		return ctx.Err()
	}
	g.waiting++
	g.mu.Unlock()
	var err error
	select {
	case <-ch:
	case <-ctx.Done():
		err = ctx.Err()
	}
	g.mu.Lock()
	g.waiting--
	if err != nil {
		g.abandoned++
	}
	g.mu.Unlock()
	return err
}

// Waiting is how many runs wait at the gate.
func (g *Gate) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

// Abandoned is how many runs gave up waiting because their context ended.
func (g *Gate) Abandoned() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.abandoned
}

// CountEvents counts the events of the store's stream that match: a
// Subject's Effects over the events of a controller's actor.
func CountEvents(ctx context.Context, s *eventstore.Store, match func(*domain.Event) bool) (int, error) {
	n := 0
	var after uint64
	for {
		recs, more, err := s.Replay(ctx, eventstore.ReplayOptions{Window: eventstore.Window{From: eventstore.Position{After: after}}, Limit: 1000})
		if err != nil {
			return 0, err
		}
		for _, rec := range recs {
			if match(rec.Event) {
				n++
			}
			after = rec.Seq
		}
		if !more || len(recs) == 0 {
			return n, nil
		}
	}
}
