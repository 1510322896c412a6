package talos_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator/talostest"
	"github.com/rezuscloud/rezuscloud/talos"
)

// TestDriftFindsAnotherSchematic: the drift check reads each machine's
// schematic through its ExtensionStatus resources and reports a machine
// whose image runs another schematic than its node group declares (not for
// the config controller to correct: a re-image is an upgrade's).
func TestDriftFindsAnotherSchematic(t *testing.T) {
	h := talostest.Start(t, 1, 1)
	iscsi := &domain.Schematic{Extensions: []string{"siderolabs/iscsi-tools"}}
	group := func(op domain.Op, name, spec string) {
		h.Execute(domain.Command{Op: op, Ref: domain.ObjectRef(domain.NodeGroupKind, h.Tenant, name),
			Object: &domain.Object{Metadata: domain.ObjectMeta{Name: name, Tenant: h.Tenant}, Spec: json.RawMessage(spec)}})
	}
	group(domain.OpCreate, "cp", `{"role":"controlplane","count":1,"provider":"emu"}`)
	group(domain.OpCreate, "workers", `{"role":"worker","count":1,"provider":"emu","schematic":{"extensions":["siderolabs/iscsi-tools"]}}`)
	d := talos.ConfigDriftChecker{Service: talos.NewService(h.Cache, h.PKI), Nodes: talos.NodeAPI{}}

	drift, err := d.ConfigDrift(h.Ctx, h.Tenant)
	require.NoError(t, err)
	require.Len(t, drift, 1, "the nodes booted the vanilla installer: only the workers declare another")
	require.Equal(t, "w-1", drift[0].Machine)
	require.True(t, drift[0].Schematic)
	require.Contains(t, drift[0].Reason, "runs schematic "+domain.VanillaSchematic[:12])
	require.Contains(t, drift[0].Reason, "declares "+iscsi.ID()[:12])
	require.NoError(t, d.CorrectConfigDrift(h.Ctx, h.Tenant, drift[0]), "reported, not corrected by the config controller")

	group(domain.OpUpdate, "workers", `{"role":"worker","count":1,"provider":"emu"}`)
	drift, err = d.ConfigDrift(h.Ctx, h.Tenant)
	require.NoError(t, err)
	require.Empty(t, drift, "back to the vanilla schematic the node runs")
}
