package emulator

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
)

// readFile reads a file through Read.
func readFile(t *testing.T, c *client.Client, path string) (string, error) {
	t.Helper()
	r, err := c.Read(callCtx(t), path)
	if err != nil {
		return "", err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	return string(b), err
}

// TestEverydayCallsReflectTheNode checks the answers talosctl's everyday
// commands get: services with every field set, memory, containers by role,
// time, files, and the boot id a reboot changes.
func TestEverydayCallsReflectTheNode(t *testing.T) {
	em, _ := startEmulator(t, fastConfig(t.TempDir()))
	tc := newTestCluster(t, "everyday")
	ctx := context.Background()
	cp, err := em.Create(ctx, NodeSpec{Name: "day-cp", UserData: tc.controlPlane})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, phaseIs(em, "day-cp", PhaseRunning)())
	}, 15*time.Second, 10*time.Millisecond, "running")
	wk, err := em.Create(ctx, NodeSpec{Name: "day-worker", UserData: tc.worker})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, phaseIs(em, "day-worker", PhaseRunning)())
	}, 15*time.Second, 10*time.Millisecond, "running")
	c, w := connect(t, tc.admin, cp.Address), connect(t, tc.admin, wk.Address)
	err = c.Bootstrap(callCtx(t), &machineapi.BootstrapRequest{})
	require.NoError(t, err)

	resp, err := c.ServiceList(callCtx(t))
	require.NoError(t, err)
	for _, s := range resp.GetMessages()[0].GetServices() {
		require.NotNil(t, s.GetHealth().GetLastChange(), s.GetId())
		require.NotEmpty(t, s.GetEvents().GetEvents(), s.GetId())
		for _, ev := range s.GetEvents().GetEvents() {
			require.NotNil(t, ev.GetTs(), s.GetId())
		}
		require.Equal(t, "Running", s.GetState(), s.GetId())
	}

	mem, err := c.Memory(callCtx(t))
	require.NoError(t, err)
	require.EqualValues(t, 4<<20, mem.GetMessages()[0].GetMeminfo().GetMemtotal())

	ids := func(cl *client.Client, ns string) []string {
		resp, err := cl.Containers(callCtx(t), ns, common.ContainerDriver_CONTAINERD)
		require.NoError(t, err)
		var out []string
		for _, ct := range resp.GetMessages()[0].GetContainers() {
			out = append(out, ct.GetId())
		}
		return out
	}
	require.Equal(t, []string{"apid", "etcd", "kubelet", "trustd"}, ids(c, constants.SystemContainerdNamespace))
	require.Contains(t, ids(c, constants.K8sContainerdNamespace), "kube-system/kube-apiserver-day-cp:kube-apiserver")
	require.Equal(t, []string{"apid", "kubelet"}, ids(w, constants.SystemContainerdNamespace))
	require.Empty(t, ids(w, constants.K8sContainerdNamespace))

	tm, err := c.Time(callCtx(t))
	require.NoError(t, err)
	require.Equal(t, constants.DefaultNTPServer, tm.GetMessages()[0].GetServer())

	osr, err := readFile(t, w, "/etc/os-release")
	require.NoError(t, err)
	require.Contains(t, osr, "VERSION_ID=v1.13.0")
	_, err = readFile(t, w, "/etc/shadow")
	requireCode(t, codes.NotFound, err)
	boot1, err := readFile(t, w, "/proc/sys/kernel/random/boot_id")
	require.NoError(t, err)

	// Pull, then upgrade from the pulled image and reboot into it.
	pull, err := w.ImageClient.Pull(callCtx(t), &machineapi.ImageServicePullRequest{ImageRef: "ghcr.io/siderolabs/installer:v1.13.1"})
	require.NoError(t, err)
	var name string
	for {
		msg, err := pull.Recv()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if n := msg.GetName(); n != "" {
			name = n
		}
	}
	require.Equal(t, "ghcr.io/siderolabs/installer:v1.13.1", name)
	up, err := w.LifecycleClient.Upgrade(callCtx(t), &machineapi.LifecycleServiceUpgradeRequest{Source: &machineapi.InstallArtifactsSource{ImageName: name}})
	require.NoError(t, err)
	var msgs []string
	for {
		msg, err := up.Recv()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		msgs = append(msgs, msg.GetProgress().GetMessage())
	}
	require.NotContains(t, strings.Join(msgs, "\n"), "pulling", "the upgrade uses the pulled image")
	err = w.Reboot(callCtx(t))
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, versionIs(t, w, "v1.13.1")())
	}, 15*time.Second, 10*time.Millisecond, "back on v1.13.1")
	boot2, err := readFile(t, w, "/proc/sys/kernel/random/boot_id")
	require.NoError(t, err)
	require.NotEqual(t, boot1, boot2, "a reboot changes the boot id")
}
