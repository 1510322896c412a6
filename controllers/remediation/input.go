package remediation

import (
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// groupInput is the decision's input for node group ng: its machines as
// their statuses say (the probe just wrote them), the tenant's
// remediations, and etcd as the probe found it.
func groupInput(ng *domain.NodeGroup, machines []domain.Machine, rems []domain.Remediation, h domain.TenantHealth, now time.Time) domain.RemediationInput {
	in := domain.RemediationInput{Group: ng.Metadata.Name, Role: ng.Spec.Role, Count: ng.Spec.Count, Policy: *ng.Spec.Remediation, Now: now}
	replacedAt := map[string]time.Time{}
	var lastSuccess time.Time
	for _, r := range rems {
		if r.Status.ReplacedAt != nil && r.Status.ReplacedAt.After(replacedAt[r.Spec.Machine]) {
			replacedAt[r.Spec.Machine] = *r.Status.ReplacedAt
		}
		if !r.Status.Finished() {
			if r.Spec.NodeGroup == ng.Metadata.Name {
				in.ActiveInGroup = true
			}
			if r.Spec.Role == domain.RoleControlPlane {
				in.ActiveControlPlane = true
			}
			continue
		}
		if r.Spec.NodeGroup == ng.Metadata.Name && r.Status.Phase == domain.RemediationSucceeded && r.Status.FinishedAt != nil && r.Status.FinishedAt.After(lastSuccess) {
			lastSuccess = *r.Status.FinishedAt
		}
	}
	for _, r := range rems {
		if r.Spec.NodeGroup != ng.Metadata.Name || r.Status.Phase != domain.RemediationFailed || r.Status.FinishedAt == nil || !r.Status.FinishedAt.After(lastSuccess) {
			continue
		}
		in.Failures++
		if r.Status.FinishedAt.After(in.LastFailure) {
			in.LastFailure = *r.Status.FinishedAt
		}
	}
	etcdHealthy := map[string]bool{}
	for _, mh := range h.Machines {
		etcdHealthy[mh.Name] = mh.Etcd == domain.EtcdMemberHealthy
	}
	for _, mb := range h.Etcd.Members {
		if !mb.Learner {
			in.EtcdVoters++
		}
	}
	in.EtcdHealthy = h.Etcd.Healthy
	for i := range machines {
		m := &machines[i]
		if m.Spec.NodeGroup != ng.Metadata.Name || m.Metadata.DeletionTimestamp != nil {
			continue
		}
		rm := domain.RemediationMachine{Name: m.Metadata.Name, EtcdHealthy: etcdHealthy[m.Metadata.Name]}
		if m.Metadata.CreationTimestamp != nil {
			rm.StartedAt = *m.Metadata.CreationTimestamp
		}
		if t, ok := replacedAt[m.Metadata.Name]; ok && t.After(rm.StartedAt) {
			rm.StartedAt = t
		}
		c := domain.FindCondition(m.Status.Conditions, domain.ConditionHealthy)
		rm.Healthy = c != nil && c.Status == "True"
		rm.EverHealthy = m.Status.FirstHealthy != nil || rm.Healthy
		if c != nil && !rm.Healthy {
			rm.UnhealthySince = c.LastTransitionTime
			rm.Reason = c.Reason
			if c.Message != "" {
				rm.Reason += ": " + c.Message
			}
		}
		if rm.Reason == "" && !rm.Healthy {
			rm.Reason = "it has not been healthy since it was built"
		}
		in.Machines = append(in.Machines, rm)
	}
	return in
}
