package remediation

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestGroupInput: what the decision reads of the read model — health from
// the machines' Healthy conditions, a replaced machine starting over,
// remediations in flight, failures since the last success, etcd.
func TestGroupInput(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	ng := &domain.NodeGroup{Metadata: domain.ObjectMeta{Name: "workers", Tenant: "t"},
		Spec: domain.NodeGroupSpec{Role: domain.RoleWorker, Count: 3, Remediation: &domain.RemediationPolicy{UnhealthyAfter: "5m"}}}
	machine := func(name string, cond *domain.Condition, firstHealthy *time.Time) domain.Machine {
		m := domain.Machine{Metadata: domain.ObjectMeta{Name: name, CreationTimestamp: at(0)},
			Spec: domain.MachineSpec{NodeGroup: "workers", Role: domain.RoleWorker}, Status: domain.MachineStatus{FirstHealthy: firstHealthy}}
		if cond != nil {
			m.Status.Conditions = []domain.Condition{*cond}
		}
		return m
	}
	machines := []domain.Machine{
		machine("workers-0", &domain.Condition{Type: domain.ConditionHealthy, Status: "True"}, at(time.Minute)),
		machine("workers-1", &domain.Condition{Type: domain.ConditionHealthy, Status: "False", Reason: "Unreachable", Message: "no route", LastTransitionTime: t0.Add(time.Hour)}, at(time.Minute)),
		machine("workers-2", nil, nil), // replaced, not probed since
		{Metadata: domain.ObjectMeta{Name: "cp-0"}, Spec: domain.MachineSpec{NodeGroup: "cp", Role: domain.RoleControlPlane}},
	}
	rem := func(machine, group, role, phase string, replaced, finished *time.Time) domain.Remediation {
		return domain.Remediation{Spec: domain.RemediationSpec{Machine: machine, NodeGroup: group, Role: role},
			Status: domain.RemediationStatus{Phase: phase, ReplacedAt: replaced, FinishedAt: finished}}
	}
	rems := []domain.Remediation{
		rem("workers-2", "workers", domain.RoleWorker, domain.RemediationFailed, nil, at(10*time.Minute)),
		rem("workers-2", "workers", domain.RoleWorker, domain.RemediationSucceeded, at(20*time.Minute), at(21*time.Minute)),
		rem("workers-2", "workers", domain.RoleWorker, domain.RemediationFailed, at(30*time.Minute), at(40*time.Minute)),
		rem("workers-2", "workers", domain.RoleWorker, domain.RemediationFailed, nil, at(50*time.Minute)),
		rem("cp-0", "cp", domain.RoleControlPlane, domain.RemediationJoining, at(55*time.Minute), nil),
	}
	h := domain.TenantHealth{Etcd: domain.EtcdHealth{Healthy: 1, Members: []domain.EtcdMemberHealth{{Name: "cp-0"}, {Name: "new", Learner: true}}}}
	now := t0.Add(2 * time.Hour)

	in := groupInput(ng, machines, rems, h, now)
	require.Equal(t, "workers", in.Group)
	require.Equal(t, 3, in.Count)
	require.False(t, in.ActiveInGroup)
	require.True(t, in.ActiveControlPlane, "cp-0 is Joining")
	require.Equal(t, 2, in.Failures, "failures since the last success")
	require.Equal(t, t0.Add(50*time.Minute), in.LastFailure)
	require.Equal(t, 1, in.EtcdVoters, "a learner does not vote")
	require.Equal(t, 1, in.EtcdHealthy)
	require.Equal(t, []domain.RemediationMachine{
		{Name: "workers-0", StartedAt: t0, EverHealthy: true, Healthy: true},
		{Name: "workers-1", StartedAt: t0, EverHealthy: true, UnhealthySince: t0.Add(time.Hour), Reason: "Unreachable: no route"},
		{Name: "workers-2", StartedAt: t0.Add(30 * time.Minute), Reason: "it has not been healthy since it was built"},
	}, in.Machines)
}
