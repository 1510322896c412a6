package apply

import (
	"errors"
	"strings"

	"github.com/rezuscloud/rezuscloud/domain"
)

// runAction is what a run of a tenant must do.
type runAction int

const (
	// runNothing: there is nothing to build or remove; the queued work is done.
	runNothing runAction = iota
	// runForget: the tenant is gone; what it left behind (state, work dir) goes.
	runForget
	// runDefer: not now (an upgrade of the tenant runs); tried again later
	// without counting as a failure.
	runDefer
	// runApply: tofu apply (and the metal machines) of the tenant's node groups.
	runApply
	// runDestroy: tofu destroy before the tenant's infrastructure finalizer goes.
	runDestroy
	// runDriftCheck: tofu plan and the machines' running configs compared
	// with the declared ones (drift.go); with action correct, an apply follows.
	runDriftCheck
)

func (a runAction) String() string {
	switch a {
	case runNothing:
		return "nothing"
	case runForget:
		return "forget"
	case runDefer:
		return "defer"
	case runApply:
		return "apply"
	case runDestroy:
		return "destroy"
	case runDriftCheck:
		return "drift check"
	}
	return "unknown"
}

// runFacts is what decideRun looks at, read from the read model when a
// queued tenant's turn comes.
type runFacts struct {
	// Exists is false when the tenant is gone from the read model.
	Exists bool
	// Terminating says the tenant's deletion was requested.
	Terminating bool
	// HasFinalizer says the tenant carries InfraFinalizer: it was applied at
	// least once, so it may have infrastructure.
	HasFinalizer bool
	// HasNodeGroups says the tenant has node groups (deleting ones included).
	HasNodeGroups bool
	// UpgradeActive says a rolling upgrade of the tenant runs.
	UpgradeActive bool
	// Generation is the tenant's metadata.generation.
	Generation int64
	// Attempt is the 1-based attempt of the queued work.
	Attempt int
	// Sources are the queued changes.
	Sources []string
	// Redelivered says every queued change is one a run that succeeded
	// listed as its cause (sourcesApplied): its event came again (a
	// replica stopped before it was acknowledged), and the run it asked
	// for happened.
	Redelivered bool
}

// runDecision is what a run must do, why, and (for apply and destroy) the
// Apply it records.
type runDecision struct {
	Action runAction
	Reason string
	Spec   domain.ApplySpec
}

// decideRun decides what a run of a tenant must do. It is pure, so that
// every case is table-tested; the worker performs the decision.
func decideRun(f runFacts) runDecision {
	switch {
	case !f.Exists:
		// Gone without a destroy: it never had infrastructure (the finalizer
		// is added before the first apply).
		return runDecision{Action: runForget, Reason: "the tenant is gone"}
	case f.Terminating && !f.HasFinalizer:
		return runDecision{Action: runNothing, Reason: "the tenant is being deleted and has no infrastructure"}
	case !f.Terminating && !f.HasFinalizer && !f.HasNodeGroups:
		// Never applied and nothing to build: no infrastructure, nothing to record.
		return runDecision{Action: runNothing, Reason: "the tenant was never applied and has no node groups"}
	case !f.Terminating && f.Redelivered:
		// On another replica than the run that applied it, the record of
		// what tofu last saw (unchanged.go) is not there: without this, a
		// tofu run that changes nothing, and an Apply for a change applied.
		return runDecision{Action: runNothing, Reason: "every queued change was applied by a run that succeeded (its event came again)"}
	case !f.Terminating && f.UpgradeActive:
		// Version-specific configs must not be regenerated under the saga's feet.
		return runDecision{Action: runDefer, Reason: "an upgrade of the tenant is running; the apply waits for it"}
	}
	spec := domain.ApplySpec{Operation: domain.OperationApply, Trigger: domain.TriggerChange,
		Generation: f.Generation, Sources: f.Sources}
	d := runDecision{Action: runApply, Reason: "the tenant's infrastructure follows its spec"}
	switch {
	case f.Terminating:
		spec.Operation, spec.Trigger = domain.OperationDestroy, domain.TriggerDelete
		d = runDecision{Action: runDestroy, Reason: "the tenant is being deleted and may have infrastructure"}
	case len(f.Sources) == 1 && f.Sources[0] == resyncSource:
		// Queued by the resync alone (Resync queues a live tenant only when
		// its drift check is due): nothing changed, so the run checks.
		return runDecision{Action: runDriftCheck, Reason: "the tenant's drift check is due"}
	case f.Attempt > 1:
		spec.Trigger = domain.TriggerRetry
	}
	d.Spec = spec
	return d
}

// resyncSource is the source the controller runtime queues resyncs with.
const resyncSource = "resync"

// sourcesApplied says whether every queued source is an event's
// ("<Kind>/<name>@<sequence>") that applied, the sources of the tenant's
// Applies that succeeded, lists: such a run read a model that had the
// event. A resync, an interrupted run's retry or any other source is never
// applied; no sources are not either.
func sourcesApplied(sources []string, applied map[string]bool) bool {
	if len(sources) == 0 {
		return false
	}
	for _, s := range sources {
		_, seq, ok := strings.Cut(s, "@")
		if !ok || seq == "" || strings.Trim(seq, "0123456789") != "" || !applied[s] {
			return false
		}
	}
	return true
}

// runEnd is how a run that started ended.
type runEnd int

const (
	endSucceeded runEnd = iota
	// endCanceled: a user canceled it; the queued work is done with.
	endCanceled
	// endInterrupted: the server stopped or lost the worker lease; the tenant
	// stays queued and the next holder runs it.
	endInterrupted
	// endFailed: it failed (a timeout too) and is retried with backoff.
	endFailed
)

// endOf classifies a run from its error, its context's error and its
// context's cause: a user's cancel and a timeout are told from the server
// stopping by the cause the context was ended with.
func endOf(err, ctxErr, cause error) runEnd {
	switch {
	case err == nil:
		return endSucceeded
	case errors.Is(cause, errCanceledByUser):
		return endCanceled
	case ctxErr != nil && !errors.Is(cause, errTimeout):
		return endInterrupted
	}
	return endFailed
}
