package emulator

//lint:file-ignore SA1019 these tests call MachineService.Upgrade on purpose: the emulator serves it because
// the upgrade saga still upgrades through it (controllers/upgrade_node.go); LifecycleService has its own tests here

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, phaseIs(em, "cp-2", PhaseRebooting)())
	}, 15*time.Second, 10*time.Millisecond, "cp-2 down")
	require.Equal(t, memberID("cp-1"), leaderOf(t, clients["cp-3"]), "the first member up leads while the bootstrap node is down")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, versionIs(t, clients["cp-2"], "v1.13.1")())
	}, 15*time.Second, 10*time.Millisecond, "cp-2 back")
	require.Equal(t, memberID("cp-2"), leaderOf(t, clients["cp-3"]))

	_, err = em.InjectFault("cp-3", Faults{Unhealthy: true})
	require.NoError(t, err)
	resp, err := clients["cp-3"].EtcdStatus(callCtx(t))
	require.NoError(t, err)
	require.Equal(t, []string{"emulated fault: unhealthy"}, resp.GetMessages()[0].GetMemberStatus().GetErrors())
	require.Equal(t, memberID("cp-3"), resp.GetMessages()[0].GetMemberStatus().GetMemberId())
}

// memberNames lists the members a node's EtcdMemberList answers, checking
// that each carries its node's stable id.
func memberNames(t *testing.T, c *client.Client) []string {
	t.Helper()
	resp, err := c.EtcdMemberList(callCtx(t), &machine.EtcdMemberListRequest{})
	require.NoError(t, err)
	var names []string
	for _, m := range resp.GetMessages()[0].GetMembers() {
		require.Equal(t, memberID(m.GetHostname()), m.GetId())
		names = append(names, m.GetHostname())
	}
	return names
}

// etcdService is the etcd entry of a node's ServiceList.
func etcdService(t *testing.T, c *client.Client) *machine.ServiceInfo {
	t.Helper()
	resp, err := c.ServiceList(callCtx(t))
	require.NoError(t, err)
	for _, s := range resp.GetMessages()[0].GetServices() {
		if s.GetId() == "etcd" {
			return s
		}
	}
	t.Fatal("no etcd service")
	return nil
}

// TestEtcdMembership: members leave and are removed by id; every member
// agrees on the list and the leader, a node out of etcd says its etcd is not
// running, and the membership survives an emulator restart.
func TestEtcdMembership(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	em, stop := startEmulator(t, restartableConfig(dir))
	cl := newTestCluster(t, "membership")
	names := []string{"cp-1", "cp-2", "cp-3"}
	clients := map[string]*client.Client{}
	for _, name := range names {
		st := configuredNode(t, em, name, cl.controlPlane)
		clients[name] = connect(t, cl.admin, st.Address)
	}
	require.NoError(t, clients["cp-1"].Bootstrap(callCtx(t), &machine.BootstrapRequest{}))
	for _, name := range names {
		require.Equal(t, names, memberNames(t, clients[name]), name)
	}

	// The bootstrap node leaves: the others agree on two members and a new leader.
	err := clients["cp-1"].EtcdLeaveCluster(callCtx(t), &machine.EtcdLeaveClusterRequest{})
	require.NoError(t, err)
	for _, name := range []string{"cp-2", "cp-3"} {
		require.Equal(t, []string{"cp-2", "cp-3"}, memberNames(t, clients[name]), name)
		require.Equal(t, memberID("cp-2"), leaderOf(t, clients[name]), name)
		require.True(t, etcdService(t, clients[name]).GetHealth().GetHealthy(), name)
	}
	_, err = clients["cp-1"].EtcdMemberList(callCtx(t), &machine.EtcdMemberListRequest{})
	requireCode(t, codes.FailedPrecondition, err)
	_, err = clients["cp-1"].EtcdStatus(callCtx(t))
	requireCode(t, codes.FailedPrecondition, err)
	err = clients["cp-1"].EtcdLeaveCluster(callCtx(t), &machine.EtcdLeaveClusterRequest{})
	requireCode(t, codes.FailedPrecondition, err) // not a member any more
	left := etcdService(t, clients["cp-1"])
	require.Equal(t, "Finished", left.GetState())
	require.False(t, left.GetHealth().GetHealthy())
	requireCode(t, codes.AlreadyExists, clients["cp-2"].Bootstrap(callCtx(t), &machine.BootstrapRequest{}))

	// An unreachable member is removed through a healthy one.
	_, err = em.InjectFault("cp-3", Faults{Unreachable: true})
	require.NoError(t, err)
	err = clients["cp-2"].EtcdRemoveMemberByID(callCtx(t), &machine.EtcdRemoveMemberByIDRequest{MemberId: 42})
	requireCode(t, codes.NotFound, err)
	err = clients["cp-1"].EtcdRemoveMemberByID(callCtx(t), &machine.EtcdRemoveMemberByIDRequest{MemberId: memberID("cp-3")})
	requireCode(t, codes.FailedPrecondition, err) // not through a node out of etcd
	err = clients["cp-2"].EtcdRemoveMemberByID(callCtx(t), &machine.EtcdRemoveMemberByIDRequest{MemberId: memberID("cp-3")})
	require.NoError(t, err)
	require.Equal(t, []string{"cp-2"}, memberNames(t, clients["cp-2"]))
	require.Equal(t, memberID("cp-2"), leaderOf(t, clients["cp-2"]))
	err = clients["cp-2"].EtcdLeaveCluster(callCtx(t), &machine.EtcdLeaveClusterRequest{})
	requireCode(t, codes.FailedPrecondition, err) // the last member stays
	_, err = em.InjectFault("cp-3", Faults{})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if _, err := clients["cp-3"].EtcdStatus(ctx); status.Code(err) != codes.FailedPrecondition {
				return fmt.Errorf("EtcdStatus: %v", err)
			}
			return nil
		}())
	}, 15*time.Second, 10*time.Millisecond, "cp-3 comes back out of etcd")
	stop()

	em2, _ := startEmulator(t, restartableConfig(dir))
	for _, name := range names {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			assert.NoError(ct, phaseIs(em2, name, PhaseRunning)())
		}, 15*time.Second, 10*time.Millisecond, name+" back")
	}
	require.Equal(t, []string{"cp-2"}, memberNames(t, clients["cp-2"]), "membership survives a restart")
	st, err := em2.Get("cp-1")
	require.NoError(t, err)
	require.True(t, st.EtcdLeft)

	// A reset wipes the node; configured again, it joins again.
	require.NoError(t, clients["cp-1"].Reset(callCtx(t), true, true))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, phaseIs(em2, "cp-1", PhaseMaintenance)())
	}, 15*time.Second, 10*time.Millisecond, "cp-1 in maintenance")
	_, err = connectInsecure(t, st.Address).ApplyConfiguration(callCtx(t), &machine.ApplyConfigurationRequest{Data: cl.controlPlane})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, phaseIs(em2, "cp-1", PhaseRunning)())
	}, 15*time.Second, 10*time.Millisecond, "cp-1 running")
	require.Equal(t, []string{"cp-1", "cp-2"}, memberNames(t, clients["cp-2"]))
	require.Equal(t, memberNames(t, clients["cp-2"]), memberNames(t, clients["cp-1"]))
}
