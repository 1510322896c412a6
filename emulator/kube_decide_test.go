package emulator

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/stretchr/testify/require"
)

func TestDecideKube(t *testing.T) {
	cl := newTestClusterAt(t, "decide", "https://10.5.0.1:6443", "1.35.4")
	cp, err := configloader.NewFromBytes(cl.controlPlane)
	require.NoError(t, err)
	wk, err := configloader.NewFromBytes(cl.worker)
	require.NoError(t, err)
	running := func(role string) NodeStatus {
		return NodeStatus{Name: "n", Phase: PhaseRunning, Role: role, KubernetesVersion: "v1.35.4"}
	}
	left := running("controlplane")
	left.EtcdLeft = true
	booting := running("controlplane")
	booting.Phase = PhaseBooting
	maintenance := NodeStatus{Name: "n", Phase: PhaseMaintenance}
	rebooting := running("worker")
	rebooting.Phase = PhaseRebooting
	for _, tc := range []struct {
		name string
		v    kubeView
		want kubeWant
	}{
		{"a deleted node: its member and data go", kubeView{}, kubeWant{wipe: true}},
		{"maintenance mode (reset): its data goes", kubeView{exists: true, st: maintenance}, kubeWant{wipe: true}},
		{"a control plane before bootstrap (or after its etcd was lost) runs nothing and holds no etcd data",
			kubeView{exists: true, st: running("controlplane"), cfg: cp, bootID: "b1"}, kubeWant{wipeEtcd: true}},
		{"a bootstrapped control plane runs both",
			kubeView{exists: true, st: running("controlplane"), cfg: cp, bootID: "b1", bootstrapped: true},
			kubeWant{controlPlane: true, cpKey: "b1/v1.35.4", cpVersion: "v1.35.4", kubelet: true, kubeletKey: "b1/v1.35.4", kubeletVersion: "v1.35.4"}},
		{"a control plane out of etcd keeps only its kubelet",
			kubeView{exists: true, st: left, cfg: cp, bootID: "b1", bootstrapped: true},
			kubeWant{kubelet: true, kubeletKey: "b1/v1.35.4", kubeletVersion: "v1.35.4"}},
		{"a booting machine runs nothing yet",
			kubeView{exists: true, st: booting, cfg: cp, bootID: "b1", bootstrapped: true}, kubeWant{}},
		{"a rebooting worker runs nothing, keeps its data",
			kubeView{exists: true, st: rebooting, cfg: wk, bootID: "b1", bootstrapped: true}, kubeWant{}},
		{"a worker runs its kubelet once the cluster is bootstrapped",
			kubeView{exists: true, st: running("worker"), cfg: wk, bootID: "b2", bootstrapped: true},
			kubeWant{kubelet: true, kubeletKey: "b2/v1.35.4", kubeletVersion: "v1.35.4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, decideKube(tc.v))
		})
	}
}

func TestKubeFromMode(t *testing.T) {
	empty := t.TempDir()
	for _, tc := range []struct {
		mode, dir string
		light     bool
		err       string
	}{
		{mode: "off", dir: empty, light: true},
		{mode: "auto", dir: empty, light: true},
		{mode: "on", dir: empty, err: "no Kubernetes binaries under " + empty + ": run `go tool task tools`"},
		{mode: "sometimes", dir: empty, err: `"sometimes" is not on, off or auto`},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			kube, err := KubeFromMode(tc.mode, tc.dir)
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.light, kube == nil)
		})
	}
}
