package apply

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestDecideRun(t *testing.T) {
	applied := runFacts{Exists: true, HasFinalizer: true, HasNodeGroups: true, Generation: 3, Attempt: 1,
		Sources: []string{"NodeGroup/w@7"}}
	with := func(f func(*runFacts)) runFacts {
		c := applied
		f(&c)
		return c
	}
	apply := func(trigger string) domain.ApplySpec {
		return domain.ApplySpec{Operation: domain.OperationApply, Trigger: trigger, Generation: 3, Sources: applied.Sources}
	}
	tests := []struct {
		name   string
		facts  runFacts
		action runAction
		spec   domain.ApplySpec
	}{
		{"gone: its leftovers go", runFacts{}, runForget, domain.ApplySpec{}},
		{"gone, even with a finalizer remembered", with(func(f *runFacts) { f.Exists = false }), runForget, domain.ApplySpec{}},
		{"a change applies", applied, runApply, apply(domain.TriggerChange)},
		{"a first apply: node groups but no finalizer yet", with(func(f *runFacts) { f.HasFinalizer = false }), runApply, apply(domain.TriggerChange)},
		{"applied before, its last node group gone: apply removes it", with(func(f *runFacts) { f.HasNodeGroups = false }), runApply, apply(domain.TriggerChange)},
		{"never applied and nothing to build", with(func(f *runFacts) { f.HasFinalizer, f.HasNodeGroups = false, false }), runNothing, domain.ApplySpec{}},
		{"a retry", with(func(f *runFacts) { f.Attempt = 2 }), runApply, apply(domain.TriggerRetry)},
		{"the resync alone: a drift check", with(func(f *runFacts) { f.Sources = []string{"resync"} }), runDriftCheck, domain.ApplySpec{}},
		{"the resync alone, again: still a check, never an apply", with(func(f *runFacts) { f.Attempt, f.Sources = 3, []string{"resync"} }), runDriftCheck, domain.ApplySpec{}},
		{"the resync during an upgrade: the check waits", with(func(f *runFacts) { f.UpgradeActive, f.Sources = true, []string{"resync"} }), runDefer, domain.ApplySpec{}},
		{"the resync of a deleted tenant: its destroy is retried", with(func(f *runFacts) { f.Terminating, f.Sources = true, []string{"resync"} }), runDestroy,
			domain.ApplySpec{Operation: domain.OperationDestroy, Trigger: domain.TriggerDelete, Generation: 3, Sources: []string{"resync"}}},
		{"resync among other changes is a change", with(func(f *runFacts) { f.Sources = []string{"resync", "Tenant/t@2"} }), runApply,
			domain.ApplySpec{Operation: domain.OperationApply, Trigger: domain.TriggerChange, Generation: 3, Sources: []string{"resync", "Tenant/t@2"}}},
		{"an upgrade runs: the apply waits", with(func(f *runFacts) { f.UpgradeActive = true }), runDefer, domain.ApplySpec{}},
		{"an upgrade of a never-applied tenant without groups: nothing", with(func(f *runFacts) { f.UpgradeActive, f.HasFinalizer, f.HasNodeGroups = true, false, false }), runNothing, domain.ApplySpec{}},
		{"deleted with infrastructure: destroy", with(func(f *runFacts) { f.Terminating = true }), runDestroy,
			domain.ApplySpec{Operation: domain.OperationDestroy, Trigger: domain.TriggerDelete, Generation: 3, Sources: applied.Sources}},
		{"deleted: destroy does not wait for an upgrade", with(func(f *runFacts) { f.Terminating, f.UpgradeActive = true, true }), runDestroy,
			domain.ApplySpec{Operation: domain.OperationDestroy, Trigger: domain.TriggerDelete, Generation: 3, Sources: applied.Sources}},
		{"a retried destroy is still a delete", with(func(f *runFacts) { f.Terminating, f.Attempt = true, 4 }), runDestroy,
			domain.ApplySpec{Operation: domain.OperationDestroy, Trigger: domain.TriggerDelete, Generation: 3, Sources: applied.Sources}},
		{"deleted without infrastructure: nothing", with(func(f *runFacts) { f.Terminating, f.HasFinalizer = true, false }), runNothing, domain.ApplySpec{}},
		{"a change applied already, its event again: nothing", with(func(f *runFacts) { f.Redelivered = true }), runNothing, domain.ApplySpec{}},
		{"applied already, during an upgrade: nothing to wait for", with(func(f *runFacts) { f.Redelivered, f.UpgradeActive = true, true }), runNothing, domain.ApplySpec{}},
		{"deleted, its last change applied: still destroyed", with(func(f *runFacts) { f.Redelivered, f.Terminating = true, true }), runDestroy,
			domain.ApplySpec{Operation: domain.OperationDestroy, Trigger: domain.TriggerDelete, Generation: 3, Sources: applied.Sources}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := decideRun(tc.facts)
			require.Equal(t, tc.action.String(), d.Action.String())
			require.NotEmpty(t, d.Reason)
			require.Equal(t, tc.spec, d.Spec)
		})
	}
}

func TestEndOf(t *testing.T) {
	failed := errors.New("tofu apply: exit status 1")
	tests := []struct {
		name               string
		err, ctxErr, cause error
		want               runEnd
	}{
		{"succeeded", nil, nil, nil, endSucceeded},
		{"succeeded as the context ended", nil, context.Canceled, errCanceledByUser, endSucceeded},
		{"failed", failed, nil, nil, endFailed},
		{"canceled by a user", failed, context.Canceled, errCanceledByUser, endCanceled},
		{"timed out: a failure, retried", failed, context.DeadlineExceeded, errTimeout, endFailed},
		{"the server stopped", failed, context.Canceled, context.Canceled, endInterrupted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, endOf(tc.err, tc.ctxErr, tc.cause))
		})
	}
}

func TestTenantAfterRun(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Minute)
	running := func(destroy bool) domain.TenantStatus {
		var s domain.TenantStatus
		tenantRunning(&s, destroy, "apply-1", 3, t0)
		return s
	}
	reconciled := func(status, reason, msg string, at time.Time) []domain.Condition {
		return []domain.Condition{{Type: "Reconciled", Status: status, Reason: reason, Message: msg, ObservedGeneration: 3, LastTransitionTime: at}}
	}
	tests := []struct {
		name    string
		destroy bool
		end     runEnd
		want    domain.TenantStatus
	}{
		{"succeeded", false, endSucceeded, domain.TenantStatus{Phase: "Ready", ObservedGeneration: 3, EndpointAddress: "10.0.0.1",
			Conditions: reconciled("True", "ApplySucceeded", "apply apply-1 succeeded", t1)}},
		{"canceled keeps the phase", false, endCanceled, domain.TenantStatus{Phase: "Provisioning",
			Conditions: reconciled("False", "ApplyCanceled", "apply apply-1 was canceled", t1)}},
		{"failed", false, endFailed, domain.TenantStatus{Phase: "Failed",
			Conditions: reconciled("False", "ApplyFailed", "boom", t1)}},
		{"interrupted is recorded as failed", false, endInterrupted, domain.TenantStatus{Phase: "Failed",
			Conditions: reconciled("False", "ApplyFailed", "boom", t1)}},
		{"a failed destroy stays deleting", true, endFailed, domain.TenantStatus{Phase: "Deleting",
			Conditions: reconciled("False", "ApplyFailed", "boom", t1)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := running(tc.destroy)
			require.Equal(t, "Unknown", s.Conditions[0].Status)
			tenantAfterRun(&s, tc.end, tc.destroy, "apply-1", 3, "10.0.0.1", "boom", t1)
			require.Equal(t, tc.want, s)
		})
	}
}

// TestSourcesApplied: a run is for changes already applied only when every
// queued source is an event's that an Apply which succeeded lists.
func TestSourcesApplied(t *testing.T) {
	applied := map[string]bool{"NodeGroup/cp@39": true, "NodeGroup/workers@40": true, "resync": true,
		"Apply/apply-1@interrupted": true}
	tests := []struct {
		name    string
		sources []string
		want    bool
	}{
		{"its event again", []string{"NodeGroup/cp@39"}, true},
		{"both events of the run again", []string{"NodeGroup/workers@40", "NodeGroup/cp@39"}, true},
		{"a change since", []string{"NodeGroup/cp@39", "NodeGroup/cp@41"}, false},
		{"a change never applied", []string{"Tenant/t@12"}, false},
		{"the resync is a drift check, never applied", []string{"resync"}, false},
		{"an interrupted run is run again", []string{"Apply/apply-1@interrupted"}, false},
		{"no sequence", []string{"NodeGroup/cp@"}, false},
		{"no sources", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, sourcesApplied(tc.sources, applied))
		})
	}
	require.False(t, sourcesApplied([]string{"NodeGroup/cp@39"}, nil), "a read model that cannot say")
}
