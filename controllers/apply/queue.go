package apply

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller"
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

// queueDescription says what waits in QueueBucket.
const queueDescription = "tenants waiting for an apply"

// queueEntry is a tenant's queued work: when its changes came, and which.
type queueEntry = controller.Entry

func openQueue(ctx context.Context, s *eventstore.Store) (jetstream.KeyValue, error) {
	return controller.OpenQueue(ctx, s, QueueBucket, queueDescription)
}

// enqueue records that tenant needs an apply because of source.
func enqueue(ctx context.Context, kv jetstream.KeyValue, tenant, source string, now time.Time) error {
	return controller.Enqueue(ctx, kv, tenant, source, now, domain.MaxApplySources)
}

// tenantEventKinds are the kinds whose events can change what a tenant's apply builds.
// A Remediation's creation asks for a run that replaces its machine.
var tenantEventKinds = []*domain.KindInfo{domain.TenantKind, domain.NodeGroupKind, domain.ConfigPatchKind, domain.ProviderKind, domain.RemediationKind}
