package rollout_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// rememberedProber answers what the health service remembers: one probe,
// observed at a fixed time, the one the saga asked for after a step.
type rememberedProber struct{ h domain.TenantHealth }

func (p rememberedProber) Probe(_ context.Context, tenant string, _ bool) (domain.TenantHealth, error) {
	h := p.h
	h.Tenant = tenant
	return h, nil
}

// TestTheSagasProbeCounts: the probe the upgrade saga asked for after the
// last machine's step (older than the rollout's seeing the tenant done) is
// the tenant's health after its change: a Degraded one halts the rollout
// without another probe. Before, only a probe that began after the
// rollout saw the tenant done counted, one more round of Talos calls a
// tenant.
func TestTheSagasProbeCounts(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	e := newWaitEnv(t, t0)
	e.createRollout("t113", domain.RolloutSpec{Change: domain.RolloutChange{TalosVersion: "v1.13.1"},
		Waves: []domain.RolloutWave{{Percent: 100}}, Soak: "10m"})
	e.startWith(rememberedProber{domain.TenantHealth{State: domain.HealthDegraded, Reasons: []string{"cp-1: etcd unhealthy"},
		ObservedAt: t0.Add(31 * time.Second)}})
	e.upgradeWritten("t113")
	e.clock.Advance(time.Minute)
	end := t0.Add(30 * time.Second)
	e.upgradeStatus("t113", domain.UpgradeStatus{Phase: domain.UpgradeSucceeded, Machines: []domain.UpgradeMachine{{
		Name: "cp-1", Role: domain.RoleControlPlane, To: "v1.13.1", Phase: domain.StepDone, Finished: &end}}})
	e.rolloutUntil("t113", func(ct *assert.CollectT, ro *domain.Rollout) {
		require.Len(ct, ro.Status.Tenants, 1)
		assert.Equal(ct, domain.RolloutTenantDone, ro.Status.Tenants[0].State)
	})
	// The next round (the soaking wave's, an Interval later) probes it.
	e.clock.Advance(time.Minute)
	ro := e.rolloutUntil("t113", func(ct *assert.CollectT, ro *domain.Rollout) {
		assert.Equal(ct, domain.RolloutHalted, ro.Status.Phase)
	})
	require.Equal(t, "acme", ro.Status.Halt.Tenant)
	require.Contains(t, ro.Status.Halt.Reason, "unhealthy after its change (Degraded): cp-1: etcd unhealthy")
	require.True(t, ro.Status.Tenants[0].FinishedAt.After(end), "the rollout saw it done at %s", ro.Status.Tenants[0].FinishedAt)
}
