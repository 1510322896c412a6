package emulator

import (
	"bytes"
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runHealth runs the real `talosctl health` (its default invocation, one
// control plane as endpoint and node) with args, and returns its output.
func runHealth(t *testing.T, tc talosctl, limit time.Duration, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, tc.bin, tc.args(append([]string{"health"}, args...)...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestTalosctlHealth runs the real talosctl health on a control plane and a
// worker running the real control plane: Talos's own checks pass once the
// bootstrap manifests' CoreDNS and kube-proxy run, and fail, naming the
// check, while the control plane's kubelet is down.
func TestTalosctlHealth(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real control plane and talosctl")
	}
	t.Parallel()
	bin := talosctlPath(t)
	em := startKubeEmulator(t, fastConfig(t.TempDir()))
	cl, cp, _ := bootstrappedKubeCluster(t, em, "health")
	tc := newTalosctl(t, bin, cl, cp)

	start := time.Now()
	out, err := runHealth(t, tc, 4*time.Minute)
	t.Logf("talosctl health (%s):\n%s", time.Since(start).Round(time.Millisecond), out)
	require.NoError(t, err, out)
	for _, check := range []string{"etcd to be healthy", "apid to be ready", "kubelet to be healthy",
		"all control plane static pods to be running", "all k8s nodes to report ready", "kube-proxy to report ready",
		"coredns to report ready"} {
		requireLine(t, out, "waiting for "+check, "OK")
	}

	// The manifests are there: applying them again (another config, a
	// restarted supervisor) finds each, kube-dns's fixed clusterIP included.
	v := em.kubeView(cp.Name)
	servers := em.kube.apiServers(v.st.ClusterID)
	require.NotEmpty(t, servers)
	require.NoError(t, em.kube.applyBootstrapManifests(t.Context(), v, servers[0]))

	_, err = em.InjectFault("cp-1", Faults{KubeletDown: true})
	require.NoError(t, err)
	c := connect(t, cl.admin, cp.Address)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		info, err := c.ServiceInfo(callCtx(t), "kubelet")
		if assert.NoError(ct, err) && assert.Len(ct, info, 1) {
			assert.NotEqual(ct, "Running", info[0].Service.GetState())
		}
	}, time.Minute, 50*time.Millisecond, "the kubelet stops")
	start = time.Now()
	out, err = runHealth(t, tc, 2*time.Minute, "--wait-timeout", "10s")
	t.Logf("talosctl health with the kubelet down (%s):\n%s", time.Since(start).Round(time.Millisecond), out)
	require.Error(t, err, out)
	require.Contains(t, out, "waiting for kubelet to be healthy: 1 error occurred:")
	requireLine(t, out, nodeIP(cp).String(), `service "kubelet" not in expected state "Running"`)
}
