package health

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// ConditionHealthy is the condition a health probe keeps on machines and tenants.
const ConditionHealthy = domain.ConditionHealthy

// maxConditionMessage bounds a condition's message (a long list of reasons).
const maxConditionMessage = 1024

// machineStatusAfter is a machine's status once a probe's observation of it is
// written: version, stage, readiness and the Healthy condition follow what was
// seen. A machine that did not answer keeps its version and stage (another
// controller, such as an upgrade, may know better why it is away) and is not
// ready. lastSeen moves with any other change, else at most once per
// lastSeenEvery, so a probe that sees nothing new writes nothing most of the
// time. It reports whether the status changed.
func machineStatusAfter(cur domain.MachineStatus, mh domain.MachineHealth, now time.Time, lastSeenEvery time.Duration) (domain.MachineStatus, bool) {
	next := cur
	next.Conditions = append([]domain.Condition(nil), cur.Conditions...)
	next.Ready = mh.Ready
	cond := domain.Condition{Type: ConditionHealthy, Status: "True", Reason: "Healthy", Message: "every service checked is healthy"}
	switch {
	case !mh.Reachable:
		cond.Status, cond.Reason = "False", "Unreachable"
	case !mh.Ready:
		cond.Status, cond.Reason = "False", "ServicesUnhealthy"
		if (mh.Node == domain.NodeNotReady || mh.Node == domain.NodeMissing) && servicesHealthy(mh.Services) {
			cond.Reason = "Node" + mh.Node
		}
	}
	if len(mh.Reasons) > 0 {
		cond.Message = truncateMessage(strings.Join(mh.Reasons, "; "))
	}
	if mh.Reachable {
		next.Stage, next.TalosVersion = mh.Stage, mh.TalosVersion
		next.Schematic, next.Extensions = mh.Schematic, mh.Extensions
	}
	next.Node = mh.Node
	// Healthy by Talos alone while the API server does not answer (Node
	// Unknown) is not yet healthy for remediation: a new worker booted
	// before its control plane was found Ready so, then NodeMissing until
	// its kubelet registered, and was replaced as a machine gone unhealthy
	// after unhealthyAfter instead of waiting out its startupTimeout.
	if mh.Ready && mh.Node != domain.NodeUnknown && next.FirstHealthy == nil {
		first := now.UTC().Truncate(time.Second)
		next.FirstHealthy = &first
	}
	next.Conditions = setCondition(next.Conditions, cond, now)
	changed := !sameJSON(cur, next)
	if mh.Reachable {
		seen := now.UTC().Truncate(time.Second)
		if changed || cur.LastSeen == nil || !seen.Before(cur.LastSeen.Add(lastSeenEvery)) {
			next.LastSeen = &seen
			changed = changed || !sameJSON(cur, next)
		}
	}
	return next, changed
}

func servicesHealthy(ss []domain.ServiceHealth) bool {
	for _, s := range ss {
		if !s.Healthy || s.State != "Running" {
			return false
		}
	}
	return true
}

// tenantStatusAfter is a tenant's status once a probe is written: the machine
// counts, the Healthy condition with the reasons, and the phase between Ready
// and Degraded (other phases belong to the apply worker and are kept).
func tenantStatusAfter(cur domain.TenantStatus, h domain.TenantHealth, now time.Time) (domain.TenantStatus, bool) {
	next := cur
	next.Conditions = append([]domain.Condition(nil), cur.Conditions...)
	next.Machines = domain.MachineCounts{}
	for _, m := range h.Machines {
		next.Machines.Total++
		if m.Ready {
			next.Machines.Ready++
		}
		if m.Role == domain.RoleControlPlane {
			next.Machines.ControlPlane++
		} else {
			next.Machines.Workers++
		}
	}
	cond := domain.Condition{Type: ConditionHealthy, Status: "True", Reason: h.State,
		Message: fmt.Sprintf("all %d machines are healthy", len(h.Machines))}
	if h.State != domain.HealthReady {
		cond.Status = "False"
		cond.Message = truncateMessage(strings.Join(h.Reasons, "; "))
	}
	next.Conditions = setCondition(next.Conditions, cond, now)
	switch {
	case cur.Phase == "Ready" && h.State != domain.HealthReady:
		next.Phase = "Degraded"
	case cur.Phase == "Degraded" && h.State == domain.HealthReady:
		next.Phase = "Ready"
	}
	return next, !sameJSON(cur, next)
}

// setCondition sets c, keeping its transition time unless its status changed.
func setCondition(conds []domain.Condition, c domain.Condition, now time.Time) []domain.Condition {
	return domain.SetCondition(conds, c, now)
}

func truncateMessage(s string) string {
	if len(s) <= maxConditionMessage {
		return s
	}
	return s[:maxConditionMessage-3] + "..."
}

// sameJSON compares two statuses as they would be stored.
func sameJSON(a, b any) bool {
	ra, err1 := json.Marshal(a)
	rb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ra) == string(rb)
}
