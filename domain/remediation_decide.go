package domain

import (
	"fmt"
	"sort"
	"time"
)

// RemediationMachine is one machine of a node group as remediation sees it.
type RemediationMachine struct {
	Name string
	// StartedAt is when the machine was built, or last replaced.
	StartedAt time.Time
	// EverHealthy is whether a probe found it healthy since StartedAt.
	EverHealthy bool
	// Healthy is the last probe's verdict (false before any probe).
	Healthy bool
	// UnhealthySince is when it stopped being healthy (with EverHealthy).
	UnhealthySince time.Time
	// Reason is what the probe found wrong.
	Reason string
	// EtcdHealthy is whether its etcd member is healthy (control planes).
	EtcdHealthy bool
}

// RemediationInput is what one decision for a node group reads.
type RemediationInput struct {
	Group  string
	Role   string
	Count  int
	Policy RemediationPolicy
	// Machines are the group's machines.
	Machines []RemediationMachine
	// ActiveInGroup is whether a remediation of the group is not finished.
	ActiveInGroup bool
	// ActiveControlPlane is whether a remediation of a control plane of
	// the tenant (in any group) is not finished.
	ActiveControlPlane bool
	// Failures counts the group's failed remediations since its last
	// success; LastFailure is when the newest ended.
	Failures    int
	LastFailure time.Time
	// EtcdVoters and EtcdHealthy are the tenant's etcd members (voting) and
	// how many of them are healthy, for a control-plane group.
	EtcdVoters, EtcdHealthy int
	// WindowOpen is whether the tenant's maintenance window is open (true
	// without windows); WindowOpens is when it opens next and WindowWaiting
	// says so in words. Read only for a policy that waits for maintenance.
	WindowOpen    bool
	WindowOpens   time.Time
	WindowWaiting string
	Now           time.Time
}

// Reasons of a group's RemediationAllowed condition.
const (
	RemediationReasonAllowed      = "Allowed"
	RemediationReasonTooMany      = "TooManyUnhealthy"
	RemediationReasonEtcdQuorum   = "EtcdQuorum"
	RemediationReasonBackoff      = "Backoff"
	RemediationReasonInProgress   = "InProgress"
	RemediationReasonControlPlane = "ControlPlaneInProgress"
	RemediationReasonMaintenance  = "WaitingForMaintenance"
	ConditionRemediationAllowed   = "RemediationAllowed"
)

// RemediationDecision is what to do for a node group now.
type RemediationDecision struct {
	// Replace is the machine to replace now ("" for none), unhealthy since
	// Since for Reason.
	Replace string
	Since   time.Time
	Reason  string
	// Allowed, AllowedReason and Message are the group's
	// RemediationAllowed condition: false says why nothing is replaced
	// although a machine is due.
	Allowed       bool
	AllowedReason string
	Message       string
	// Unhealthy counts the group's machines that are not healthy (those
	// still starting within startupTimeout aside).
	Unhealthy int
	// RecheckAt is when the answer may change without a new observation
	// (a timeout running out, a backoff ending); zero when only a new
	// observation can change it.
	RecheckAt time.Time
}

// DecideRemediation is the rule of machine remediation for one node group,
// as Cluster API's MachineHealthCheck has it: a machine is due when it has
// been unhealthy for unhealthyAfter (or never became healthy within
// startupTimeout); nothing is replaced while more machines than
// maxUnhealthy are due (a partition must not destroy a cluster), while
// another remediation of the group, or of a control plane of the tenant,
// is going on, during the backoff after a failure, or when removing the
// control plane's etcd member would lose quorum, or, for a group whose
// replacements are not urgent (waitForMaintenance), while the tenant's
// maintenance window is closed. The machine due longest goes first.
func DecideRemediation(in RemediationInput) RemediationDecision {
	unhealthyAfter, startupTimeout := in.Policy.Durations()
	type due struct {
		m     RemediationMachine
		since time.Time
	}
	var dues []due
	var recheck time.Time
	// unhealthy counts the machines that are not healthy now (a machine
	// still within its startupTimeout aside), due or not: machines that go
	// down together (a partition) block each other's replacement even
	// though one of them is due a moment before the other.
	unhealthy := 0
	later := func(t time.Time) {
		if t.After(in.Now) && (recheck.IsZero() || t.Before(recheck)) {
			recheck = t
		}
	}
	for _, m := range in.Machines {
		switch {
		case m.Healthy:
		case !m.EverHealthy:
			if end := m.StartedAt.Add(startupTimeout); !in.Now.Before(end) {
				unhealthy++
				dues = append(dues, due{m, m.StartedAt})
			} else {
				later(end)
			}
		default:
			unhealthy++
			if end := m.UnhealthySince.Add(unhealthyAfter); !in.Now.Before(end) {
				dues = append(dues, due{m, m.UnhealthySince})
			} else {
				later(end)
			}
		}
	}
	sort.Slice(dues, func(i, j int) bool {
		if !dues[i].since.Equal(dues[j].since) {
			return dues[i].since.Before(dues[j].since)
		}
		return dues[i].m.Name < dues[j].m.Name
	})
	d := RemediationDecision{Allowed: true, AllowedReason: RemediationReasonAllowed, Unhealthy: unhealthy, RecheckAt: recheck}
	limit := in.Policy.MaxUnhealthyOf(in.Count)
	if unhealthy > limit {
		d.Allowed, d.AllowedReason = false, RemediationReasonTooMany
		d.Message = fmt.Sprintf("%d of %d machines are unhealthy, more than maxUnhealthy allows (%d): nothing is replaced until fewer are", unhealthy, in.Count, limit)
		return d
	}
	if len(dues) == 0 {
		d.Message = "no machine is due for replacement"
		return d
	}
	first := dues[0]
	switch {
	case in.ActiveInGroup:
		d.AllowedReason, d.Message = RemediationReasonInProgress, "a remediation of this group is in progress; one machine at a time"
		return d
	case in.Role == RoleControlPlane && in.ActiveControlPlane:
		d.AllowedReason, d.Message = RemediationReasonControlPlane, "a control plane of the tenant is being remediated; one at a time"
		return d
	}
	if in.Failures > 0 {
		wait := unhealthyAfter << min(in.Failures-1, 16)
		if wait > MaxRemediationBackoff || wait <= 0 {
			wait = MaxRemediationBackoff
		}
		if end := in.LastFailure.Add(wait); in.Now.Before(end) {
			d.AllowedReason = RemediationReasonBackoff
			d.Message = fmt.Sprintf("%d failed remediations; the next may start at %s", in.Failures, end.UTC().Format(time.RFC3339))
			d.RecheckAt = end
			return d
		}
	}
	if in.Role == RoleControlPlane {
		healthyAfter := in.EtcdHealthy
		if first.m.EtcdHealthy {
			healthyAfter--
		}
		if 2*in.EtcdHealthy <= in.EtcdVoters || 2*healthyAfter <= in.EtcdVoters-1 {
			d.Allowed, d.AllowedReason = false, RemediationReasonEtcdQuorum
			d.Message = fmt.Sprintf("removing %s's etcd member would lose quorum (%d of %d members healthy)", first.m.Name, in.EtcdHealthy, in.EtcdVoters)
			return d
		}
	}
	if in.Policy.WaitForMaintenance && !in.WindowOpen {
		d.AllowedReason = RemediationReasonMaintenance
		d.Message = fmt.Sprintf("%s is due for replacement (unhealthy since %s); not urgent: %s", first.m.Name, first.since.UTC().Format(time.RFC3339), in.WindowWaiting)
		if !in.WindowOpens.IsZero() {
			d.RecheckAt = in.WindowOpens
		}
		return d
	}
	d.Replace, d.Since, d.Reason = first.m.Name, first.since, first.m.Reason
	d.Message = fmt.Sprintf("replacing %s, unhealthy since %s", first.m.Name, first.since.UTC().Format(time.RFC3339))
	return d
}

// RemediationJoinInput is what the controller knows of a Joining
// remediation's new machine.
type RemediationJoinInput struct {
	// Machine names the new machine (the replaced one's name).
	Machine string
	// Wait is the wait the remediation's status records (nil before the
	// first, and in records older than waits).
	Wait *StepWait
	// ReplacedAt is when the new machine was built: the wait begins then.
	ReplacedAt     time.Time
	StartupTimeout time.Duration
	// FirstHealthy is when a probe first found the new machine healthy
	// (nil: not yet).
	FirstHealthy *time.Time
	// Problem is what the last probe found wrong with it ("" when it was
	// not probed since it was built).
	Problem string
	Now     time.Time
}

// RemediationJoinDecision is how a Joining remediation goes on.
type RemediationJoinDecision struct {
	// Phase is RemediationSucceeded or RemediationFailed when it ends now
	// (Step and Message are the step to record); "" while it waits.
	Phase, Step, Message string
	// Wait is the wait to record while it waits; Record says whether it
	// is worth a write over the recorded one (WaitChanged).
	Wait   *StepWait
	Record bool
}

// DecideRemediationJoin decides a Joining remediation: Succeeded once the
// new machine was found healthy, Failed past its deadline (startupTimeout
// from when it was built, as recorded: a restart of the server does not
// move it), else it waits, with the probe's last answer.
func DecideRemediationJoin(in RemediationJoinInput) RemediationJoinDecision {
	if in.FirstHealthy != nil {
		msg := fmt.Sprintf("the new %s is healthy, %s after it was built", in.Machine, in.FirstHealthy.Sub(in.ReplacedAt).Round(time.Second))
		return RemediationJoinDecision{Phase: RemediationSucceeded, Step: "Joined", Message: msg}
	}
	w := BeginWait(in.Wait, RemediationJoinWaitFor(in.Machine), in.ReplacedAt, in.StartupTimeout)
	if in.Problem != "" {
		w.Observe(in.Problem, in.Now)
	}
	if w.Expired(in.Now) {
		return RemediationJoinDecision{Phase: RemediationFailed, Step: "Failed", Message: w.DeadlineProblem("Joining (startupTimeout)")}
	}
	return RemediationJoinDecision{Wait: &w, Record: WaitChanged(in.Wait, w)}
}

// RemediationJoinWaitFor is what a Joining remediation of machine waits
// for, in words that stay the same across restarts.
func RemediationJoinWaitFor(machine string) string {
	return "the new " + machine + " to be healthy"
}
