package eventstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StateVersion describes one stored version of a tenant's state.
type StateVersion struct {
	// Revision is the version's position in the bucket (its stream sequence).
	Revision uint64 `json:"revision"`
	// Serial and Lineage are tofu's, read from the blob (also present on encrypted state).
	Serial  uint64 `json:"serial"`
	Lineage string `json:"lineage"`
	// Size is the blob's length in bytes; MD5 its digest in hex.
	Size int    `json:"size"`
	MD5  string `json:"md5"`
	// Encrypted is set when tofu encrypted the state (TF_ENCRYPTION).
	Encrypted bool      `json:"encrypted"`
	Time      time.Time `json:"time"`
	// Deleted marks the version a DELETE left: no blob.
	Deleted bool `json:"deleted,omitempty"`
}

// versionOf reads a version from a stored message's headers.
func versionOf(seq uint64, t time.Time, h nats.Header) StateVersion {
	v := StateVersion{Revision: seq, Time: t.UTC(), Lineage: h.Get(headerStateLineage), MD5: h.Get(headerStateMD5),
		Encrypted: h.Get(headerStateEncrypted) == "true"}
	v.Serial, _ = strconv.ParseUint(h.Get(headerStateSerial), 10, 64)
	v.Size, _ = strconv.Atoi(h.Get(headerStateSize))
	if op := h.Get(headerKVOperation); op == "DEL" || op == "PURGE" {
		v.Deleted = true
	}
	return v
}

// versionsFetchWait bounds one fetch of state versions that are known to exist.
const versionsFetchWait = 10 * time.Second

// Versions lists the kept versions of the tenant's state, newest first,
// without reading the blobs. It is a read: what JetStream answers while it
// elects a leader (a replica lost) is retried, as for every other read.
func (s *StateStore) Versions(ctx context.Context, tenant string) ([]StateVersion, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, err
	}
	var out []StateVersion
	err := retryUnavailable(ctx, func() error {
		var err error
		out, err = s.versions(ctx, tenant)
		return err
	})
	return out, err
}

func (s *StateStore) versions(ctx context.Context, tenant string) ([]StateVersion, error) {
	// A fetch waits for a first message; make sure there is one.
	if _, err := s.stream.GetLastMsgForSubject(ctx, stateSubject(tenant)); errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("listing the state versions of %s: %w", tenant, err)
	}
	cons, err := s.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject: stateSubject(tenant), HeadersOnly: true, DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, InactiveThreshold: time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("listing the state versions of %s: %w", tenant, err)
	}
	defer func() { _ = s.stream.DeleteConsumer(context.WithoutCancel(ctx), cons.CachedInfo().Name) }()
	var out []StateVersion
	// Fetch exactly what the consumer has pending, waiting for it: a fetch that
	// does not wait can come back empty from a consumer created a moment ago on
	// a busy server, and an empty answer would claim the state has no versions.
	// The bucket keeps TFStateHistory versions; a few more may land while we read.
	for pending := cons.CachedInfo().NumPending; pending > 0 && len(out) <= 2*TFStateHistory; {
		batch, err := cons.Fetch(int(min(pending, TFStateHistory)), jetstream.FetchMaxWait(versionsFetchWait))
		if err != nil {
			return nil, fmt.Errorf("listing the state versions of %s: %w", tenant, err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			meta, err := msg.Metadata()
			if err != nil {
				return nil, fmt.Errorf("listing the state versions of %s: %w", tenant, err)
			}
			out = append(out, versionOf(meta.Sequence.Stream, meta.Timestamp, msg.Headers()))
			pending = meta.NumPending
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("listing the state versions of %s: %w", tenant, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("listing the state versions of %s: no answer within %s", tenant, versionsFetchWait)
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}
