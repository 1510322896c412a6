package domain_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// statusTypes are the status types StatusOwners covers, by kind.
var statusTypes = map[string]any{
	domain.MachineKind.Kind: domain.MachineStatus{},
	domain.TenantKind.Kind:  domain.TenantStatus{},
}

// Every field of a covered status has one declared writer, and every
// declared part is a field of it: a field added without an owner fails here
// before a controller writing it fails at run time.
func TestStatusOwnersCoverEveryField(t *testing.T) {
	require.Len(t, domain.StatusOwners, len(statusTypes))
	writers := []string{domain.ActorHealth, domain.ActorApplyWorker, domain.ActorUpgradeSaga, domain.ActorConfigSync, domain.ActorPKI}
	for kind, v := range statusTypes {
		owners := domain.StatusOwners[kind]
		require.NotNil(t, owners, kind)
		typ := reflect.TypeOf(v)
		fields := map[string]bool{}
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if name == "conditions" {
				continue
			}
			fields[name] = true
			require.Contains(t, owners, name, "%s status.%s has no owner", kind, name)
		}
		for f, owner := range owners {
			require.Contains(t, writers, owner, "%s status.%s", kind, f)
			if strings.HasPrefix(f, "conditions[") {
				require.True(t, strings.HasSuffix(f, "]") && len(f) > len("conditions[]"), f)
				continue
			}
			require.True(t, fields[f], "%s status has no field %s", kind, f)
		}
	}
}

// A write to move names a declared part whose owner is someone else, once.
func TestStatusWritesToMoveAreOthersParts(t *testing.T) {
	seen := map[string]bool{}
	for _, w := range domain.StatusWritesToMove {
		key := w.Kind + " " + w.Field + " " + w.Actor
		require.False(t, seen[key], "listed twice: %s", key)
		seen[key] = true
		owner := domain.StatusOwner(w.Kind, w.Field)
		require.NotEmpty(t, owner, "%s status.%s has no owner", w.Kind, w.Field)
		require.NotEqual(t, owner, w.Actor, "%s owns %s status.%s: nothing to move", w.Actor, w.Kind, w.Field)
		require.NotEmpty(t, w.Move, key)
	}
}

func TestChangedStatusFields(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	healthy := domain.Condition{Type: domain.ConditionHealthy, Status: "True", LastTransitionTime: at}
	applied := domain.Condition{Type: domain.ConditionConfigApplied, Status: "True", LastTransitionTime: at}
	base := domain.MachineStatus{Stage: "Running", Conditions: []domain.Condition{healthy, applied}}
	for _, tc := range []struct {
		name   string
		mutate func(*domain.MachineStatus)
		want   []string
	}{
		{"nothing", func(*domain.MachineStatus) {}, nil},
		{"a field", func(s *domain.MachineStatus) { s.Stage = "Rebooting" }, []string{"stage"}},
		{"a field set", func(s *domain.MachineStatus) { s.Node = domain.NodeReady }, []string{"node"}},
		{"a condition changed", func(s *domain.MachineStatus) { s.Conditions[0].Status = "False" }, []string{"conditions[Healthy]"}},
		{"a condition removed", func(s *domain.MachineStatus) { s.Conditions = s.Conditions[1:] }, []string{"conditions[Healthy]"}},
		{"conditions reordered", func(s *domain.MachineStatus) { slices.Reverse(s.Conditions) }, nil},
		{"a condition added", func(s *domain.MachineStatus) {
			s.Conditions = append(s.Conditions, domain.Condition{Type: "Other", Status: "True", LastTransitionTime: at})
		}, []string{"conditions[Other]"}},
		{"two", func(s *domain.MachineStatus) { s.Ready, s.ConfigUpToDate = true, true }, []string{"configUpToDate", "ready"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := base
			next.Conditions = slices.Clone(base.Conditions)
			tc.mutate(&next)
			got, err := domain.ChangedStatusFields(mustJSON(t, base), mustJSON(t, next))
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestCheckStatusWrite(t *testing.T) {
	machine := domain.ObjectRef(domain.MachineKind, "acme", "w-1")
	tenant := domain.TenantRef("acme")
	before := mustJSON(t, domain.MachineStatus{Stage: "Running", Ready: true})
	for _, tc := range []struct {
		name   string
		ref    domain.Ref
		actor  string
		before json.RawMessage
		after  any
		// refused are the parts named in the answer; none: allowed.
		refused []string
	}{
		{name: "the owner", ref: machine, actor: domain.ActorHealth, before: before,
			after: domain.MachineStatus{Stage: "Rebooting"}},
		{name: "another controller", ref: machine, actor: domain.ActorConfigSync, before: before,
			after: domain.MachineStatus{Stage: "Rebooting", Ready: true, ConfigUpToDate: true}, refused: []string{"status.stage"}},
		{name: "a controller that owns nothing", ref: machine, actor: "system:remediation", before: before,
			after: domain.MachineStatus{Stage: "Running", Ready: false}, refused: []string{"status.ready"}},
		{name: "a write still to move", ref: machine, actor: domain.ActorApplyWorker, before: before,
			after: domain.MachineStatus{Stage: "Installing", Ready: false}},
		{name: "a write moved to its owner", ref: machine, actor: domain.ActorUpgradeSaga, before: before,
			after: domain.MachineStatus{Stage: "Upgrading", Ready: false}, refused: []string{"status.ready", "status.stage"}},
		{name: "a condition by type", ref: machine, actor: domain.ActorConfigSync, before: before,
			after: domain.MachineStatus{Stage: "Running", Ready: true, Conditions: []domain.Condition{
				{Type: domain.ConditionConfigApplied, Status: "True"}, {Type: domain.ConditionHealthy, Status: "True"}}},
			refused: []string{"status.conditions[Healthy]"}},
		{name: "an undeclared condition", ref: machine, actor: domain.ActorHealth, before: before,
			after:   domain.MachineStatus{Stage: "Running", Ready: true, Conditions: []domain.Condition{{Type: "Mystery", Status: "True"}}},
			refused: []string{"status.conditions[Mystery]"}},
		{name: "a person through the API", ref: machine, actor: "alice", before: before,
			after: domain.MachineStatus{Stage: "Rebooting", ConfigUpToDate: true}},
		{name: "a kind without owners", ref: domain.ObjectRef(domain.ApplyKind, "acme", "a-1"), actor: domain.ActorHealth,
			after: domain.ApplyStatus{Phase: domain.ApplySucceeded}},
		// A stored status older than a defaulted field: the default is no change.
		{name: "a stored status without defaults", ref: machine, actor: domain.ActorConfigSync, before: json.RawMessage(`{"ready":true}`),
			after: domain.MachineStatus{Stage: "Unknown", Ready: true, ConfigUpToDate: true}},
		{name: "the tenant's owner", ref: tenant, actor: domain.ActorApplyWorker,
			after: domain.TenantStatus{Phase: "Ready", ObservedGeneration: 2}},
		{name: "the tenant's counts", ref: tenant, actor: domain.ActorConfigSync,
			after:   domain.TenantStatus{Machines: domain.MachineCounts{Total: 1}, KubernetesVersion: "v1.34.1"},
			refused: []string{"status.kubernetesVersion", "status.machines"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := domain.CheckStatusWrite(tc.ref, tc.actor, tc.before, mustJSON(t, tc.after))
			if len(tc.refused) == 0 {
				require.NoError(t, err)
				return
			}
			require.Equal(t, domain.ReasonForbidden, domain.ReasonOf(err), "%v", err)
			var se *domain.Error
			require.ErrorAs(t, err, &se)
			var fields []string
			for _, c := range se.Causes {
				fields = append(fields, c.Field)
				require.Equal(t, domain.CauseForbidden, c.Type)
				require.Contains(t, c.Message, tc.actor)
				require.Contains(t, se.Message, c.Field)
			}
			require.Equal(t, tc.refused, fields)
		})
	}
}

// The answer names the owner of each part refused.
func TestCheckStatusWriteNamesTheOwner(t *testing.T) {
	err := domain.CheckStatusWrite(domain.ObjectRef(domain.MachineKind, "acme", "w-1"), domain.ActorApplyWorker,
		nil, mustJSON(t, domain.MachineStatus{ConfigWait: &domain.StepWait{For: "w-1 to be back"}}))
	require.EqualError(t, err, `machine "w-1" is forbidden: status.configWait is written by system:config-sync, not system:apply-worker`)
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return raw
}
