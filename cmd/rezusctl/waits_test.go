package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestDescribeRolloutShowsWaveWaits: describe prints under each wave what it
// waits for (a soak as a wait whose end is success) and the progress
// deadline, its default when the spec has none.
func TestDescribeRolloutShowsWaveWaits(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	soakUntil := t0.Add(10 * time.Minute)
	ro := &domain.Rollout{Metadata: domain.ObjectMeta{Name: "t113"},
		Spec: domain.RolloutSpec{Change: domain.RolloutChange{TalosVersion: "v1.13.1"}, Soak: "10m"},
		Status: domain.RolloutStatus{Phase: domain.RolloutProgressing, Waves: []domain.RolloutWaveStatus{
			{Size: 1, State: domain.RolloutWaveSoaking, SoakUntil: &soakUntil, Wait: &domain.StepWait{For: "tenants of wave 1 to stay healthy through the soak",
				Since: t0, Deadline: soakUntil, LastError: "1 of 1 tenants Ready at the last probe"}},
			{Size: 2, State: domain.RolloutWaveRunning, Wait: &domain.StepWait{For: "tenants of wave 2 to finish Talos v1.13.1 (0 of 2 done)",
				Since: t0, Deadline: t0.Add(6 * time.Hour), LastError: "t2: upgrade t113 running"}},
		}}}
	var b bytes.Buffer
	describeRollout(&b, ro, t0.Add(4*time.Minute))
	out := b.String()
	require.Contains(t, out, "Deadline:    6h (default) without a tenant finishing halts the rollout\n")
	require.Contains(t, out, "\n  soaking: watching tenants of wave 1 to stay healthy through the soak (1 of 1 tenants Ready at the last probe), 4m; the wave passes in 6m unless one turns unhealthy\n")
	require.Contains(t, out, "\n  waiting for tenants of wave 2 to finish Talos v1.13.1 (0 of 2 done): t2: upgrade t113 running, 4m (fails in 5h56m)\n")
}

// TestRemediationWaitCell: get remediations shows what a Joining one waits
// for; nothing for one that waits for nothing (or was stored before waits).
func TestRemediationWaitCell(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	st, err := json.Marshal(domain.RemediationStatus{Phase: domain.RemediationJoining, Wait: &domain.StepWait{For: "the new w-2 to be healthy",
		Since: t0, Deadline: t0.Add(10 * time.Minute), LastError: "Unreachable: connection refused"}})
	require.NoError(t, err)
	require.Equal(t, "waiting for the new w-2 to be healthy: Unreachable: connection refused, 1m (fails in 9m)",
		remediationWaitCell(&domain.Object{Status: st}, t0.Add(time.Minute)))
	require.Empty(t, remediationWaitCell(&domain.Object{Status: json.RawMessage(`{"phase":"Succeeded"}`)}, t0))
}
