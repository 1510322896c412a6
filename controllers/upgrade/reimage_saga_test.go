package upgrade_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/controllers/upgrade"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/talos"
)

// registrar registers schematics straight into the emulator's catalogue,
// as the factory client does through its HTTP API.
type registrar func(domain.Schematic) (string, error)

func (r registrar) Register(_ context.Context, s *domain.Schematic) error {
	_, err := r(*s)
	return err
}

// TestSchematicChangesReimageTheirGroups: a node group's own schematic
// re-images its machines at the version they run, with the factory's
// installer of the new schematic, and nothing else; then a change of the
// tenant's schematic re-images only the groups that follow it.
func TestSchematicChangesReimageTheirGroups(t *testing.T) {
	e := newSagaEnv(t, 1, 2, nil)
	e.startSaga(func(c *upgrade.Config) { c.Schematics = registrar(e.em.AddSchematic) })
	gpu := &domain.Schematic{Extensions: []string{"siderolabs/nvidia-container-toolkit-lts"}}
	iscsi := &domain.Schematic{Extensions: []string{"siderolabs/iscsi-tools"}}

	e.updateSpec(e.ref(domain.NodeGroupKind, "workers"), `{"role":"worker","count":2,"provider":"emu","schematic":{"extensions":["siderolabs/nvidia-container-toolkit-lts"]}}`)
	sagaEventually(t, 10*time.Second, "a re-image of the workers", func() bool { return len(e.upgrades()) == 1 })
	run := e.upgrades()[0]
	require.True(t, strings.HasPrefix(run.Metadata.Name, "reimage-v1-12-0-"), run.Metadata.Name)
	require.True(t, run.Spec.Reimage)
	require.Equal(t, sagaFrom, run.Spec.TalosVersion, "the version the machines run")
	require.Equal(t, []string{"workers"}, run.Spec.NodeGroups)
	run = e.waitUpgrade(run.Metadata.Name, "finished", finished)
	require.Equal(t, domain.UpgradeSucceeded, run.Status.Phase, run.Status.Reason)
	for _, m := range run.Status.Machines {
		require.Equal(t, domain.VanillaSchematic, m.FromSchematic, m.Name)
		require.Equal(t, gpu.ID(), m.ToSchematic, m.Name)
	}
	want := domain.FactoryInstaller(domain.DefaultImageFactory, gpu, sagaFrom)
	require.Equal(t, map[string][]string{"w-1": {want}, "w-2": {want}}, e.installers(), "the workers alone, once each")

	// The tenant's schematic reaches cp, which follows it, not the workers.
	// cp pins its version (the one it runs: no run): a tenant event may
	// still re-image it, as it keeps the tenant's schematic.
	e.updateSpec(e.ref(domain.NodeGroupKind, "cp"), `{"role":"controlplane","count":1,"provider":"emu","talosVersion":"`+sagaFrom+`"}`)
	e.updateSpec(domain.TenantRef(e.tenant), `{"talosVersion":"`+sagaFrom+`","kubernetesVersion":"`+sagaKube+`","schematic":{"extensions":["siderolabs/iscsi-tools"]}}`)
	sagaEventually(t, 10*time.Second, "a re-image of the control plane", func() bool { return len(e.upgrades()) == 2 })
	for _, u := range e.upgrades() {
		if u.Metadata.Name == run.Metadata.Name {
			continue
		}
		require.Equal(t, []string{"cp"}, u.Spec.NodeGroups)
		u = e.waitUpgrade(u.Metadata.Name, "finished", finished)
		require.Equal(t, domain.UpgradeSucceeded, u.Status.Phase, u.Status.Reason)
	}
	require.Equal(t, []string{domain.FactoryInstaller(domain.DefaultImageFactory, iscsi, sagaFrom)}, e.installers()["cp-1"])
	require.Len(t, e.installers()["w-1"], 1, "the workers keep their own schematic")
	require.Len(t, e.upgrades(), 2, "no other run")
}

// TestSchematicDriftIsReimaged: machines that run another schematic than
// their group declares (the group changed while no saga ran, so no run was
// started for it) are found by the drift check, and correcting that drift
// starts one re-image run of their group, whichever of its machines asks,
// which re-images each of them once and leaves the other groups alone.
func TestSchematicDriftIsReimaged(t *testing.T) {
	e := newSagaEnv(t, 1, 2, nil)
	gpu := &domain.Schematic{Extensions: []string{"siderolabs/nvidia-container-toolkit-lts"}}
	e.updateSpec(e.ref(domain.NodeGroupKind, "workers"), `{"role":"worker","count":2,"provider":"emu","schematic":{"extensions":["siderolabs/nvidia-container-toolkit-lts"]}}`)
	saga, _ := e.startSaga(func(c *upgrade.Config) { c.Schematics = registrar(e.em.AddSchematic) })
	// The saga meets the group for the first time on the version its
	// machines run: it remembers the group, and starts nothing.
	require.Empty(t, e.upgrades(), "no run: the declaration did not change while the saga watched")

	d := talos.ConfigDriftChecker{Service: talos.NewService(e.cache, e.pki), Nodes: talos.NodeAPI{}, Schematics: saga}
	drift, err := d.ConfigDrift(e.ctx, e.tenant)
	require.NoError(t, err)
	require.Len(t, drift, 2, "both workers run the vanilla schematic")
	for _, dr := range drift {
		require.True(t, dr.Schematic, dr.Machine)
		require.Equal(t, "workers", dr.NodeGroup)
		require.NoError(t, d.CorrectConfigDrift(e.ctx, e.tenant, dr))
	}
	runs := e.upgrades()
	require.Len(t, runs, 1, "one run for the group, whichever machine asked first")
	run := runs[0]
	require.Equal(t, "reimage-v1-12-0-drift-1", run.Metadata.Name)
	require.Equal(t, upgrade.TriggerDrift, run.Metadata.Labels[upgrade.LabelTrigger])
	require.Equal(t, "schematic drift of w-1", run.Metadata.Annotations[upgrade.AnnotationCause])
	require.True(t, run.Spec.Reimage)
	require.Equal(t, sagaFrom, run.Spec.TalosVersion)
	require.Equal(t, []string{"workers"}, run.Spec.NodeGroups)

	run = e.waitUpgrade(run.Metadata.Name, "finished", finished)
	require.Equal(t, domain.UpgradeSucceeded, run.Status.Phase, run.Status.Reason)
	want := domain.FactoryInstaller(domain.DefaultImageFactory, gpu, sagaFrom)
	require.Equal(t, map[string][]string{"w-1": {want}, "w-2": {want}}, e.installers(), "the workers alone, once each")
	drift, err = d.ConfigDrift(e.ctx, e.tenant)
	require.NoError(t, err)
	require.Empty(t, drift, "corrected")
}
