package emulator

import (
	"testing"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
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

// mutated is a config changed as `talosctl rotate-ca` changes one: on its
// v1alpha1 document, then encoded again.
func mutated(t testing.TB, base []byte, change func(*v1alpha1.Config)) []byte {
	t.Helper()
	cfg, err := loadConfig(base)
	require.NoError(t, err)
	c := cfg.RawV1Alpha1().DeepCopy()
	change(c)
	b, err := encoder.NewEncoder(c, encoder.WithComments(encoder.CommentsDisabled)).Encode()
	require.NoError(t, err)
	return b
}

// newCA is a CA as Talos's secrets bundle makes the Talos (kubernetes:
// false) or the Kubernetes one.
func newCA(t testing.TB, kubernetes bool) *x509.PEMEncodedCertificateAndKey {
	t.Helper()
	var (
		ca  *x509.CertificateAuthority
		err error
	)
	if kubernetes {
		ca, err = secrets.NewKubernetesCA(time.Now(), config.TalosVersionCurrent)
	} else {
		ca, err = secrets.NewTalosCA(time.Now())
	}
	require.NoError(t, err)
	return &x509.PEMEncodedCertificateAndKey{Crt: ca.CrtPEM, Key: ca.KeyPEM}
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
	talosCA, kubeCA := newCA(t, false), newCA(t, true)
	change := func(f func(*v1alpha1.Config)) []byte { return mutated(t, cl.controlPlane, f) }
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
		{"Talos CA accepted", change(func(c *v1alpha1.Config) {
			c.MachineConfig.MachineAcceptedCAs = append(c.MachineConfig.MachineAcceptedCAs, &x509.PEMEncodedCertificate{Crt: talosCA.Crt})
		}), false},
		{"Talos CA swapped", change(func(c *v1alpha1.Config) {
			c.MachineConfig.MachineAcceptedCAs = []*x509.PEMEncodedCertificate{{Crt: c.MachineConfig.MachineCA.Crt}}
			c.MachineConfig.MachineCA = talosCA
		}), false},
		{"machine token", change(func(c *v1alpha1.Config) { c.MachineConfig.MachineToken = "abcdef.0123456789abcdef" }), false},
		{"Kubernetes CA accepted", change(func(c *v1alpha1.Config) {
			c.ClusterConfig.ClusterAcceptedCAs = append(c.ClusterConfig.ClusterAcceptedCAs, &x509.PEMEncodedCertificate{Crt: kubeCA.Crt})
		}), false},
		{"Kubernetes CA swapped", change(func(c *v1alpha1.Config) {
			c.ClusterConfig.ClusterAcceptedCAs = []*x509.PEMEncodedCertificate{{Crt: c.ClusterConfig.ClusterCA.Crt}}
			c.ClusterConfig.ClusterCA = kubeCA
		}), false},
		{"aggregator CA", change(func(c *v1alpha1.Config) { c.ClusterConfig.ClusterAggregatorCA = kubeCA }), false},
		{"service account key", change(func(c *v1alpha1.Config) {
			c.ClusterConfig.ClusterServiceAccount = &x509.PEMEncodedKey{Key: kubeCA.Key}
		}), false},
		{"bootstrap token", change(func(c *v1alpha1.Config) { c.ClusterConfig.BootstrapToken = "abcdef.0123456789abcdef" }), false},
		{"secretbox and aescbc encryption secrets", change(func(c *v1alpha1.Config) {
			c.ClusterConfig.ClusterSecretboxEncryptionSecret = "c2VjcmV0Ym94LXNlY3JldGJveC1zZWNyZXRib3gtMzI="
			c.ClusterConfig.ClusterAESCBCEncryptionSecret = "YWVzY2JjLWFlc2NiYy1hZXNjYmMtYWVzY2JjLTMyYiE="
		}), false},
		{"etcd CA (Talos cannot rotate it)", change(func(c *v1alpha1.Config) { c.ClusterConfig.EtcdConfig.RootCA = kubeCA }), true},
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
