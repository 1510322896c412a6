package projections

// Loading the cache at start from the projection buckets (a snapshot), then
// replaying the stream from the snapshot's checkpoint.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// snapshotEntry is one object read from a projection bucket.
type snapshotEntry struct {
	ref domain.Ref
	e   *entry
}

// loadSnapshot reads every projection bucket and the projector's checkpoint,
// and fills the empty cache with them; ckpt 0 means there was none (nothing
// loaded). An error leaves the cache empty.
func (c *Cache) loadSnapshot(ctx context.Context, last uint64) (objects int, ckpt uint64, err error) {
	js := c.store.JetStream()
	ckv, err := js.KeyValue(ctx, CheckpointBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	// The checkpoint first: whatever the buckets hold is at least as new.
	ce, err := ckv.Get(ctx, "checkpoint")
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	if ckpt, err = strconv.ParseUint(string(ce.Value()), 10, 64); err != nil || ckpt == 0 {
		return 0, 0, fmt.Errorf("checkpoint %q is not a sequence", ce.Value())
	}
	if ckpt > last {
		// The stream lost its tail (a kill -9 before JetStream wrote its
		// buffered messages out) while the projections kept theirs: they
		// hold states no event has, and the next events will reuse those
		// sequences. Only the stream is the truth.
		return 0, 0, fmt.Errorf("the projections (checkpoint %d) are ahead of the event stream (last %d)", ckpt, last)
	}
	var all []snapshotEntry
	for _, k := range domain.Kinds() {
		got, err := readBucket(ctx, js, k)
		if err != nil {
			return 0, 0, err
		}
		all = append(all, got...)
	}
	c.mu.Lock()
	for _, s := range all {
		c.set(s.ref, s.e)
	}
	c.seq = ckpt
	// Wake whoever waits for a sequence (WaitFor, Sync): the snapshot may
	// be all they wait for, with no event coming after it.
	ch := c.advanced
	c.advanced = make(chan struct{})
	c.mu.Unlock()
	close(ch)
	return len(all), ckpt, nil
}

// readBucket reads the current value of every key of a kind's projection.
//
// The watch behind it may be served by a replica still catching up (a
// replica that has just restarted; see eventstore.ReadUntil): a snapshot read
// there would miss the newest keys while the checkpoint, read before, says
// they are in it, and the replay after the checkpoint would never bring them
// back (CI lost a write this way on a restarted replica). So the read goes
// on until it has the bucket's last sequence as the stream's leader reports
// it, asked after the checkpoint was read: what it returns is then at least
// as new as the checkpoint, which is all the replay after it needs. A
// replica behind for eventstore.BucketLagLimit fails the read, and the cache
// replays the stream from the start instead, slower and as correct.
func readBucket(ctx context.Context, js jetstream.JetStream, k *domain.KindInfo) ([]snapshotEntry, error) {
	kv, err := js.KeyValue(ctx, BucketName(k))
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", BucketName(k), err)
	}
	last, err := eventstore.BucketLastSeq(ctx, kv)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", BucketName(k), err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", BucketName(k), err)
	}
	defer func() { _ = w.Stop() }()
	out, err := readUpdates(ctx, k, w.Updates(), last, eventstore.BucketLagLimit)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", BucketName(k), err)
	}
	return out, nil
}

// readUpdates collects a projection bucket's watch until it has the bucket's
// end (last); later updates of a key replace earlier ones, deletes remove it.
func readUpdates(ctx context.Context, k *domain.KindInfo, updates <-chan jetstream.KeyValueEntry, last uint64, lagLimit time.Duration) ([]snapshotEntry, error) {
	var out []snapshotEntry
	var at map[string]int // key → index in out, once an update follows the initial values
	err := eventstore.ReadUntil(ctx, updates, last, lagLimit, func(kve jetstream.KeyValueEntry, afterInitial bool) error {
		if afterInitial && at == nil {
			at = make(map[string]int, len(out))
			for i, s := range out {
				at[s.ref.Key()] = i
			}
		}
		if kve.Operation() != jetstream.KeyValuePut {
			if i, ok := at[kve.Key()]; ok {
				out[i].e = nil
			}
			return nil
		}
		s, err := decodeBucketEntry(k, kve)
		if err != nil {
			return err
		}
		if i, ok := at[kve.Key()]; ok {
			out[i] = s
			return nil
		}
		if at != nil {
			at[kve.Key()] = len(out)
		}
		out = append(out, s)
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Keys deleted after the initial values are dropped.
	kept := out[:0]
	for _, s := range out {
		if s.e != nil {
			kept = append(kept, s)
		}
	}
	return kept, nil
}

// decodeBucketEntry is one projection bucket value as the cache holds it.
func decodeBucketEntry(k *domain.KindInfo, kve jetstream.KeyValueEntry) (snapshotEntry, error) {
	obj := &domain.Object{}
	if err := json.Unmarshal(kve.Value(), obj); err != nil {
		return snapshotEntry{}, fmt.Errorf("key %s: %w", kve.Key(), err)
	}
	seq, err := strconv.ParseUint(obj.Metadata.ResourceVersion, 10, 64)
	if err != nil {
		return snapshotEntry{}, fmt.Errorf("key %s: resourceVersion %q", kve.Key(), obj.Metadata.ResourceVersion)
	}
	ref := domain.Ref{Kind: k.Kind, Tenant: obj.Metadata.Tenant, Name: obj.Metadata.Name}
	if ref.Key() != kve.Key() {
		return snapshotEntry{}, fmt.Errorf("key %s holds %s", kve.Key(), ref)
	}
	return snapshotEntry{ref: ref, e: newEntry(obj, kve.Value(), seq)}, nil
}
