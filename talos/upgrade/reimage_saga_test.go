package upgrade_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/talos/upgrade"
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
