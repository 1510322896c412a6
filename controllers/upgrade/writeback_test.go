package upgrade_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestTalosUpgradeUsesInstallImageAndWritesBack: a node group's
// providerConfig.installImage is the installer its machines are upgraded
// with, at the target's tag (digest dropped); a group without one gets the
// default installer. A Succeeded explicit run writes its version into the
// spec it covered — the group it named, then the tenant when it covered every
// group that follows the tenant — and these writes start no run.
func TestTalosUpgradeUsesInstallImageAndWritesBack(t *testing.T) {
	e := newSagaEnv(t, 1, 1, nil)
	e.updateSpec(e.ref(domain.NodeGroupKind, "workers"), `{"role":"worker","count":1,"provider":"emu",`+
		`"providerConfig":{"installImage":"registry.local:5000/acme/installer:`+sagaFrom+`@sha256:0123456789abcdef"}}`)
	e.startSaga(nil)

	e.createUpgrade("workers-113", `{"talosVersion":"`+sagaTo+`","nodeGroups":["workers"]}`)
	u := e.waitUpgrade("workers-113", "finished", finished)
	require.Equal(t, domain.UpgradeSucceeded, u.Status.Phase, "reason: %s", u.Status.Reason)
	require.Equal(t, map[string][]string{"w-1": {"registry.local:5000/acme/installer:" + sagaTo}}, e.installers())
	require.Equal(t, sagaTo, e.nodeGroup("workers").Spec.TalosVersion, "the group it named")
	require.Equal(t, sagaFrom, e.tenantObj().Spec.TalosVersion, "the tenant's other groups were not covered")
	require.Empty(t, e.nodeGroup("cp").Spec.TalosVersion)

	e.createUpgrade("all-113", `{"talosVersion":"`+sagaTo+`"}`)
	u = e.waitUpgrade("all-113", "finished", finished)
	require.Equal(t, domain.UpgradeSucceeded, u.Status.Phase, "reason: %s", u.Status.Reason)
	require.Equal(t, map[string]string{"cp-1": domain.StepDone, "w-1": domain.StepDone}, phases(u))
	require.Equal(t, []string{domain.FactoryInstaller(domain.DefaultImageFactory, nil, sagaTo)}, e.installers()["cp-1"], "the default installer: the factory's vanilla one")
	require.Equal(t, sagaTo, e.tenantObj().Spec.TalosVersion, "every group that follows the tenant was covered")
	require.Empty(t, e.nodeGroup("cp").Spec.TalosVersion, "cp follows the tenant still")

	// The writes started no run: the next change does, and it is the only one.
	e.updateSpec(e.ref(domain.NodeGroupKind, "cp"), `{"role":"controlplane","count":1,"provider":"emu","talosVersion":"v1.13.1"}`)
	sagaEventually(t, 10*time.Second, "the cp group's run", func() bool { return len(e.upgrades()) == 3 })
	for _, u := range e.upgrades() {
		if u.Metadata.Name != "workers-113" && u.Metadata.Name != "all-113" {
			require.Equal(t, []string{"cp"}, u.Spec.NodeGroups)
			u = e.waitUpgrade(u.Metadata.Name, "finished", finished)
			require.Equal(t, domain.UpgradeSucceeded, u.Status.Phase, "reason: %s", u.Status.Reason)
		}
	}
	require.Len(t, e.upgrades(), 3)
	require.Equal(t, map[string]int{"cp-1": 2, "w-1": 1}, e.upgradeCalls())
	require.Equal(t, "v1.13.1", e.nodeGroup("cp").Spec.TalosVersion, "a triggered run leaves the spec as declared")
}
