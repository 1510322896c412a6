package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// Spec is what a controller of the controllers/ wing tells the builder:
// its names, the events it reads, its timing, and where the keys with work
// come from. Build supplies the rest, the same for every controller: the
// runtime with the wing's defaults, Run and Leading, a Lead that catches up
// the read model and queues every key with work, and a Resync that queues
// them again.
type Spec struct {
	Store *eventstore.Store
	// Holder names this replica in the lease.
	Holder string
	// Name is the controller's name in logs ("config controller").
	Name string
	// Lease, Consumer and Queue name the lease, the durable consumer and
	// the queue bucket. They are constants of the controller: renaming the
	// consumer replays everything.
	Lease, Consumer, Queue string
	// Description says what waits in the queue ("tenants whose machine
	// configs are to be looked at"); the consumer's description is built
	// from it.
	Description string
	// Kinds are the kinds whose events reach Keys.
	Kinds []*domain.KindInfo
	// Provision, when set, provisions the consumer instead of the builder
	// (a consumer created once from a position of its own).
	Provision func(ctx context.Context) error
	// AckWait is the consumer's; default 30s.
	AckWait time.Duration
	// MaxSources bounds the sources a queue entry keeps; default 16.
	MaxSources int
	// Concurrency is how many keys run at once; default 4.
	Concurrency int
	// Backoff is the wait before retry n; default Exponential(5s, 5m).
	Backoff func(attempt int) time.Duration
	// Resync is how often the keys with work are queued again; 0 never.
	Resync time.Duration
	// Clock defaults to RealClock(nil); Log to slog.Default().
	Clock Clock
	Log   *slog.Logger
	// ReadModel is caught up before anything else when this replica takes
	// the lease; nil skips it.
	ReadModel Syncer
	// Tenants, when set, shares the keys' runs out over the replicas by
	// tenant (Config.Tenants); TenantOf names a key's tenant (default the
	// key). Cluster-wide controllers leave it nil: one replica runs them.
	Tenants  *Tenants
	TenantOf func(key string) string
	// Pending lists the keys with work: every one is queued when this
	// replica takes the lease (after the read model and the controller's
	// own Lead, if it has one) and at each Resync, unless the controller
	// implements Resyncer itself. nil queues nothing.
	Pending func(ctx context.Context) ([]string, error)
}

// Syncer is a read model the builder catches up when the lease is taken
// (projections.Cache).
type Syncer interface {
	Sync(ctx context.Context) error
}

// Base is what Build gives a controller: embed it for Run and Leading.
type Base struct{ rt *Runtime }

// Run provisions the queue and the consumer and works while this replica
// holds the lease, until ctx ends; runs in flight end with it.
func (b Base) Run(ctx context.Context) error { return b.rt.Run(ctx) }

// Leading reports whether this replica holds the controller's lease.
func (b Base) Leading() bool { return b.rt.Leading() }

// LastRun reports the queue revision the last finished run of key started
// from in this replica's term as leader, and whether a run of key is in
// flight (Runtime.LastRun).
func (b Base) LastRun(key string) (rev uint64, running bool) { return b.rt.LastRun(key) }

// Build returns the runtime of c as spec describes it. c holds only the
// controller's decisions and effects (Keys, Due, Reconcile); it may also be
// a Leader (work beyond queueing, such as a subscription only the leader
// answers) or a Resyncer (keys of its own at each resync).
func Build(spec Spec, c Controller) Base {
	if spec.AckWait == 0 {
		spec.AckWait = 30 * time.Second
	}
	if spec.MaxSources == 0 {
		spec.MaxSources = 16
	}
	if spec.Log == nil {
		spec.Log = slog.Default()
	}
	rt := New(Config{
		Store: spec.Store, Lease: spec.Lease, Holder: spec.Holder,
		Consumer: jetstream.ConsumerConfig{
			Durable: spec.Consumer, Description: "queues " + spec.Description,
			DeliverPolicy: jetstream.DeliverNewPolicy, AckPolicy: jetstream.AckExplicitPolicy,
			AckWait: spec.AckWait, MaxAckPending: 256,
		},
		Provision: spec.Provision, Kinds: spec.Kinds,
		Queue: spec.Queue, QueueDescription: spec.Description, MaxSources: spec.MaxSources,
		Concurrency: spec.Concurrency, Backoff: spec.Backoff, Resync: spec.Resync,
		Clock: spec.Clock, Log: spec.Log,
		Tenants: spec.Tenants, TenantOf: spec.TenantOf, ReadModel: runReadModel(spec.ReadModel),
	}, built{Controller: c, spec: spec})
	return Base{rt: rt}
}

// runReadModel is the read model as a RunReadModel, if it is one.
func runReadModel(s Syncer) RunReadModel {
	if w, ok := s.(RunReadModel); ok {
		return w
	}
	return nil
}

// built is a controller with the builder's Lead and Resync.
type built struct {
	Controller
	spec Spec
}

// Lead catches up the read model, runs the controller's own Lead, and
// queues every key with work.
func (b built) Lead(ctx context.Context, q *Queue) (func(), error) {
	if b.spec.ReadModel != nil {
		if err := b.spec.ReadModel.Sync(ctx); err != nil {
			return nil, err
		}
	}
	var stop func()
	if l, ok := b.Controller.(Leader); ok {
		var err error
		if stop, err = l.Lead(ctx, q); err != nil {
			return nil, err
		}
	}
	var keys []string
	if b.spec.Pending != nil {
		var err error
		if keys, err = b.spec.Pending(ctx); err != nil {
			if stop != nil {
				stop()
			}
			return nil, err
		}
	}
	for _, k := range keys {
		if err := q.Add(ctx, k, "lead"); err != nil {
			if stop != nil {
				stop()
			}
			return nil, err
		}
	}
	b.spec.Log.Info(b.spec.Name+" leading", "holder", b.spec.Holder, "queued", len(keys))
	return stop, nil
}

// Resync is the controller's own, else Pending.
func (b built) Resync(ctx context.Context) ([]string, error) {
	if r, ok := b.Controller.(Resyncer); ok {
		return r.Resync(ctx)
	}
	if b.spec.Pending != nil {
		return b.spec.Pending(ctx)
	}
	return nil, nil
}

// Field is one field of a controller's Config that Required checks.
type Field struct {
	name string
	set  bool
}

// Need names a required field of a Config and its value: nil (pointers,
// interfaces, maps, slices, funcs, channels) and empty strings are not set.
func Need(name string, v any) Field {
	if v == nil {
		return Field{name: name}
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return Field{name: name, set: !rv.IsNil()}
	case reflect.String:
		return Field{name: name, set: rv.Len() > 0}
	default:
		// A struct value in an interface field is set, zero or not.
		return Field{name: name, set: true}
	}
}

// Required is a Config's Validate for its required fields: one error per
// field not set, each naming the component (when not "") and the field.
func Required(component string, fields ...Field) error {
	var errs []error
	for _, f := range fields {
		if f.set {
			continue
		}
		if component == "" {
			errs = append(errs, fmt.Errorf("%s is required", f.name))
		} else {
			errs = append(errs, fmt.Errorf("%s: %s is required", component, f.name))
		}
	}
	return errors.Join(errs...)
}

// Acquired is the controller's own (Acquirer), if it has one.
func (b built) Acquired(ctx context.Context, tenant string, q *Queue) error {
	if a, ok := b.Controller.(Acquirer); ok {
		return a.Acquired(ctx, tenant, q)
	}
	return nil
}
