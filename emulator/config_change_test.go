package emulator

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/stretchr/testify/require"
)

// patched applies a strategic-merge patch to a config, as a ConfigPatch would.
func patched(t testing.TB, base []byte, patch string) []byte {
	t.Helper()
	p, err := configpatcher.LoadPatch([]byte(patch))
	require.NoError(t, err)
	out, err := configpatcher.Apply(configpatcher.WithBytes(base), []configpatcher.Patch{p})
	require.NoError(t, err)
	b, err := out.Bytes()
	require.NoError(t, err)
	return b
}

// Patches used by the tests of mode AUTO: each names what it changes.
const (
	patchKubelet = "machine:\n  kubelet:\n    image: ghcr.io/siderolabs/kubelet:v1.34.1\n    extraArgs:\n      rotate-server-certificates: \"true\"\n"
	patchNetwork = "machine:\n  network:\n    hostname: renamed\n  nodeLabels:\n    zone: a\n  nodeTaints:\n    dedicated: db:NoSchedule\ncluster:\n  apiServer:\n    certSANs: [api.example.com]\n"
	patchSysctl  = "machine:\n  sysctls:\n    net.ipv4.ip_forward: \"1\"\n"
	patchInstall = "machine:\n  install:\n    image: ghcr.io/siderolabs/installer:v1.13.9\n"
)

func TestNeedsReboot(t *testing.T) {
	t.Parallel()
	cl := newTestCluster(t, "auto")
	for _, tc := range []struct {
		name   string
		next   []byte
		reboot bool
	}{
		{"the same config", cl.controlPlane, false},
		{"kubelet image and extra args", patched(t, cl.controlPlane, patchKubelet), false},
		{"network, labels, taints, API server certSANs", patched(t, cl.controlPlane, patchNetwork), false},
		{"sysctls", patched(t, cl.controlPlane, patchSysctl), true},
		{"install image (read only by installs and upgrades)", patched(t, cl.controlPlane, patchInstall), false},
		{"machine type", cl.worker, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			running, err := loadConfig(cl.controlPlane)
			require.NoError(t, err)
			next, err := loadConfig(tc.next)
			require.NoError(t, err)
			got, err := needsReboot(running, next)
			require.NoError(t, err)
			require.Equal(t, tc.reboot, got)
		})
	}
}
