package rollout

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestSettled: a probe counts for a done tenant from when its change left
// its machines as they are: the last machine's end for a version upgrade
// that succeeded, else when the rollout saw the tenant done.
func TestSettled(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	finished := t0.Add(time.Minute)
	machines := func(ends ...*time.Time) []domain.UpgradeMachine {
		var ms []domain.UpgradeMachine
		for _, e := range ends {
			ms = append(ms, domain.UpgradeMachine{Name: "m", Phase: domain.StepDone, Finished: e})
		}
		return ms
	}
	talos := domain.RolloutChange{TalosVersion: "v1.13.1"}
	for _, tc := range []struct {
		name   string
		change domain.RolloutChange
		up     domain.UpgradeStatus
		want   time.Time
	}{
		{"talos: the last machine's end", talos,
			domain.UpgradeStatus{Phase: domain.UpgradeSucceeded, Machines: machines(at(10*time.Second), at(40*time.Second), at(20*time.Second))}, t0.Add(40 * time.Second)},
		{"kubernetes: the last machine's end", domain.RolloutChange{KubernetesVersion: "v1.34.1"},
			domain.UpgradeStatus{Phase: domain.UpgradeSucceeded, Machines: machines(at(30 * time.Second))}, t0.Add(30 * time.Second)},
		{"a machine without an end", talos,
			domain.UpgradeStatus{Phase: domain.UpgradeSucceeded, Machines: machines(at(10*time.Second), nil)}, finished},
		{"no machines", talos, domain.UpgradeStatus{Phase: domain.UpgradeSucceeded}, finished},
		{"not succeeded", talos,
			domain.UpgradeStatus{Phase: domain.UpgradeFailed, Machines: machines(at(10 * time.Second))}, finished},
		{"an end after the rollout saw it done", talos,
			domain.UpgradeStatus{Phase: domain.UpgradeSucceeded, Machines: machines(at(2 * time.Minute))}, finished},
		{"a rotation: when the rollout saw it done", domain.RolloutChange{Rotate: []string{"os-ca"}},
			domain.UpgradeStatus{Phase: domain.UpgradeSucceeded, Machines: machines(at(10 * time.Second))}, finished},
		{"a config patch", domain.RolloutChange{ConfigPatch: &domain.RolloutConfigPatch{Name: "p"}},
			domain.UpgradeStatus{}, finished},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, settled(tc.change, &tc.up, finished))
		})
	}
}
