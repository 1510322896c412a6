package projections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// legacyProjectorConsumer is the durable consumer earlier versions used; Rebuild
// and Provision remove it. Progress now lives only in the checkpoint bucket.
const legacyProjectorConsumer = "projector-v1"

// projectorLease is the lease key: one replica writes the buckets at a time, so
// per-key order is the stream's order.
const projectorLease = "projector"

// BucketName returns the KV bucket of a kind's projection.
func BucketName(k *domain.KindInfo) string { return "rezus-" + k.Plural }

// CheckpointBucket holds the projector's progress (key "checkpoint": the last
// stream sequence written to the buckets).
const CheckpointBucket = "rezus-projections"

// Projector is the lease-holding worker that writes one KV bucket per kind, keyed
// "<tenant-or-_>.<name>", valued with the object's JSON (the same bytes the API
// serves). Deletions delete the key.
type Projector struct {
	store  *eventstore.Store
	log    *slog.Logger
	holder string

	checkpoint atomic.Uint64
	caughtUp   atomic.Bool
}

// NewProjector returns a projector; holder identifies this replica in the lease.
func NewProjector(store *eventstore.Store, log *slog.Logger, holder string) *Projector {
	if log == nil {
		log = slog.Default()
	}
	return &Projector{store: store, log: log, holder: holder}
}

// Provision creates the buckets, idempotently.
func (p *Projector) Provision(ctx context.Context) error {
	js := p.store.JetStream()
	for _, k := range domain.Kinds() {
		if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: BucketName(k), Description: k.Kind + " projection", History: 1,
			Storage: jetstream.FileStorage, Replicas: p.store.Replicas(),
		}); err != nil {
			return fmt.Errorf("provisioning bucket %s: %w", BucketName(k), err)
		}
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: CheckpointBucket, Description: "projector progress", History: 1,
		Storage: jetstream.FileStorage, Replicas: p.store.Replicas(),
	}); err != nil {
		return fmt.Errorf("provisioning bucket %s: %w", CheckpointBucket, err)
	}
	if err := js.DeleteConsumer(ctx, eventstore.StreamName, legacyProjectorConsumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("removing legacy consumer %s: %w", legacyProjectorConsumer, err)
	}
	return nil
}

// Checkpoint is the last stream sequence written to the buckets.
func (p *Projector) Checkpoint() uint64 { return p.checkpoint.Load() }

// CaughtUp reports whether the projector has once drained the stream since start.
func (p *Projector) CaughtUp() bool { return p.caughtUp.Load() }

// Run writes the projections while this replica holds the projector lease,
// until ctx ends.
func (p *Projector) Run(ctx context.Context) error {
	// Provisioning is idempotent: on a cluster slow to answer, try again.
	var leases *eventstore.Leases
	err := eventstore.UntilClusterReady(ctx, func() error {
		if err := p.Provision(ctx); err != nil {
			return err
		}
		var err error
		leases, err = eventstore.OpenLeases(ctx, p.store, eventstore.LeaseTTL)
		return err
	})
	if err != nil {
		return err
	}
	_, last, err := p.store.Bounds(ctx)
	if err != nil {
		return err
	}
	// Every replica follows the checkpoint, so each can tell when the
	// projections have caught up, whichever replica holds the lease.
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return p.followCheckpoint(gctx, last) })
	g.Go(func() error { return leases.RunWhileHeld(gctx, projectorLease, p.holder, p.run) })
	return g.Wait()
}

// followCheckpoint tracks the checkpoint key and marks the projections caught up
// once it reaches last, the stream's last sequence when this replica started.
func (p *Projector) followCheckpoint(ctx context.Context, last uint64) error {
	if last == 0 {
		p.caughtUp.Store(true)
	}
	kv, err := p.store.JetStream().KeyValue(ctx, CheckpointBucket)
	if err != nil {
		return fmt.Errorf("projector: %w", err)
	}
	// A watch that ends (its consumer lost with a node, in a rolling
	// upgrade) is opened again: returning would leave this replica never
	// caught up, and its /readyz 503 for good (CI saw one stay at
	// "projections catching up" for two minutes after a lame duck).
	for ctx.Err() == nil {
		if err := p.watchCheckpoint(ctx, kv, last); err != nil && ctx.Err() == nil {
			slog.Warn("projector: watching the checkpoint; again in a second", "err", err)
		}
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}

// watchCheckpoint follows the checkpoint key until the watch or ctx ends.
func (p *Projector) watchCheckpoint(ctx context.Context, kv jetstream.KeyValue, last uint64) error {
	w, err := kv.Watch(ctx, "checkpoint")
	if err != nil {
		return fmt.Errorf("watching checkpoint: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return nil
			}
			if e == nil {
				continue
			}
			seq, err := strconv.ParseUint(string(e.Value()), 10, 64)
			if err != nil {
				continue
			}
			p.advance(seq)
			if seq >= last {
				p.caughtUp.Store(true)
			}
		}
	}
}

// advance moves the checkpoint forward, never back.
func (p *Projector) advance(seq uint64) {
	for {
		cur := p.checkpoint.Load()
		if seq <= cur || p.checkpoint.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// run projects events from the checkpoint on. It reads with an ordered
// consumer that starts after the stored checkpoint: a durable consumer would
// leave messages delivered to a holder that stopped pending until their ack
// wait, stalling the next holder; with the checkpoint as the only progress
// record, a takeover resumes at once. The lease keeps writers to one.
func (p *Projector) run(ctx context.Context) error {
	js := p.store.JetStream()
	ckpt, err := js.KeyValue(ctx, CheckpointBucket)
	if err != nil {
		return fmt.Errorf("projector: %w", err)
	}
	var from uint64
	if e, err := ckpt.Get(ctx, "checkpoint"); err == nil {
		if from, err = strconv.ParseUint(string(e.Value()), 10, 64); err != nil {
			return fmt.Errorf("projector: corrupt checkpoint %q", e.Value())
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("projector: reading checkpoint: %w", err)
	}
	_, last, err := p.store.Bounds(ctx)
	if err != nil {
		return fmt.Errorf("projector: %w", err)
	}
	if from > last {
		// The stream lost its tail in a crash (JetStream writes out its
		// buffered messages asynchronously) after the projections had
		// them: they hold states no event has, and the next events reuse
		// those sequences. Rebuild from the stream, the truth.
		p.log.Warn("projector: the projections are ahead of the event stream; rebuilding them from it", "checkpoint", from, "last", last)
		if err := p.Rebuild(ctx); err != nil {
			return err
		}
		if ckpt, err = js.KeyValue(ctx, CheckpointBucket); err != nil {
			return fmt.Errorf("projector: %w", err)
		}
		from = 0
	}
	p.advance(from)
	if last <= from {
		p.caughtUp.Store(true)
	}
	cons, err := js.OrderedConsumer(ctx, eventstore.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{domain.SubjectPrefix + ".>"},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    from + 1,
	})
	if err != nil {
		return fmt.Errorf("projector: %w", err)
	}
	buckets := map[string]string{}
	for _, k := range domain.Kinds() {
		buckets[k.Kind] = BucketName(k)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(1024))
	if err != nil {
		return fmt.Errorf("projector: %w", err)
	}
	defer it.Stop()
	var futures []jetstream.PubAckFuture
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("projector: %w", err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("projector: %w", err)
		}
		f, err := p.project(buckets, msg, md.Sequence.Stream)
		if err != nil {
			return err
		}
		if f != nil {
			futures = append(futures, f)
		}
		// Writes are pipelined; settle them and record progress when the
		// backlog is drained or the batch is large.
		if md.NumPending > 0 && len(futures) < 512 {
			continue
		}
		if err := p.settle(ctx, futures); err != nil {
			// A write not acknowledged in time (a bucket changing leader)
			// ends this run; the lease loop starts the next one from the
			// checkpoint, and writing the same states again is harmless.
			p.log.Warn("projector: writing the projections; resuming from the checkpoint", "checkpoint", p.checkpoint.Load(), "err", err)
			return err
		}
		futures = futures[:0]
		seq := md.Sequence.Stream
		if _, err := ckpt.Put(ctx, "checkpoint", []byte(strconv.FormatUint(seq, 10))); err != nil {
			return fmt.Errorf("projector: writing checkpoint: %w", err)
		}
		p.advance(seq)
		if md.NumPending == 0 {
			p.caughtUp.Store(true)
		}
	}
}

// project publishes one event's effect on its bucket asynchronously.
func (p *Projector) project(buckets map[string]string, msg jetstream.Msg, seq uint64) (jetstream.PubAckFuture, error) {
	ev := &domain.Event{}
	err := json.Unmarshal(msg.Data(), ev)
	if err == nil && ev.Object == nil {
		err = errors.New("the event has no object")
	}
	if err == nil {
		// A record of an older level is projected at this one; a newer
		// one as written (the projections serve it as it is).
		err = domain.UpConvertEvent(ev)
	}
	if err != nil {
		p.store.Poisoned(eventstore.StreamName, seq, msg.Subject(), msg.Data(), err)
		return nil, nil
	}
	bucket, ok := buckets[ev.Object.Kind]
	if !ok {
		return nil, nil
	}
	out := &nats.Msg{Subject: "$KV." + bucket + "." + ev.Ref().Key(), Header: nats.Header{}}
	if state := domain.Evolve(nil, ev, seq); state != nil {
		raw, err := json.Marshal(state)
		if err != nil {
			return nil, fmt.Errorf("projector: encoding %s: %w", ev.Ref(), err)
		}
		out.Data = raw
	} else {
		out.Header.Set("KV-Operation", "DEL")
	}
	f, err := p.store.JetStream().PublishMsgAsync(out)
	if err != nil {
		return nil, fmt.Errorf("projector: writing %s: %w", ev.Ref(), err)
	}
	return f, nil
}

func (p *Projector) settle(ctx context.Context, futures []jetstream.PubAckFuture) error {
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("projector: writing %s: %w", f.Msg().Subject, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Rebuild drops the buckets (and with them the checkpoint) and provisions them again, so the
// next Run replays the whole stream into empty buckets. Stop Run first.
func (p *Projector) Rebuild(ctx context.Context) error {
	js := p.store.JetStream()
	for _, b := range append(bucketNames(), CheckpointBucket) {
		if err := js.DeleteKeyValue(ctx, b); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
			return fmt.Errorf("rebuild: deleting bucket %s: %w", b, err)
		}
	}
	p.checkpoint.Store(0)
	p.caughtUp.Store(false)
	return p.Provision(ctx)
}

func bucketNames() []string {
	var out []string
	for _, k := range domain.Kinds() {
		out = append(out, BucketName(k))
	}
	return out
}
