package emulator

//lint:file-ignore SA1019 these tests call MachineService.Upgrade on purpose: the emulator serves it because
// the upgrade saga still upgrades through it (talos/upgrade_node.go); LifecycleService has its own tests here

import (
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
)

func leaderOf(t *testing.T, c *client.Client) uint64 {
	t.Helper()
	resp, err := c.EtcdStatus(callCtx(t))
	require.NoError(t, err)
	return resp.GetMessages()[0].GetMemberStatus().GetLeader()
}

// TestEtcdStatusLeader: the bootstrapped control plane leads; while it is
// down another member leads.
func TestEtcdStatusLeader(t *testing.T) {
	t.Parallel()
	cfg := fastConfig("")
	cfg.UpgradeDelay = 300 * time.Millisecond // a window to see the leader move in
	em, _ := startEmulator(t, cfg)
	cl := newTestCluster(t, "leader")
	clients := map[string]*client.Client{}
	for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
		st := configuredNode(t, em, name, cl.controlPlane)
		clients[name] = connect(t, cl.admin, st.Address)
	}
	w := configuredNode(t, em, "worker-1", cl.worker)
	_, err := connect(t, cl.admin, w.Address).EtcdStatus(callCtx(t))
	requireCode(t, codes.FailedPrecondition, err)
	_, err = clients["cp-1"].EtcdStatus(callCtx(t))
	requireCode(t, codes.FailedPrecondition, err) // not bootstrapped

	require.NoError(t, clients["cp-2"].Bootstrap(callCtx(t), &machine.BootstrapRequest{}))
	for name, c := range clients {
		require.Equal(t, memberID("cp-2"), leaderOf(t, c), name)
	}

	_, err = clients["cp-2"].Upgrade(callCtx(t), "ghcr.io/siderolabs/installer:v1.13.1", false, false)
	require.NoError(t, err)
	eventually(t, "cp-2 down", phaseIs(em, "cp-2", PhaseRebooting))
	require.Equal(t, memberID("cp-1"), leaderOf(t, clients["cp-3"]), "the first member up leads while the bootstrap node is down")
	eventually(t, "cp-2 back", versionIs(t, clients["cp-2"], "v1.13.1"))
	require.Equal(t, memberID("cp-2"), leaderOf(t, clients["cp-3"]))

	_, err = em.InjectFault("cp-3", Faults{Unhealthy: true})
	require.NoError(t, err)
	resp, err := clients["cp-3"].EtcdStatus(callCtx(t))
	require.NoError(t, err)
	require.Equal(t, []string{"emulated fault: unhealthy"}, resp.GetMessages()[0].GetMemberStatus().GetErrors())
	require.Equal(t, memberID("cp-3"), resp.GetMessages()[0].GetMemberStatus().GetMemberId())
}
