package rollout_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
)

// TestRotationRollout: a rollout that rotates secrets writes each tenant an
// Upgrade with spec.rotate (labelled with the rollout); with no version to
// find the tenant at, the tenant is started, and it is done only once its
// rotation Upgrade Succeeded.
func TestRotationRollout(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	e := newWaitEnv(t, t0)
	e.createRollout("rotate-k8s", domain.RolloutSpec{Change: domain.RolloutChange{Rotate: []string{domain.SecretKubernetesCA, domain.SecretTalosCA}},
		Waves: []domain.RolloutWave{{Percent: 100}}, Soak: "0s"})
	e.start()

	e.upgradeWritten("rotate-k8s")
	up, ok, err := projections.Get[domain.Upgrade](e.cache, domain.ObjectRef(domain.UpgradeKind, "acme", "rotate-k8s"))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []string{domain.SecretTalosCA, domain.SecretKubernetesCA}, up.Spec.Rotate)
	require.True(t, up.Spec.Rotation())
	require.Empty(t, up.Spec.TalosVersion+up.Spec.KubernetesVersion)
	require.Equal(t, "rotate-k8s", up.Metadata.Labels[domain.LabelRollout])

	// Under way through its stages: running, whatever its machines show.
	e.upgradeStatus("rotate-k8s", domain.UpgradeStatus{Phase: domain.UpgradeRunning, Current: "cp-1",
		Rotation: &domain.RotationProgress{Stages: domain.RotationStages(up.Spec.Rotate), Stage: domain.RotationSwap},
		Machines: []domain.UpgradeMachine{{Name: "cp-1", Role: domain.RoleControlPlane, To: "v1.13.0", Phase: domain.StepDone}}})
	e.clock.Advance(time.Minute)
	ro := e.rolloutUntil("rotate-k8s", func(ct *assert.CollectT, ro *domain.Rollout) {
		require.Len(ct, ro.Status.Tenants, 1)
		assert.Equal(ct, "upgrade rotate-k8s running", ro.Status.Tenants[0].Message)
	})
	require.Equal(t, domain.RolloutTenantRunning, ro.Status.Tenants[0].State)
	require.Equal(t, "tenants of wave 1 to finish rotation of talos-ca, kubernetes-ca (0 of 1 done)", ro.Status.Waves[0].Wait.For)

	e.upgradeStatus("rotate-k8s", domain.UpgradeStatus{Phase: domain.UpgradeSucceeded,
		Rotation: &domain.RotationProgress{Stages: domain.RotationStages(up.Spec.Rotate), Stage: domain.RotationDrop}})
	ro = e.rolloutUntil("rotate-k8s", func(ct *assert.CollectT, ro *domain.Rollout) {
		assert.Equal(ct, domain.RolloutSucceeded, ro.Status.Phase)
	})
	require.Equal(t, domain.RolloutTenantDone, ro.Status.Tenants[0].State)
	require.Equal(t, "upgrade rotate-k8s succeeded", ro.Status.Tenants[0].Message)
	raw, _ := json.Marshal(ro.Spec.Change)
	require.JSONEq(t, `{"rotate":["talos-ca","kubernetes-ca"]}`, string(raw))
}
