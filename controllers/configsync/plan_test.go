package configsync

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/talos"
)

func TestDecideMachine(t *testing.T) {
	applied := &domain.Condition{Type: domain.ConditionConfigApplied, Status: "True", Reason: talos.ReasonAppliedInPlace}
	failed := &domain.Condition{Type: domain.ConditionConfigApplied, Status: "False", Reason: talos.ReasonApplyFailed}
	pending := &domain.Condition{Type: domain.ConditionConfigApplied, Status: "Unknown", Reason: talos.ReasonPending}
	notBack := &domain.Condition{Type: domain.ConditionConfigApplied, Status: "False", Reason: ReasonNotBack}
	tests := []struct {
		name string
		f    machineFacts
		want action
	}{
		{"holds it, status says so", machineFacts{Held: "a", Rendered: "a", UpToDate: true, Condition: applied}, actNone},
		{"a new rendered config", machineFacts{Held: "a", Rendered: "b", UpToDate: true, Condition: applied}, actApply},
		{"no hash known (built before the config path, or registered)", machineFacts{Held: "", Rendered: "b"}, actApply},
		{"failed before, still differs", machineFacts{Held: "a", Rendered: "b", Condition: failed}, actApply},
		{"failed before, the spec went back to what it holds", machineFacts{Held: "a", Rendered: "a", Condition: failed}, actRecord},
		{"day 0 not recorded yet", machineFacts{Held: "a", Rendered: "a"}, actRecord},
		{"pending, then the change was undone", machineFacts{Held: "a", Rendered: "a", Condition: pending}, actRecord},
		{"up to date without a condition", machineFacts{Held: "a", Rendered: "a", UpToDate: true}, actRecord},
		{"a new config on the Talos version it runs", machineFacts{Held: "a", Rendered: "b", Running: "v1.12.0", Declared: "v1.12.0"}, actApply},
		{"a config for a Talos version it does not run yet", machineFacts{Held: "a", Rendered: "b", Running: "v1.12.0", Declared: "v1.13.0"}, actWait},
		{"its version not seen yet", machineFacts{Held: "a", Rendered: "b", Declared: "v1.13.0"}, actApply},
		{"not back after its config reboot", machineFacts{Held: "a", Rendered: "a", Condition: notBack}, actCheckBack},
		{"not back after a reboot, and a newer config since", machineFacts{Held: "a", Rendered: "b", Condition: notBack}, actApply},
		{"holds it, whatever the versions", machineFacts{Held: "a", Rendered: "a", UpToDate: true, Condition: applied, Running: "v1.12.0", Declared: "v1.13.0"}, actNone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want.String(), decideMachine(tc.f).String())
		})
	}
}

func TestRecordReason(t *testing.T) {
	require.Equal(t, talos.ReasonDay0, recordReason(nil))
	require.Equal(t, talos.ReasonDay0, recordReason(&domain.Condition{Status: "False", Reason: talos.ReasonApplyFailed}))
	require.Equal(t, talos.ReasonAppliedWithReboot, recordReason(&domain.Condition{Status: "True", Reason: talos.ReasonAppliedWithReboot}))
}

func group(name, role string, parallelism int, deleting bool) *domain.NodeGroup {
	ng := &domain.NodeGroup{Metadata: domain.ObjectMeta{Name: name, Tenant: "acme"},
		Spec: domain.NodeGroupSpec{Role: role, Count: 3, UpdateStrategy: domain.UpdateStrategy{MaxParallelism: parallelism}}}
	if deleting {
		now := time.Now()
		ng.Metadata.DeletionTimestamp = &now
	}
	return ng
}

func mach(name, group, address string) domain.Machine {
	return domain.Machine{Metadata: domain.ObjectMeta{Name: name, Tenant: "acme"}, Spec: domain.MachineSpec{NodeGroup: group, Address: address}}
}

func TestPlanWaves(t *testing.T) {
	now := time.Now()
	gone := mach("b-9", "b-workers", "10.0.0.9")
	gone.Metadata.DeletionTimestamp = &now
	groups := map[string]*domain.NodeGroup{
		"a-workers": group("a-workers", domain.RoleWorker, 3, false),
		"b-workers": group("b-workers", domain.RoleWorker, 0, false),
		"z-cp":      group("z-cp", domain.RoleControlPlane, 5, false),
		"c-cp":      group("c-cp", domain.RoleControlPlane, 1, false),
		"old":       group("old", domain.RoleWorker, 1, true),
	}
	machines := []domain.Machine{
		mach("a-1", "a-workers", "10.0.0.11"), mach("a-0", "a-workers", "10.0.0.10"),
		mach("b-0", "b-workers", "10.0.0.20"), mach("b-1", "b-workers", ""), gone,
		mach("z-0", "z-cp", "10.0.0.30"), mach("c-1", "c-cp", "10.0.0.41"), mach("c-0", "c-cp", "10.0.0.40"),
		mach("old-0", "old", "10.0.0.50"), mach("orphan-0", "nowhere", "10.0.0.60"),
	}
	type got struct {
		Group       string
		CP          bool
		Parallelism int
		Machines    []string
	}
	var out []got
	for _, w := range planWaves(groups, machines) {
		g := got{Group: w.group, CP: w.controlPlane, Parallelism: w.parallelism}
		for _, m := range w.machines {
			g.Machines = append(g.Machines, m.Metadata.Name)
		}
		out = append(out, g)
	}
	require.Equal(t, []got{
		// Control planes first, by group name, one at a time whatever the strategy says.
		{"c-cp", true, 1, []string{"c-0", "c-1"}},
		{"z-cp", true, 1, []string{"z-0"}},
		// Then workers by group name, by their parallelism (at least 1);
		// machines without an address or being deleted are left out, as are
		// groups being deleted and machines of no known group.
		{"a-workers", false, 3, []string{"a-0", "a-1"}},
		{"b-workers", false, 1, []string{"b-0"}},
	}, out)
}

func TestAfterWave(t *testing.T) {
	tests := []struct {
		name        string
		end         waveEnd
		goOn, retry bool
	}{
		{"every machine took its config", waveEnd{}, true, false},
		{"a machine refused: the others go on, it is retried", waveEnd{failed: true}, true, true},
		{"a control plane held back: the rollout stops", waveEnd{heldBack: true}, false, true},
		{"a control plane not back: the rollout stops", waveEnd{notBack: true, failed: true}, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			goOn, retry := afterWave(tc.end)
			require.Equal(t, tc.goOn, goOn, "goes on")
			require.Equal(t, tc.retry, retry, "retried")
		})
	}
}

func TestEndpointKnown(t *testing.T) {
	tofu := func(m domain.Machine) domain.Machine {
		m.Metadata.Labels = map[string]string{domain.LabelManagedBy: domain.ManagedByTofu}
		return m
	}
	cp := mach("cp-0", "cp", "10.0.0.1")
	cp.Spec.Role = domain.RoleControlPlane
	declared := &domain.Tenant{Spec: domain.TenantSpec{ControlPlane: domain.ControlPlaneSpec{Endpoint: "https://k8s.example.com:6443"}}}
	recorded := &domain.Tenant{Status: domain.TenantStatus{EndpointAddress: "10.0.0.1"}}
	none := &domain.Tenant{}
	tests := []struct {
		name     string
		t        *domain.Tenant
		machines []domain.Machine
		want     bool
	}{
		{"declared endpoint", declared, []domain.Machine{tofu(cp)}, true},
		{"recorded by the apply", recorded, []domain.Machine{tofu(cp)}, true},
		{"tofu machines before the apply records the endpoint", none, []domain.Machine{tofu(cp)}, false},
		{"metal: the first control plane is the endpoint", none, []domain.Machine{cp}, true},
		{"no control plane with an address", none, []domain.Machine{mach("w-0", "w", "10.0.0.2")}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, endpointKnown(tc.t, tc.machines))
		})
	}
}

func event(typ, actor string, obj domain.Object) *domain.Event {
	action := domain.ActionUpdated
	switch {
	case len(typ) > 7 && typ[len(typ)-7:] == "Created":
		action = domain.ActionCreated
	case len(typ) > 7 && typ[len(typ)-7:] == "Deleted":
		action = domain.ActionDeleted
	}
	return &domain.Event{Type: typ, Action: action, Actor: actor, Object: &obj}
}

func obj(kind, tenant, name, status string) domain.Object {
	o := domain.Object{Kind: kind, Metadata: domain.ObjectMeta{Name: name, Tenant: tenant}}
	if status != "" {
		o.Status = json.RawMessage(status)
	}
	return o
}

// Keys queues a tenant for what can change its configs, and for nothing else.
func TestKeys(t *testing.T) {
	r := runtimeController{c: &Controller{rendered: map[string]string{}}}
	tests := []struct {
		name string
		ev   *domain.Event
		want []string
	}{
		{"a patch", event("ConfigPatchCreated", "alice", obj("ConfigPatch", "acme", "p", "")), []string{"acme"}},
		{"a node group change", event("NodeGroupUpdated", "alice", obj("NodeGroup", "acme", "workers", "")), []string{"acme"}},
		{"a node group's status", event("NodeGroupStatusUpdated", "system:health", obj("NodeGroup", "acme", "workers", `{}`)), nil},
		{"a tenant spec change", event("TenantUpdated", "alice", obj("Tenant", "", "acme", "")), []string{"acme"}},
		{"the first tenant status seen", event("TenantStatusUpdated", "system:apply-worker", obj("Tenant", "", "acme", `{"endpointAddress":"10.0.0.1"}`)), []string{"acme"}},
		{"a tenant status with the same render inputs", event("TenantStatusUpdated", "system:health", obj("Tenant", "", "acme", `{"endpointAddress":"10.0.0.1","phase":"Ready"}`)), nil},
		{"a new Kubernetes version in the tenant status", event("TenantStatusUpdated", "system:upgrade-saga", obj("Tenant", "", "acme", `{"endpointAddress":"10.0.0.1","kubernetesVersion":"v1.35.0"}`)), []string{"acme"}},
		{"a new machine", event("MachineCreated", "system:apply-worker", obj("Machine", "acme", "w-0", "")), []string{"acme"}},
		{"a machine's new address", event("MachineUpdated", "system:apply-worker", obj("Machine", "acme", "w-0", "")), []string{"acme"}},
		{"a config another writer applied", event("MachineConfigApplied", "system:upgrade-saga", obj("Machine", "acme", "w-0", "")), []string{"acme"}},
		{"its own config records", event("MachineConfigApplied", Actor, obj("Machine", "acme", "w-0", "")), nil},
		{"a machine observed", event("MachineStatusUpdated", "system:health", obj("Machine", "acme", "w-0", `{}`)), nil},
		{"a machine deleted", event("MachineDeleted", "system:apply-worker", obj("Machine", "acme", "w-0", "")), nil},
		{"an upgrade created", event("UpgradeCreated", "alice", obj("Upgrade", "acme", "u", `{"phase":"Pending"}`)), nil},
		{"an upgrade running", event("UpgradeStatusUpdated", "system:upgrade-saga", obj("Upgrade", "acme", "u", `{"phase":"Running"}`)), nil},
		{"an upgrade deleted", event("UpgradeDeleted", "alice", obj("Upgrade", "acme", "u", `{"phase":"Running"}`)), []string{"acme"}},
		{"an upgrade ended", event("UpgradeStatusUpdated", "system:upgrade-saga", obj("Upgrade", "acme", "u", `{"phase":"Succeeded"}`)), []string{"acme"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := r.Keys(t.Context(), tc.ev, 1)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
