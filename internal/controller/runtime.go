package controller

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// Config configures a Runtime. Store, Lease, Holder, Consumer.Durable and
// Queue are required; every other field has the default its comment gives.
type Config struct {
	Store *eventstore.Store
	// Lease names the lease that makes one replica at a time run the controller.
	Lease string
	// Holder names this replica in the lease.
	Holder string
	// Consumer is the durable consumer of the event stream whose events go
	// to Controller.Keys; it is created or updated as given, unless Provision
	// is set. Its name is a constant: renaming it replays everything. Leave
	// its filter empty: the runtime filters every event (AllEvents) and
	// hands Keys only those of Kinds.
	Consumer jetstream.ConsumerConfig
	// Kinds are the kinds whose events reach Keys (all when empty). They are
	// told apart by subject, before decoding, and not by the consumer's
	// filter: JetStream scans a consumer filtered on the stream's one
	// subject linearly, while several filter subjects cost it a walk of the
	// block's subjects for every message (a third of a loaded server's CPU).
	Kinds []*domain.KindInfo
	// Provision, when set, provisions the consumer instead (a controller
	// that creates it once, from a position of its own).
	Provision func(ctx context.Context) error
	// Queue is the KV bucket of the queued keys; QueueDescription says what
	// waits in it.
	Queue, QueueDescription string
	// MaxSources bounds the sources an entry keeps; default 0, all.
	MaxSources int
	// Concurrency is how many keys run at once; default 4.
	Concurrency int
	// Backoff is the wait before retry n (from 1); default Exponential(5s, 5m).
	Backoff func(attempt int) time.Duration
	// Resync is how often a Resyncer's keys are queued; default 0, never.
	Resync time.Duration
	// LeaseTTL is how long the lease outlives this replica; default
	// eventstore.LeaseTTL. Every user of the lease bucket must agree on it.
	LeaseTTL time.Duration
	// Clock defaults to RealClock(nil).
	Clock Clock
	// Log defaults to slog.Default().
	Log *slog.Logger
	// Tenants, when set, shares the keys' runs out over the replicas: every
	// replica runs the queued keys of the tenants it holds, while the lease
	// keeps to one replica only what is cluster-wide (the consumer that
	// queues keys, Lead, resyncs). Nil: the lease holder runs every key.
	Tenants *Tenants
	// TenantOf names a key's tenant; default the key itself.
	TenantOf func(key string) string
	// ReadModel, when set, is what runs read: with Tenants, the first run
	// of a tenant taken here waits until it has caught up with the stream
	// (the previous holder's last writes), and every run until it has the
	// events its entry names, which another replica queued after its own
	// read model had them.
	ReadModel RunReadModel
}

// RunReadModel is a read model runs wait on (projections.Cache).
type RunReadModel interface {
	Sync(ctx context.Context) error
	WaitFor(ctx context.Context, seq uint64) error
}

// Acquirer is a Controller with work to do before its first run of a
// tenant this replica has taken (Config.Tenants): whoever held the tenant
// before has no run in flight, so what its runs left (an apply recorded
// as going) is finished here.
type Acquirer interface {
	Acquired(ctx context.Context, tenant string, q *Queue) error
}

func (c *Config) setDefaults() {
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.Backoff == nil {
		c.Backoff = Exponential(5*time.Second, 5*time.Minute)
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = eventstore.LeaseTTL
	}
	if c.Clock == nil {
		c.Clock = RealClock(nil)
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.TenantOf == nil {
		c.TenantOf = func(key string) string { return key }
	}
}

// Runtime runs one Controller: while this replica holds the lease, it queues
// the keys of the consumer's events and runs them.
type Runtime struct {
	cfg Config
	c   Controller

	mu      sync.Mutex
	leading bool
	// runs are the keys run in this term as leader: the queue revision of
	// the entry the last run started from, and whether one is in flight.
	runs map[string]runState

	// absorbed are the changes to queued keys kept in memory; a new one for
	// each term as leader (one for the runtime's life with Tenants).
	absorbed *absorber

	// leadCtx is the context of the term as leader (nil: not leading); kick
	// tells the scheduler a term began or ended.
	leadCtx context.Context
	kick    chan struct{}
}

// New returns the runtime of c; Run starts it.
func New(cfg Config, c Controller) *Runtime {
	cfg.setDefaults()
	return &Runtime{cfg: cfg, c: c, kick: make(chan struct{}, 1), runs: map[string]runState{}}
}

// Leading reports whether this replica holds the lease.
func (r *Runtime) Leading() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leading
}

// setLeading records a term as leader beginning (ctx its context) or
// ending (nil).
func (r *Runtime) setLeading(ctx context.Context) {
	r.mu.Lock()
	r.leading = ctx != nil
	r.leadCtx = ctx
	if r.cfg.Tenants == nil || r.runs == nil {
		r.runs = map[string]runState{}
	}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// endTerm records the end of a term as leader.
func (r *Runtime) endTerm() { r.setLeading(context.Context(nil)) }

// leadContext returns the context of the term as leader, nil when not leading.
func (r *Runtime) leadContext() context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leadCtx
}

// runState is what LastRun reports of a key.
type runState struct {
	rev     uint64
	running bool
}

// LastRun reports, for this replica's term as leader (with Tenants: since
// it started), the queue revision of
// the entry the last run of key that ended started from (0: none ended), and
// whether a run of key is in flight. A run that ended from the revision the
// queue holds now (or with the key gone from the queue) has seen every
// change queued for it: tests wait on this to know a controller is done
// with a key, instead of sleeping (controllertest.Conformance).
func (r *Runtime) LastRun(key string) (rev uint64, running bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.runs[key]
	return s.rev, s.running
}

func (r *Runtime) runStarted(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.runs[key]
	s.running = true
	r.runs[key] = s
}

func (r *Runtime) runEnded(key string, rev uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[key] = runState{rev: rev}
}

// Run provisions the queue and the consumer and works while this replica
// holds the lease, until ctx ends; runs in flight end with it.
func (r *Runtime) Run(ctx context.Context) error {
	var kv jetstream.KeyValue
	var leases *eventstore.Leases
	// Provisioning is idempotent: on a cluster slow to answer, try again.
	err := eventstore.UntilClusterReady(ctx, func() error {
		var err error
		if kv, err = OpenQueue(ctx, r.cfg.Store, r.cfg.Queue, r.cfg.QueueDescription); err != nil {
			return err
		}
		if r.cfg.Provision != nil {
			err = r.cfg.Provision(ctx)
		} else {
			cc := r.cfg.Consumer
			cc.FilterSubject, cc.FilterSubjects = AllEvents, nil
			if _, err = r.cfg.Store.JetStream().CreateOrUpdateConsumer(ctx, eventstore.StreamName, cc); err != nil {
				err = fmt.Errorf("provisioning consumer %s: %w", cc.Durable, err)
			}
		}
		if err != nil {
			return err
		}
		leases, err = eventstore.OpenLeases(ctx, r.cfg.Store, r.cfg.LeaseTTL)
		return err
	})
	if err != nil {
		return err
	}
	q := &Queue{kv: kv, clock: r.cfg.Clock, maxSources: r.cfg.MaxSources}
	if r.cfg.Tenants == nil {
		return leases.RunWhileHeld(ctx, r.cfg.Lease, r.cfg.Holder, func(ctx context.Context) error {
			return r.lead(ctx, q)
		})
	}
	r.absorbed = newAbsorber(r.cfg.MaxSources)
	changed := r.cfg.Tenants.subscribe(func(ctx context.Context, tenant string) { r.flushTenant(ctx, q, tenant) })
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return leases.RunWhileHeld(gctx, r.cfg.Lease, r.cfg.Holder, func(ctx context.Context) error {
			return r.lead(ctx, q)
		})
	})
	g.Go(func() error { return r.scheduleUntilDone(gctx, q, changed) })
	return g.Wait()
}

// scheduleUntilDone runs the scheduler until ctx ends, starting it again
// when it stops early: its watch of the queue failed or ended, as it does
// while the cluster has no quorum. Every replica schedules, leading or not,
// so an error here must not end the server.
func (r *Runtime) scheduleUntilDone(ctx context.Context, q *Queue, changed <-chan struct{}) error {
	for {
		err := r.schedule(ctx, q, changed)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			r.cfg.Log.Warn("scheduler stopped; starting it again", "queue", r.cfg.Queue, "err", err)
		}
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func (r *Runtime) lead(ctx context.Context, q *Queue) error {
	if r.cfg.Tenants == nil {
		r.absorbed = newAbsorber(r.cfg.MaxSources)
	}
	r.setLeading(ctx)
	defer r.endTerm()
	if l, ok := r.c.(Leader); ok {
		stop, err := l.Lead(ctx, q)
		if err != nil {
			if ctx.Err() != nil {
				return nil // the lease was lost meanwhile: not an error, wait for it again
			}
			return err
		}
		if stop != nil {
			defer stop()
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return r.consume(gctx, q) })
	if r.cfg.Tenants == nil {
		g.Go(func() error { return r.schedule(gctx, q, nil) })
	}
	if rs, ok := r.c.(Resyncer); ok && r.cfg.Resync > 0 {
		g.Go(func() error { return r.resync(gctx, q, rs) })
	}
	return g.Wait()
}

// AllEvents is the filter subject of a controller's consumer: the event
// stream's one subject.
const AllEvents = domain.SubjectPrefix + ".>"

// wants reports whether events on subject reach Keys.
func (r *Runtime) wants(subject string) bool {
	if len(r.cfg.Kinds) == 0 {
		return true
	}
	// rezus.evt.<kind>.<scope>.<name>
	rest, ok := strings.CutPrefix(subject, domain.SubjectPrefix+".")
	if !ok {
		return false
	}
	kind, _, _ := strings.Cut(rest, ".")
	for _, k := range r.cfg.Kinds {
		if k.Subject == kind {
			return true
		}
	}
	return false
}

// queueWriters is how many queue writes of a controller's events are under
// way at once.
const queueWriters = 8

// queueWrite is the keys of an event that one writer writes into the queue
// bucket; the event's message is acked once every writer given some of its
// keys has written them (left counts those writers down), naked if one
// failed.
type queueWrite struct {
	msg    jetstream.Msg
	keys   []string
	source string
	at     time.Time
	left   *atomic.Int32
	failed *atomic.Bool
}

// consume queues the keys each event touches. Keys decides on the events
// one at a time, in stream order; the queue writes (a get and a create or
// update each, in the bucket) go to queueWriters writers, a key always to
// the same one, so one key's writes keep their order and never race each
// other while different keys' go at once. One after another they were the
// lag of a burst: a rollout's 100 new Upgrades reached the saga over one to
// two seconds (issue 49); racing writers of one key (a rollout's, at every
// end of its tenants' Upgrades) ran out of compare-and-set retries. An
// entry's times are when the events were taken. Which of several new keys
// a free slot runs first is no longer the stream's order: whichever entry
// lands first.
func (r *Runtime) consume(ctx context.Context, q *Queue) error {
	var writers [queueWriters]chan queueWrite
	var wg sync.WaitGroup
	for i := range writers {
		writers[i] = make(chan queueWrite)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := range writers[i] {
				r.writeQueue(ctx, q, w)
			}
		}()
	}
	err := r.cfg.Store.ConsumeDurable(ctx, r.cfg.Consumer.Durable, r.cfg.Log, func(ctx context.Context, msg jetstream.Msg) error {
		if !r.wants(msg.Subject()) {
			return nil
		}
		md, err := msg.Metadata()
		if err != nil {
			return err
		}
		seq := md.Sequence.Stream
		ev, err := r.cfg.Store.SharedEvent(seq, msg.Data())
		if err != nil {
			return nil // undecodable: nothing to queue
		}
		keys, err := r.c.Keys(ctx, ev, seq)
		if err != nil {
			return err
		}
		source := fmt.Sprintf("%s/%s@%d", ev.Object.Kind, ev.Object.Metadata.Name, seq)
		now := r.cfg.Clock.Now()
		var shards [queueWriters][]string
		n := int32(0)
		for _, k := range keys {
			if r.absorb(k, source, now) {
				continue
			}
			i := writerOf(k)
			if len(shards[i]) == 0 {
				n++
			}
			shards[i] = append(shards[i], k)
		}
		if n == 0 {
			return nil
		}
		left, failed := &atomic.Int32{}, &atomic.Bool{}
		left.Store(n)
		for i, ks := range shards {
			if len(ks) == 0 {
				continue
			}
			select {
			case writers[i] <- queueWrite{msg: msg, keys: ks, source: source, at: now, left: left, failed: failed}:
			case <-ctx.Done():
				// The writers given its other keys see ctx end too: the
				// last of them naks it (failed), or it is naked here.
				failed.Store(true)
				if left.Add(-n) == 0 {
					_ = msg.Nak()
				}
				return eventstore.ErrAckLater
			}
			n--
		}
		return eventstore.ErrAckLater
	})
	for _, w := range writers {
		close(w)
	}
	wg.Wait()
	return err
}

// writerOf is the writer of key's queue writes.
func writerOf(key string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % queueWriters)
}

// writeQueue writes a writer's share of an event's keys into the queue;
// the last writer of the event acks its message, or, when a write failed,
// has it delivered again (at once when the consumer is stopping, to the
// next holder of the lease).
func (r *Runtime) writeQueue(ctx context.Context, q *Queue, w queueWrite) {
	for _, k := range w.keys {
		if err := q.addAt(ctx, k, w.source, w.at); err != nil {
			if ctx.Err() == nil {
				r.cfg.Log.Warn("queueing an event's key failed; it will be redelivered", "lease", r.cfg.Lease, "key", k, "err", err)
			}
			w.failed.Store(true)
			break
		}
	}
	if w.left.Add(-1) > 0 {
		return
	}
	switch {
	case !w.failed.Load():
		_ = w.msg.Ack()
	case ctx.Err() != nil:
		_ = w.msg.Nak()
	default:
		_ = w.msg.NakWithDelay(time.Second)
	}
}

func (r *Runtime) resync(ctx context.Context, q *Queue, rs Resyncer) error {
	clock := r.cfg.Clock
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-clock.At(clock.Now().Add(r.cfg.Resync)):
		}
		keys, err := rs.Resync(ctx)
		if err != nil {
			continue
		}
		for _, k := range keys {
			if err := q.Add(ctx, k, "resync"); err != nil && ctx.Err() == nil {
				r.cfg.Log.Warn("resync", "lease", r.cfg.Lease, "key", k, "err", err)
			}
		}
	}
}

// absorb keeps a change to a queued key in memory (absorber) when this
// replica's scheduler is the one that runs the key.
func (r *Runtime) absorb(key, source string, now time.Time) bool {
	if r.cfg.Tenants == nil {
		return r.absorbed.absorb(key, source, now)
	}
	return r.cfg.Tenants.whileHeld(r.cfg.TenantOf(key), func() bool { return r.absorbed.absorb(key, source, now) })
}
