package domain

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDecideRemediation(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	now := t0.Add(time.Hour)
	healthy := func(name string) RemediationMachine {
		return RemediationMachine{Name: name, StartedAt: t0, EverHealthy: true, Healthy: true, EtcdHealthy: true}
	}
	sick := func(name string, for_ time.Duration) RemediationMachine {
		return RemediationMachine{Name: name, StartedAt: t0, EverHealthy: true, UnhealthySince: now.Add(-for_), Reason: "unreachable"}
	}
	starting := func(name string, for_ time.Duration) RemediationMachine {
		return RemediationMachine{Name: name, StartedAt: now.Add(-for_)}
	}
	policy := RemediationPolicy{UnhealthyAfter: "5m"}
	workers := func(ms ...RemediationMachine) RemediationInput {
		return RemediationInput{Group: "w", Role: RoleWorker, Count: len(ms), Policy: policy, Machines: ms, Now: now}
	}
	cps := func(voters, healthyMembers int, ms ...RemediationMachine) RemediationInput {
		in := workers(ms...)
		in.Role, in.EtcdVoters, in.EtcdHealthy = RoleControlPlane, voters, healthyMembers
		return in
	}
	pct := func(p int) *IntOrPercent { return &IntOrPercent{Value: p, Percent: true} }
	for _, tc := range []struct {
		name    string
		in      RemediationInput
		replace string
		reason  string // the RemediationAllowed reason
		allowed bool
		recheck time.Time
	}{
		{name: "all healthy", in: workers(healthy("w-0"), healthy("w-1")), reason: RemediationReasonAllowed, allowed: true},
		{name: "unhealthy, not long enough", in: workers(healthy("w-0"), sick("w-1", 4*time.Minute)),
			reason: RemediationReasonAllowed, allowed: true, recheck: now.Add(time.Minute)},
		{name: "a starting machine does not count as unhealthy", in: workers(sick("w-0", time.Hour), starting("w-1", time.Minute)), replace: "w-0",
			reason: RemediationReasonAllowed, allowed: true, recheck: now.Add(9 * time.Minute)},
		{name: "unhealthy for unhealthyAfter", in: workers(healthy("w-0"), sick("w-1", 5*time.Minute)), replace: "w-1",
			reason: RemediationReasonAllowed, allowed: true},
		{name: "never healthy within startupTimeout", in: workers(healthy("w-0"), starting("w-1", 10*time.Minute)), replace: "w-1",
			reason: RemediationReasonAllowed, allowed: true},
		{name: "still starting", in: workers(healthy("w-0"), starting("w-1", 9*time.Minute)),
			reason: RemediationReasonAllowed, allowed: true, recheck: now.Add(time.Minute)},
		{name: "two due with maxUnhealthy 1: nothing", in: workers(healthy("w-0"), sick("w-1", time.Hour), sick("w-2", 6*time.Minute)),
			reason: RemediationReasonTooMany},
		{name: "one due and one going down with it: nothing (a partition)", in: workers(healthy("w-0"), sick("w-1", time.Hour), sick("w-2", time.Second)),
			reason: RemediationReasonTooMany, recheck: now.Add(5*time.Minute - time.Second)},
		{name: "the longest due goes first", in: func() RemediationInput {
			in := workers(sick("w-2", 10*time.Minute), sick("w-1", 20*time.Minute), healthy("w-0"))
			in.Policy.MaxUnhealthy = &IntOrPercent{Value: 2}
			return in
		}(), replace: "w-1", reason: RemediationReasonAllowed, allowed: true},
		{name: "40% of 5 is 2", in: func() RemediationInput {
			in := workers(sick("a", time.Hour), sick("b", time.Hour), healthy("c"), healthy("d"), healthy("e"))
			in.Policy.MaxUnhealthy = pct(40)
			return in
		}(), replace: "a", reason: RemediationReasonAllowed, allowed: true},
		{name: "0% blocks every replacement", in: func() RemediationInput {
			in := workers(sick("a", time.Hour), healthy("b"))
			in.Policy.MaxUnhealthy = pct(0)
			return in
		}(), reason: RemediationReasonTooMany},
		{name: "one at a time per group", in: func() RemediationInput {
			in := workers(healthy("w-0"), sick("w-1", time.Hour))
			in.ActiveInGroup = true
			return in
		}(), reason: RemediationReasonInProgress, allowed: true},
		{name: "a worker does not wait for a control plane", in: func() RemediationInput {
			in := workers(healthy("w-0"), sick("w-1", time.Hour))
			in.ActiveControlPlane = true
			return in
		}(), replace: "w-1", reason: RemediationReasonAllowed, allowed: true},
		{name: "one control plane at a time per tenant", in: func() RemediationInput {
			in := cps(3, 2, healthy("cp-0"), healthy("cp-1"), sick("cp-2", time.Hour))
			in.ActiveControlPlane = true
			return in
		}(), reason: RemediationReasonControlPlane, allowed: true},
		{name: "backoff after a failure", in: func() RemediationInput {
			in := workers(healthy("w-0"), sick("w-1", time.Hour))
			in.Failures, in.LastFailure = 2, now.Add(-9*time.Minute)
			return in
		}(), reason: RemediationReasonBackoff, allowed: true, recheck: now.Add(time.Minute)},
		{name: "backoff over", in: func() RemediationInput {
			in := workers(healthy("w-0"), sick("w-1", time.Hour))
			in.Failures, in.LastFailure = 2, now.Add(-10*time.Minute)
			return in
		}(), replace: "w-1", reason: RemediationReasonAllowed, allowed: true},
		{name: "not urgent: waits for the maintenance window", in: func() RemediationInput {
			in := workers(healthy("w-0"), sick("w-1", time.Hour))
			in.Policy.WaitForMaintenance, in.WindowOpens, in.WindowWaiting = true, now.Add(3*time.Hour), "Waiting for maintenance window (opens Sat 02:00 UTC)"
			return in
		}(), reason: RemediationReasonMaintenance, allowed: true, recheck: now.Add(3 * time.Hour)},
		{name: "not urgent, window open: replaced", in: func() RemediationInput {
			in := workers(healthy("w-0"), sick("w-1", time.Hour))
			in.Policy.WaitForMaintenance, in.WindowOpen = true, true
			return in
		}(), replace: "w-1", reason: RemediationReasonAllowed, allowed: true},
		{name: "urgent (the default) does not wait for a closed window", in: workers(healthy("w-0"), sick("w-1", time.Hour)),
			replace: "w-1", reason: RemediationReasonAllowed, allowed: true},
		{name: "a dead control plane of three is replaced", in: cps(3, 2, healthy("cp-0"), healthy("cp-1"), sick("cp-2", time.Hour)),
			replace: "cp-2", reason: RemediationReasonAllowed, allowed: true},
		{name: "a control plane whose member is healthy would lose quorum", in: func() RemediationInput {
			in := cps(3, 2, healthy("cp-0"), RemediationMachine{Name: "cp-1", StartedAt: t0, EverHealthy: true, UnhealthySince: t0, EtcdHealthy: true}, healthy("cp-2"))
			in.EtcdHealthy = 2 // cp-2's member is down, cp-1's is up but its Node is not Ready
			return in
		}(), reason: RemediationReasonEtcdQuorum},
		{name: "no quorum now: nothing", in: func() RemediationInput {
			in := cps(3, 1, healthy("cp-0"), sick("cp-1", time.Hour), healthy("cp-2"))
			return in
		}(), reason: RemediationReasonEtcdQuorum},
		{name: "a single control plane is never removed", in: cps(1, 0, sick("cp-0", time.Hour)), reason: RemediationReasonEtcdQuorum},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := DecideRemediation(tc.in)
			require.Equal(t, tc.replace, d.Replace, d.Message)
			require.Equal(t, tc.reason, d.AllowedReason, d.Message)
			require.Equal(t, tc.allowed, d.Allowed, d.Message)
			require.Equal(t, tc.recheck, d.RecheckAt, d.Message)
			require.NotEmpty(t, d.Message)
		})
	}
}

func TestRemediationPolicyValidation(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		want       []string
	}{
		{"fine", `{"unhealthyAfter":"5m","maxUnhealthy":1,"startupTimeout":"10m"}`, nil},
		{"a percentage", `{"unhealthyAfter":"30s","maxUnhealthy":"40%"}`, nil},
		{"unhealthyAfter required", `{}`, []string{"spec.remediation.unhealthyAfter"}},
		{"bad durations", `{"unhealthyAfter":"soon","startupTimeout":"0s"}`, []string{"spec.remediation.unhealthyAfter", "spec.remediation.startupTimeout"}},
		{"bad maxUnhealthy", `{"unhealthyAfter":"5m","maxUnhealthy":"half"}`, []string{"spec.remediation.maxUnhealthy"}},
		{"percentage over 100", `{"unhealthyAfter":"5m","maxUnhealthy":"140%"}`, []string{"spec.remediation.maxUnhealthy"}},
		{"negative count", `{"unhealthyAfter":"5m","maxUnhealthy":-1}`, []string{"spec.remediation.maxUnhealthy"}},
		{"unknown field", `{"unhealthyAfter":"5m","maxUnhealty":1}`, []string{"spec.remediation.maxUnhealty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := json.RawMessage(`{"role":"worker","count":3,"provider":"p","remediation":` + tc.json + `}`)
			out, causes := NodeGroupKind.NormalizeSpec(raw)
			var fields []string
			for _, c := range causes {
				fields = append(fields, c.Field)
			}
			require.Equal(t, tc.want, fields, "%v", causes)
			if tc.want == nil {
				var back NodeGroupSpec
				require.NoError(t, json.Unmarshal(out, &back))
				require.NotNil(t, back.Remediation)
				again, causes := NodeGroupKind.NormalizeSpec(out)
				require.Empty(t, causes)
				require.JSONEq(t, string(out), string(again), "canonical")
			}
		})
	}
}

// TestDecideRemediationJoin: a Joining remediation succeeds once its new
// machine was healthy, waits with the probe's last answer until startupTimeout
// from when the machine was built, keeps a recorded deadline (a restart, or
// startupTimeout changed meanwhile, does not move it), records a changed
// answer at most every WaitRecordEvery, and fails at the deadline naming what
// it waited for and the last answer.
func TestDecideRemediationJoin(t *testing.T) {
	built := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return built.Add(d) }
	ptr := func(t time.Time) *time.Time { return &t }
	what := "the new w-2 to be healthy"
	recorded := &StepWait{For: what, Since: built, Deadline: at(10 * time.Minute), LastError: "Unreachable: connection refused", Checked: ptr(at(time.Minute))}
	in := func(now time.Duration, wait *StepWait, problem string) RemediationJoinInput {
		return RemediationJoinInput{Machine: "w-2", Wait: wait, ReplacedAt: built, StartupTimeout: 10 * time.Minute, Problem: problem, Now: at(now)}
	}
	for _, tc := range []struct {
		name   string
		in     RemediationJoinInput
		phase  string
		msg    string
		wait   *StepWait
		record bool
	}{
		{name: "healthy: succeeded", in: func() RemediationJoinInput {
			i := in(3*time.Minute, recorded, "")
			i.FirstHealthy = ptr(at(2 * time.Minute))
			return i
		}(), phase: RemediationSucceeded, msg: "the new w-2 is healthy, 2m0s after it was built"},
		{name: "first wait, not probed yet: begins at the build", in: in(time.Second, nil, ""),
			wait: &StepWait{For: what, Since: built, Deadline: at(10 * time.Minute)}, record: true},
		{name: "first wait of a record older than waits: the deadline it always had", in: in(9*time.Minute, nil, "NodeNotReady"),
			wait: &StepWait{For: what, Since: built, Deadline: at(10 * time.Minute), LastError: "NodeNotReady", Checked: ptr(at(9 * time.Minute))}, record: true},
		{name: "same answer: nothing to record", in: in(2*time.Minute, recorded, "Unreachable: connection refused"),
			wait: &StepWait{For: what, Since: built, Deadline: at(10 * time.Minute), LastError: "Unreachable: connection refused", Checked: ptr(at(2 * time.Minute))}},
		{name: "another answer soon after: not yet recorded", in: in(time.Minute+5*time.Second, recorded, "NodeNotReady"),
			wait: &StepWait{For: what, Since: built, Deadline: at(10 * time.Minute), LastError: "NodeNotReady", Checked: ptr(at(time.Minute + 5*time.Second))}},
		{name: "another answer later: recorded", in: in(2*time.Minute, recorded, "NodeNotReady"),
			wait: &StepWait{For: what, Since: built, Deadline: at(10 * time.Minute), LastError: "NodeNotReady", Checked: ptr(at(2 * time.Minute))}, record: true},
		{name: "startupTimeout raised mid-wait: the recorded deadline holds", in: func() RemediationJoinInput {
			i := in(10*time.Minute, recorded, "")
			i.StartupTimeout = time.Hour
			return i
		}(), phase: RemediationFailed, msg: "Joining (startupTimeout) passed its deadline of 10m waiting for the new w-2 to be healthy; last answer: Unreachable: connection refused"},
		{name: "past the deadline: failed with the last answer", in: in(11*time.Minute, recorded, "NodeNotReady"), phase: RemediationFailed,
			msg: "Joining (startupTimeout) passed its deadline of 10m waiting for the new w-2 to be healthy; last answer: NodeNotReady"},
		{name: "healthy at the last moment wins over the deadline", in: func() RemediationJoinInput {
			i := in(11*time.Minute, recorded, "")
			i.FirstHealthy = ptr(at(9 * time.Minute))
			return i
		}(), phase: RemediationSucceeded, msg: "the new w-2 is healthy, 9m0s after it was built"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := DecideRemediationJoin(tc.in)
			require.Equal(t, tc.phase, d.Phase)
			require.Equal(t, tc.msg, d.Message)
			require.Equal(t, tc.wait, d.Wait)
			require.Equal(t, tc.record, d.Record)
			if d.Phase != "" {
				require.Nil(t, d.Wait, "an ended remediation waits no more")
			}
		})
	}
}
