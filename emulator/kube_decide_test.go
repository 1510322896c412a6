package emulator

import (
	"testing"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/stretchr/testify/assert"
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
	cpEtcd := "b1/v1.35.4/" + etcdPKI(cp)
	cpKey, cpKubelet := cpEtcd+"/"+controlPlanePKI(cp), "b1/v1.35.4/"+kubeletPKI(cp)
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
			kubeWant{controlPlane: true, etcdKey: cpEtcd, cpKey: cpKey, cpVersion: "v1.35.4", kubelet: true, kubeletKey: cpKubelet, kubeletVersion: "v1.35.4"}},
		{"a control plane out of etcd keeps only its kubelet",
			kubeView{exists: true, st: left, cfg: cp, bootID: "b1", bootstrapped: true},
			kubeWant{kubelet: true, kubeletKey: cpKubelet, kubeletVersion: "v1.35.4"}},
		{"a booting machine runs nothing yet",
			kubeView{exists: true, st: booting, cfg: cp, bootID: "b1", bootstrapped: true}, kubeWant{}},
		{"a rebooting worker runs nothing, keeps its data",
			kubeView{exists: true, st: rebooting, cfg: wk, bootID: "b1", bootstrapped: true}, kubeWant{}},
		{"a worker runs its kubelet once the cluster is bootstrapped",
			kubeView{exists: true, st: running("worker"), cfg: wk, bootID: "b2", bootstrapped: true},
			kubeWant{kubelet: true, kubeletKey: "b2/v1.35.4/" + kubeletPKI(wk), kubeletVersion: "v1.35.4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, decideKube(tc.v))
		})
	}
}

// TestDecideKubePKI: which restart a config change applied in place causes
// on a running, bootstrapped control plane: a Kubernetes PKI change
// restarts its Kubernetes components (cpKey; etcd keeps etcdKey) and, for
// what the kubelet holds, its kubelet; a Talos CA change restarts neither.
func TestDecideKubePKI(t *testing.T) {
	cl := newTestClusterAt(t, "decide-pki", "https://10.5.0.1:6443", "1.35.4")
	kubeCA, talosCA := newCA(t, true), newCA(t, false)
	st := NodeStatus{Name: "n", Phase: PhaseRunning, Role: "controlplane", KubernetesVersion: "v1.35.4"}
	want := func(b []byte) kubeWant {
		cfg, err := loadConfig(b)
		require.NoError(t, err)
		return decideKube(kubeView{exists: true, st: st, cfg: cfg, bootID: "b1", bootstrapped: true})
	}
	before := want(cl.controlPlane)
	for _, tc := range []struct {
		name              string
		change            func(*v1alpha1.Config)
		etcd, cp, kubelet bool // which keys change
	}{
		{"nothing", func(*v1alpha1.Config) {}, false, false, false},
		{"Kubernetes CA accepted", func(c *v1alpha1.Config) {
			c.ClusterConfig.ClusterAcceptedCAs = append(c.ClusterConfig.ClusterAcceptedCAs, &x509.PEMEncodedCertificate{Crt: kubeCA.Crt})
		}, false, true, true},
		{"Kubernetes CA swapped", func(c *v1alpha1.Config) {
			c.ClusterConfig.ClusterAcceptedCAs = []*x509.PEMEncodedCertificate{{Crt: c.ClusterConfig.ClusterCA.Crt}}
			c.ClusterConfig.ClusterCA = kubeCA
		}, false, true, true},
		{"aggregator CA", func(c *v1alpha1.Config) { c.ClusterConfig.ClusterAggregatorCA = kubeCA }, false, true, false},
		{"service account key", func(c *v1alpha1.Config) {
			c.ClusterConfig.ClusterServiceAccount = &x509.PEMEncodedKey{Key: kubeCA.Key}
		}, false, true, false},
		{"secretbox encryption secret", func(c *v1alpha1.Config) {
			c.ClusterConfig.ClusterSecretboxEncryptionSecret = "c2VjcmV0Ym94LXNlY3JldGJveC1zZWNyZXRib3gtMzI="
		}, false, true, false},
		{"bootstrap token", func(c *v1alpha1.Config) { c.ClusterConfig.BootstrapToken = "abcdef.0123456789abcdef" }, false, false, true},
		{"Talos CA swapped", func(c *v1alpha1.Config) { c.MachineConfig.MachineCA = talosCA }, false, false, false},
		{"etcd CA (only by a reboot)", func(c *v1alpha1.Config) { c.ClusterConfig.EtcdConfig.RootCA = kubeCA }, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			after := want(mutated(t, cl.controlPlane, tc.change))
			require.True(t, after.controlPlane && after.kubelet)
			assert.Equal(t, tc.etcd, after.etcdKey != before.etcdKey, "etcdKey changes")
			assert.Equal(t, tc.cp, after.cpKey != before.cpKey, "cpKey changes")
			assert.Equal(t, tc.kubelet, after.kubeletKey != before.kubeletKey, "kubeletKey changes")
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
