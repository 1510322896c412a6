package eventstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A KV watch (and a key listing, which is one) reads through an ordered
// consumer, and a NATS cluster places such a consumer on any replica of the
// bucket whose meta log is current — one that has just restarted and is
// still catching up on the bucket too. Its "initial values delivered" marker
// then comes at that replica's end, not the bucket's, and whoever trusts it
// misses the newest keys without being told. The reads here go on past the
// marker until they have seen the bucket's last sequence as the stream's
// leader reports it. This needs that sequence to be delivered: it is, for a
// bucket whose newest message is never removed (no TTL, no purge of the
// last key's history), as every bucket here.

// BucketLagLimit bounds how long a whole read waits for the replica serving
// it to reach the bucket's end.
var BucketLagLimit = 30 * time.Second

// BucketLastSeq is the sequence of a bucket's newest message, as its stream
// leader reports it (0: the bucket is empty).
func BucketLastSeq(ctx context.Context, kv jetstream.KeyValue) (uint64, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return 0, err
	}
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
		return bs.StreamInfo().State.LastSeq, nil
	}
	return 0, nil
}

// ReadUntil reads a watch's updates — puts, deletes and purges: their
// markers carry sequences too — handing each to visit with whether the watch
// had delivered its initial values before it, until the watch has delivered
// them and an update at or past the sequence last. A watch still short of
// last lagLimit after its initial values fails.
func ReadUntil(ctx context.Context, updates <-chan jetstream.KeyValueEntry, last uint64, lagLimit time.Duration, visit func(e jetstream.KeyValueEntry, afterInitial bool) error) error {
	var (
		seen    uint64
		initial bool
		timeout <-chan time.Time
	)
	for !initial || seen < last {
		var kve jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout:
			return fmt.Errorf("the replica serving the read stayed behind its leader for %s (at sequence %d of %d)", lagLimit, seen, last)
		case e, ok := <-updates:
			if !ok {
				return errors.New("watch ended early")
			}
			kve = e
		}
		if kve == nil {
			initial = true
			timeout = time.After(lagLimit)
			continue
		}
		seen = max(seen, kve.Revision())
		if err := visit(kve, initial); err != nil {
			return err
		}
	}
	return nil
}

// WholeKeys lists the keys of a bucket that start with prefix (which must be
// "" or end in a dot, a subject token boundary) as the bucket's stream leader
// holds them. A key listing through a watch would read on whichever replica
// its consumer was placed (above), and the bucket's last sequence cannot
// tell it is done when the newest message may expire (a TTL bucket): the
// leader's subjects can. The list includes keys whose newest entry is a
// delete or purge marker; callers read or remove each key and skip those.
func WholeKeys(ctx context.Context, js jetstream.JetStream, bucket, prefix string) ([]string, error) {
	if prefix != "" && !strings.HasSuffix(prefix, ".") {
		return nil, fmt.Errorf("key prefix %q must end in a dot", prefix)
	}
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", bucket, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("$KV."+bucket+"."+prefix+">"))
	if err != nil {
		return nil, fmt.Errorf("listing the keys of %s: %w", bucket, err)
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		keys = append(keys, strings.TrimPrefix(subj, "$KV."+bucket+"."))
	}
	sort.Strings(keys)
	return keys, nil
}
