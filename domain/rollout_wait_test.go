package domain

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// restart stands for a controller that stops and starts again: the status
// is what was stored, read back.
func (s *rolloutSim) restart() {
	raw, err := json.Marshal(s.st)
	require.NoError(s.t, err)
	s.st = RolloutStatus{}
	require.NoError(s.t, json.Unmarshal(raw, &s.st))
}

// wantWait is a wait expected, its times from the rollout's start.
type wantWait struct {
	For             string
	Since, Deadline time.Duration
	LastError       string
}

func (s *rolloutSim) running(tenant, msg string) {
	s.obs[tenant] = RolloutObservation{Change: RolloutTenantRunning, Message: msg}
}

// TestRolloutWaveWaits: what each wave records as its wait, and when a
// running wave's progress deadline halts the rollout. Every case starts a
// rollout of three tenants ([{tenants: 2, maxParallel: 1}, {percent: 100}],
// soak 10m) at t0 and steps it; it then checks the first wave's wait (for,
// since and deadline from t0, last answer), the phase and the halt's reason.
func TestRolloutWaveWaits(t *testing.T) {
	const (
		forRunning0 = "tenants of wave 1 to finish Talos v1.13.1 (0 of 2 done)"
		forRunning1 = "tenants of wave 1 to finish Talos v1.13.1 (1 of 2 done)"
		forSoak     = "tenants of wave 1 to stay healthy through the soak"
	)
	for _, tc := range []struct {
		name     string
		deadline string
		steps    func(s *rolloutSim)
		// wait is nil when the wave waits for nothing.
		wait            *wantWait
		phase, haltText string
		recheck         time.Duration
	}{
		{name: "the wave's first tenant starts: the wait begins with the default deadline",
			steps: func(s *rolloutSim) {},
			wait:  &wantWait{For: forRunning0, Deadline: 6 * time.Hour, LastError: "t1: starting"}, phase: RolloutProgressing, recheck: 6 * time.Hour},
		{name: "spec.progressDeadline sets it", deadline: "30m",
			steps: func(s *rolloutSim) {},
			wait:  &wantWait{For: forRunning0, Deadline: 30 * time.Minute, LastError: "t1: starting"}, phase: RolloutProgressing, recheck: 30 * time.Minute},
		{name: "a new answer is recorded after WaitRecordEvery", deadline: "30m",
			steps: func(s *rolloutSim) {
				s.running("t1", "upgrade r pending")
				s.now = s.now.Add(5 * time.Second)
				s.step() // too soon: not recorded
				require.Equal(s.t, "t1: starting", s.st.Waves[0].Wait.LastError)
				s.running("t1", "upgrade r running: cp-1 verifying")
				s.now = s.now.Add(time.Minute)
			},
			wait: &wantWait{For: forRunning0, Deadline: 30 * time.Minute, LastError: "t1: upgrade r running: cp-1 verifying"}, phase: RolloutProgressing, recheck: 30 * time.Minute},
		{name: "a restart keeps the recorded deadline although the spec changed", deadline: "30m",
			steps: func(s *rolloutSim) {
				s.now = s.now.Add(20 * time.Minute)
				s.restart()
				s.spec.ProgressDeadline = "2h"
			},
			wait: &wantWait{For: forRunning0, Deadline: 30 * time.Minute, LastError: "t1: its change is not under way yet"}, phase: RolloutProgressing, recheck: 30 * time.Minute},
		{name: "a tenant done is progress: the next one's wait begins afresh", deadline: "30m",
			steps: func(s *rolloutSim) {
				s.now = s.now.Add(20 * time.Minute)
				s.set("t1", RolloutTenantDone)
				s.step() // t1 done, t2 starts
				s.now = s.now.Add(20 * time.Minute)
				s.running("t2", "upgrade r running")
			},
			wait: &wantWait{For: forRunning1, Since: 20 * time.Minute, Deadline: 50 * time.Minute, LastError: "t2: upgrade r running"}, phase: RolloutProgressing, recheck: 50 * time.Minute},
		{name: "past the deadline: halted, naming what it waited for and the last answer", deadline: "30m",
			steps: func(s *rolloutSim) {
				s.running("t1", "upgrade r running: waiting for kube-apiserver on cp-1 to answer v1.35.5: connection refused")
				s.now = s.now.Add(time.Minute)
				s.step()
				s.now = s.now.Add(29 * time.Minute)
			},
			wait:  &wantWait{For: forRunning0, Deadline: 30 * time.Minute, LastError: "t1: upgrade r running: waiting for kube-apiserver on cp-1 to answer v1.35.5: connection refused"},
			phase: RolloutHalted, haltText: "wave 1 (spec.progressDeadline) passed its deadline of 30m waiting for " + forRunning0 + "; last answer: t1: upgrade r running: waiting for kube-apiserver on cp-1 to answer v1.35.5: connection refused"},
		{name: "resumed from the halt: a new deadline", deadline: "30m",
			steps: func(s *rolloutSim) {
				s.now = s.now.Add(30 * time.Minute)
				s.step()
				require.Equal(s.t, RolloutHalted, s.st.Phase)
				s.now = s.now.Add(time.Hour)
				s.spec.ResumeHalt = 1
			},
			wait: &wantWait{For: forRunning0, Since: 90 * time.Minute, Deadline: 120 * time.Minute, LastError: "t1: its change is not under way yet"}, phase: RolloutProgressing, recheck: 120 * time.Minute},
		{name: "waiting for the tenant's maintenance window does not count", deadline: "30m",
			steps: func(s *rolloutSim) {
				s.obs["t1"] = RolloutObservation{Change: RolloutTenantRunning, Message: "upgrade r pending: waiting for the maintenance window", WindowWait: true}
				s.now = s.now.Add(10 * time.Minute)
				s.step()
				s.now = s.now.Add(2 * time.Hour)
			},
			phase: RolloutProgressing},
		{name: "paused with nothing running: nothing to wait for", deadline: "30m",
			steps: func(s *rolloutSim) {
				s.spec.Paused = true
				s.set("t1", RolloutTenantDone)
				s.step()
				s.now = s.now.Add(2 * time.Hour)
			},
			phase: RolloutPaused},
		{name: "soaking: the soak's end is the deadline, the last probes the answer",
			steps: func(s *rolloutSim) {
				s.set("t1", RolloutTenantDone)
				s.step()
				s.set("t2", RolloutTenantDone)
				s.now = s.now.Add(time.Minute)
				s.step()
				s.obs["t1"] = RolloutObservation{Change: RolloutTenantDone, Health: HealthReady}
				s.now = s.now.Add(2 * time.Minute)
			},
			wait:  &wantWait{For: forSoak, Since: time.Minute, Deadline: 11 * time.Minute, LastError: "1 of 2 tenants Ready at the last probe, 1 not probed since its change"},
			phase: RolloutProgressing, recheck: 11 * time.Minute},
		{name: "a soak stored before waits: derived from soakUntil",
			steps: func(s *rolloutSim) {
				s.set("t1", RolloutTenantDone)
				s.set("t2", RolloutTenantDone)
				s.step()
				s.step()
				s.st.Waves[0].Wait = nil
				s.restart()
				s.now = s.now.Add(time.Minute)
			},
			wait:  &wantWait{For: forSoak, Deadline: 10 * time.Minute, LastError: "0 of 2 tenants Ready at the last probe, 2 not probed since its change"},
			phase: RolloutProgressing, recheck: 10 * time.Minute},
		{name: "the soak over: the wave waits no more",
			steps: func(s *rolloutSim) {
				s.set("t1", RolloutTenantDone)
				s.set("t2", RolloutTenantDone)
				s.step()
				s.step()
				s.now = s.now.Add(10 * time.Minute)
			},
			phase: RolloutProgressing, recheck: 10*time.Minute + 6*time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRolloutSim(t, 3, RolloutSpec{Change: RolloutChange{TalosVersion: "v1.13.1"},
				Waves: []RolloutWave{{Tenants: 2, MaxParallel: 1}, {Percent: 100}}, Soak: "10m", ProgressDeadline: tc.deadline})
			t0 := s.now
			require.Equal(t, []string{"t1#1"}, starts(s.step()))
			tc.steps(s)
			d := s.step()
			assert.Equal(t, tc.phase, s.st.Phase, s.st.Message)
			got := s.st.Waves[0].Wait
			if tc.wait == nil {
				assert.Nil(t, got)
			} else {
				require.NotNil(t, got)
				assert.Equal(t, tc.wait.For, got.For)
				assert.Equal(t, t0.Add(tc.wait.Since), got.Since, "since")
				assert.Equal(t, t0.Add(tc.wait.Deadline), got.Deadline, "deadline")
				assert.Equal(t, tc.wait.LastError, got.LastError)
			}
			if tc.haltText != "" {
				require.NotNil(t, s.st.Halt)
				assert.Equal(t, "t1", s.st.Halt.Tenant)
				assert.Equal(t, tc.haltText, s.st.Halt.Reason)
				assert.Empty(t, d.Start, "a halted rollout starts nothing")
			}
			if tc.recheck > 0 {
				assert.Equal(t, t0.Add(tc.recheck), d.RecheckAt, "recheck")
			}
		})
	}
}

// TestRolloutWaveWaitMessage: a running wave's wait reads as any step's; a
// soak's says what it watches and that its end is success.
func TestRolloutWaveWaitMessage(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	running := RolloutWaveStatus{State: RolloutWaveRunning, Wait: &StepWait{For: "tenants of wave 2 to finish Talos v1.13.1 (1 of 3 done)",
		Since: t0, Deadline: t0.Add(6 * time.Hour), LastError: "t2: upgrade r running"}}
	assert.Equal(t, "waiting for tenants of wave 2 to finish Talos v1.13.1 (1 of 3 done): t2: upgrade r running, 4m10s (fails in 5h55m50s)",
		running.WaitMessage(t0.Add(4*time.Minute+10*time.Second)))
	soak := RolloutWaveStatus{State: RolloutWaveSoaking, Wait: &StepWait{For: "tenants of wave 2 to stay healthy through the soak",
		Since: t0, Deadline: t0.Add(10 * time.Minute), LastError: "3 of 3 tenants Ready at the last probe"}}
	assert.Equal(t, "soaking: watching tenants of wave 2 to stay healthy through the soak (3 of 3 tenants Ready at the last probe), 4m; the wave passes in 6m unless one turns unhealthy",
		soak.WaitMessage(t0.Add(4*time.Minute)))
	assert.Empty(t, (&RolloutWaveStatus{State: RolloutWaveDone}).WaitMessage(t0))
}
