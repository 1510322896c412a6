package tfrunner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// QueueBucket holds the tenants waiting for an apply: key = tenant, value =
// a queueEntry. An entry is written when a tenant-affecting event arrives and
// deleted (compare-and-set on the revision the run started from) when a run
// succeeds, so work queued during a run survives it as a follow-up, and work
// queued before a crash is still there after a restart.
const QueueBucket = "rezus-apply-queue"

// WorkerConsumer is the durable consumer that turns events into queue entries.
const WorkerConsumer = "apply-worker"

// WorkerActor is the actor of the worker's own writes; its events queue nothing.
const WorkerActor = "system:apply-worker"

type queueEntry struct {
	// First is when the oldest unapplied change was queued; Last the newest.
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
	// Sources are the changes, "<Kind>/<name>@<resourceVersion>", newest last.
	Sources []string `json:"sources,omitempty"`
}

func openQueue(ctx context.Context, s *eventstore.Store) (jetstream.KeyValue, error) {
	kv, err := s.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: QueueBucket, Description: "tenants waiting for an apply", History: 1,
		Storage: jetstream.FileStorage, Replicas: s.Replicas(),
	})
	if err != nil {
		return nil, fmt.Errorf("provisioning bucket %s: %w", QueueBucket, err)
	}
	return kv, nil
}

// enqueue records that tenant needs an apply because of source.
func enqueue(ctx context.Context, kv jetstream.KeyValue, tenant, source string, now time.Time) error {
	for attempt := 0; attempt < 20; attempt++ {
		e, err := kv.Get(ctx, tenant)
		var entry queueEntry
		var rev uint64
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			rev = e.Revision()
			if err := json.Unmarshal(e.Value(), &entry); err != nil {
				entry = queueEntry{}
			}
		}
		if entry.First.IsZero() {
			entry.First = now
		}
		entry.Last = now
		if source != "" && !slices.Contains(entry.Sources, source) {
			entry.Sources = append(entry.Sources, source)
			if len(entry.Sources) > domain.MaxApplySources {
				entry.Sources = entry.Sources[len(entry.Sources)-domain.MaxApplySources:]
			}
		}
		raw, _ := json.Marshal(entry)
		if rev == 0 {
			_, err = kv.Create(ctx, tenant, raw)
		} else {
			_, err = kv.Update(ctx, tenant, raw, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongLastSequence(err) {
			return err
		}
	}
	return fmt.Errorf("queueing tenant %s: too many concurrent writers", tenant)
}

func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// tenantEventSubjects are the events that can change what a tenant's apply builds.
func tenantEventSubjects() []string {
	var out []string
	for _, k := range []*domain.KindInfo{domain.TenantKind, domain.NodeGroupKind, domain.ConfigPatchKind, domain.ProviderKind} {
		out = append(out, domain.SubjectPrefix+"."+k.Subject+".>")
	}
	return out
}
