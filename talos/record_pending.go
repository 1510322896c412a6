package talos

import (
	"context"

	"github.com/rezuscloud/rezuscloud/domain"
)

// ReasonPending : the machine's rendered config changed and is waiting for
// its turn in a rollout (its node group's, or a control plane's that waits
// for the others to be healthy).
const ReasonPending = "Pending"

// Pending records that machine ref does not hold its rendered config yet but
// nothing failed: configUpToDate false, ConfigApplied Unknown with the reason
// Pending and message saying what it waits for.
func (r ConfigRecorder) Pending(ctx context.Context, ref domain.Ref, message string) error {
	return r.status(ctx, ref, false, domain.Condition{Type: domain.ConditionConfigApplied, Status: "Unknown", Reason: ReasonPending, Message: message})
}
