package health

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// The probe's write-back changes only the status parts health owns (and the
// tenant phase it still moves between Ready and Degraded, a write to move):
// domain.StatusOwners is checked on what machineStatusAfter and
// tenantStatusAfter make of statuses a config and an apply wrote.
func TestWriteBackWritesOnlyHealthsParts(t *testing.T) {
	require.Equal(t, domain.ActorHealth, Actor)
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	earlier := now.Add(-time.Hour)
	machine := domain.ObjectRef(domain.MachineKind, "acme", "w-1")
	configured := domain.MachineStatus{Stage: "Unknown", ConfigUpToDate: true, Conditions: []domain.Condition{
		{Type: domain.ConditionConfigApplied, Status: "True", Reason: "Day0", LastTransitionTime: earlier}}}
	for name, mh := range map[string]domain.MachineHealth{
		"healthy":     {Name: "w-1", Role: domain.RoleWorker, Reachable: true, Ready: true, Stage: "Running", TalosVersion: "v1.13.0", Node: domain.NodeReady},
		"unreachable": {Name: "w-1", Role: domain.RoleWorker, Error: "connection refused", Node: domain.NodeMissing},
	} {
		next, changed := machineStatusAfter(configured, mh, now, time.Minute)
		require.True(t, changed, name)
		require.NoError(t, domain.CheckStatusWrite(machine, Actor, marshal(t, configured), marshal(t, next)), name)
	}

	tenant := domain.TenantRef("acme")
	applied := domain.TenantStatus{Phase: "Ready", ObservedGeneration: 3, EndpointAddress: "10.0.0.1", KubernetesVersion: "v1.34.1",
		Conditions: []domain.Condition{{Type: "Reconciled", Status: "True", LastTransitionTime: earlier}}}
	for name, h := range map[string]domain.TenantHealth{
		"ready":    {State: domain.HealthReady, Machines: []domain.MachineHealth{{Name: "w-1", Ready: true}}},
		"degraded": {State: domain.HealthDegraded, Reasons: []string{"w-1 unreachable"}, Machines: []domain.MachineHealth{{Name: "w-1"}}},
	} {
		next, changed := tenantStatusAfter(applied, h, now)
		require.True(t, changed, name)
		require.NoError(t, domain.CheckStatusWrite(tenant, Actor, marshal(t, applied), marshal(t, next)), name)
	}
}

func marshal(t *testing.T, v any) json.RawMessage {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return raw
}
