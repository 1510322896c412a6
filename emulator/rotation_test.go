package emulator

import (
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"encoding/base64"
	"testing"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rezuscloud/rezuscloud/emulator/kubecp"
)

// rotationNode is one machine a rotation walks: its address and the config
// it runs, which each stage changes.
type rotationNode struct {
	name, addr string
	worker     bool
	cfg        []byte
}

// applyStage gives every node its config changed by change, control planes
// first, with mode AUTO through tc, and requires each to be applied in
// place, as `talosctl rotate-ca` (mode NO_REBOOT) needs.
func applyStage(t *testing.T, tc *clientconfig.Config, nodes []*rotationNode, change func(n *rotationNode, c *v1alpha1.Config)) {
	t.Helper()
	for _, n := range nodes {
		n.cfg = mutated(t, n.cfg, func(c *v1alpha1.Config) { change(n, c) })
		resp, err := connect(t, tc, n.addr).ApplyConfiguration(callCtx(t),
			&machine.ApplyConfigurationRequest{Data: n.cfg, Mode: machine.ApplyConfigurationRequest_AUTO})
		require.NoError(t, err, n.name)
		require.Equal(t, machine.ApplyConfigurationRequest_NO_REBOOT, resp.GetMessages()[0].GetMode(), "%s: applied in place", n.name)
	}
}

// withoutCA is the accepted CAs but crt.
func withoutCA(cas []*x509.PEMEncodedCertificate, crt []byte) []*x509.PEMEncodedCertificate {
	var out []*x509.PEMEncodedCertificate
	for _, c := range cas {
		if certID(c.Crt) != certID(crt) {
			out = append(out, c)
		}
	}
	return out
}

// talosVersion calls Version on a fresh connection (a connection made
// before a stage keeps the TLS it was made with).
func talosVersion(t *testing.T, tc *clientconfig.Config, addr string) error {
	t.Helper()
	c, err := client.New(context.Background(), client.WithConfig(tc), client.WithEndpoints(addr))
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Version(callCtx(t))
	return err
}

// TestTalosCARotation walks the three stages of `talosctl rotate-ca` for
// the Talos CA on a control plane and a worker (light nodes): each stage is
// a config applied in place, after which the next connection sees the new
// trust and certificate. Accept: a client certificate of the new CA works.
// Swap: every node, the worker too (its certificate issued with the key of
// the control plane whose machine.ca is the new CA), serves a certificate
// of the new CA; old client certificates still work. Drop: they are refused.
func TestTalosCARotation(t *testing.T) {
	t.Parallel()
	em, _ := startEmulator(t, fastConfig(t.TempDir()))
	cl := newTestCluster(t, "talos-ca")
	cp := configuredNode(t, em, "cp-1", cl.controlPlane)
	w := configuredNode(t, em, "w-1", cl.worker)
	nodes := []*rotationNode{{name: "cp-1", addr: cp.Address, cfg: cl.controlPlane}, {name: "w-1", addr: w.Address, worker: true, cfg: cl.worker}}

	ctx := cl.admin.Contexts[cl.admin.Context]
	oldCA, err := base64.StdEncoding.DecodeString(ctx.CA)
	require.NoError(t, err)
	oldCrt, err := base64.StdEncoding.DecodeString(ctx.Crt)
	require.NoError(t, err)
	oldKey, err := base64.StdEncoding.DecodeString(ctx.Key)
	require.NoError(t, err)
	newCA := newCA(t, false)
	bundle := &secrets.Bundle{Clock: secrets.NewFixedClock(time.Now()), Certs: &secrets.Certs{OS: newCA}}
	newCert, err := bundle.GenerateTalosAPIClientCertificate(role.MakeSet(role.Admin))
	require.NoError(t, err)
	oldCert := &x509.PEMEncodedCertificateAndKey{Crt: oldCrt, Key: oldKey}
	// As talosctl rotate-ca: the intermediate client has the new client
	// certificate and still trusts the old server CA.
	intermediate := clientconfig.NewConfig("rotate", nil, oldCA, newCert)
	newest := clientconfig.NewConfig("rotate", nil, newCA.Crt, newCert)
	oldCertNewServer := clientconfig.NewConfig("rotate", nil, newCA.Crt, oldCert)

	applyStage(t, cl.admin, nodes, func(_ *rotationNode, c *v1alpha1.Config) {
		c.MachineConfig.MachineAcceptedCAs = append(c.MachineConfig.MachineAcceptedCAs, &x509.PEMEncodedCertificate{Crt: newCA.Crt})
	})
	for _, n := range nodes {
		require.NoError(t, talosVersion(t, intermediate, n.addr), "accept: %s takes a client certificate of the new CA", n.name)
		require.NoError(t, talosVersion(t, cl.admin, n.addr), "accept: %s still takes the old talosconfig", n.name)
	}

	applyStage(t, intermediate, nodes, func(n *rotationNode, c *v1alpha1.Config) {
		c.MachineConfig.MachineAcceptedCAs = append(withoutCA(c.MachineConfig.MachineAcceptedCAs, newCA.Crt), &x509.PEMEncodedCertificate{Crt: oldCA})
		c.MachineConfig.MachineCA = newCA
		if n.worker {
			c.MachineConfig.MachineCA = &x509.PEMEncodedCertificateAndKey{Crt: newCA.Crt}
		}
	})
	for _, n := range nodes {
		require.NoError(t, talosVersion(t, newest, n.addr), "swap: %s serves a certificate of the new CA", n.name)
		require.NoError(t, talosVersion(t, oldCertNewServer, n.addr), "swap: %s still takes an old client certificate", n.name)
		require.Error(t, talosVersion(t, cl.admin, n.addr), "swap: %s serves no certificate of the old CA", n.name)
	}

	applyStage(t, newest, nodes, func(_ *rotationNode, c *v1alpha1.Config) {
		c.MachineConfig.MachineAcceptedCAs = withoutCA(c.MachineConfig.MachineAcceptedCAs, oldCA)
	})
	for _, n := range nodes {
		require.NoError(t, talosVersion(t, newest, n.addr), "drop: %s takes the new talosconfig", n.name)
		require.Error(t, talosVersion(t, oldCertNewServer, n.addr), "drop: %s refuses an old client certificate", n.name)
	}
}

// kubeProbe lists kube-system's ConfigMaps through the cluster's endpoint
// as a system:masters user whose certificate issuer issued, trusting trust,
// on a connection of its own, closed after.
func kubeProbe(server string, trust []byte, issuer *x509.PEMEncodedCertificateAndKey) error {
	kc, err := kubecp.IssueClientKubeconfig(kubecp.CertAndKey{Cert: issuer.Crt, Key: issuer.Key}, trust, server, "rotation-probe", []string{"system:masters"}, time.Hour)
	if err != nil {
		return err
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		return err
	}
	rc.Timeout = 5 * time.Second
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	cs, err := kubernetes.NewForConfigAndClient(rc, hc)
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().ConfigMaps("kube-system").List(context.Background(), metav1.ListOptions{Limit: 1})
	return err
}

// servingIssuedBy says whether the API server at addr serves a certificate
// that ca's certificate verifies.
func servingIssuedBy(addr string, ca []byte) error {
	pool := stdx509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, ServerName: "localhost"})
	if err != nil {
		return err
	}
	return conn.Close()
}

// kubeletsRestarted waits until every node's kubelet runs with the PKI of
// its config (decideKube's key), then until each has renewed its Lease
// (every 10 s) and its Node is Ready: through the API server with its new
// credentials, as Talos's restarted kubelet.
func kubeletsRestarted(t *testing.T, em *Emulator, k kubernetes.Interface, names ...string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, name := range names {
			want := decideKube(em.kubeView(name))
			em.kube.mu.Lock()
			r := em.kube.runners[name]
			got := r != nil && r.kubelet && r.klKey == want.kubeletKey
			em.kube.mu.Unlock()
			assert.True(c, got, "%s's kubelet runs with its config's PKI", name)
		}
	}, 2*time.Minute, 50*time.Millisecond)
	since := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, name := range names {
			l, err := k.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), name, metav1.GetOptions{})
			if assert.NoError(c, err) && assert.NotNil(c, l.Spec.RenewTime) {
				assert.True(c, l.Spec.RenewTime.After(since), "%s's Lease renewed by its new kubelet", name)
			}
			n, err := k.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
			if assert.NoError(c, err) {
				assert.True(c, nodeReady(n), "%s Ready", name)
			}
		}
	}, time.Minute, 200*time.Millisecond)
}

// TestKubernetesCARotation walks the three stages of a Kubernetes CA
// rotation (`talosctl rotate-ca --kubernetes`) on a control plane and a
// worker by applying configs in place. The control plane restarts
// kube-apiserver, controller-manager and scheduler (not etcd) with the new
// PKI and every node restarts its kubelet. Accept: a client certificate of
// the new CA is taken, the old one still is. Swap: the API server serves a
// certificate of the new CA, both client certificates work, the kubelets
// work with their new certificates. Drop: an old-CA client certificate is
// refused (401), a new one works, the Nodes are Ready.
func TestKubernetesCARotation(t *testing.T) {
	t.Parallel()
	em := startKubeEmulator(t, fastConfig(t.TempDir()))
	cl, cp, w := bootstrappedKubeCluster(t, em, "kube-ca")
	k := kubeClient(t, em, "cp-1")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		nodes, err := k.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if assert.NoError(c, err) && assert.Len(c, nodes.Items, 2) {
			for _, n := range nodes.Items {
				assert.True(c, nodeReady(&n), "%s Ready", n.Name)
			}
		}
	}, 3*time.Minute, 200*time.Millisecond, "both Nodes register and are Ready")
	nodes := []*rotationNode{{name: "cp-1", addr: cp.Address, cfg: cl.controlPlane}, {name: "w-1", addr: w.Address, worker: true, cfg: cl.worker}}
	cfg, err := loadConfig(cl.controlPlane)
	require.NoError(t, err)
	oldCA := cfg.Cluster().IssuingCA()
	newCA := newCA(t, true)
	server := cfg.Cluster().Endpoint().String()
	apiAddr := endpointHostPort(cfg.Cluster().Endpoint())
	both := append(append([]byte(nil), oldCA.Crt...), newCA.Crt...)
	etcdPID := func() int {
		em.kube.mu.Lock()
		defer em.kube.mu.Unlock()
		for _, p := range em.kube.runners["cp-1"].cp.Processes() {
			if p.Name == "etcd" {
				return p.PID
			}
		}
		return 0
	}
	etcd := etcdPID()
	require.NotZero(t, etcd)
	start := time.Now()

	applyStage(t, cl.admin, nodes, func(_ *rotationNode, c *v1alpha1.Config) {
		c.ClusterConfig.ClusterAcceptedCAs = append(c.ClusterConfig.ClusterAcceptedCAs, &x509.PEMEncodedCertificate{Crt: newCA.Crt})
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, kubeProbe(server, oldCA.Crt, newCA), "a client certificate of the new CA")
	}, 2*time.Minute, 100*time.Millisecond, "accept: the API server takes the new CA's client certificates")
	require.NoError(t, kubeProbe(server, oldCA.Crt, oldCA), "accept: and still the old CA's")
	kubeletsRestarted(t, em, k, "cp-1", "w-1")
	t.Logf("accept: %s", time.Since(start).Round(time.Millisecond))

	applyStage(t, cl.admin, nodes, func(n *rotationNode, c *v1alpha1.Config) {
		c.ClusterConfig.ClusterAcceptedCAs = append(withoutCA(c.ClusterConfig.ClusterAcceptedCAs, newCA.Crt), &x509.PEMEncodedCertificate{Crt: oldCA.Crt})
		c.ClusterConfig.ClusterCA = newCA
		if n.worker {
			c.ClusterConfig.ClusterCA = &x509.PEMEncodedCertificateAndKey{Crt: newCA.Crt}
		}
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, servingIssuedBy(apiAddr, newCA.Crt))
	}, 2*time.Minute, 100*time.Millisecond, "swap: the API server serves a certificate of the new CA")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, kubeProbe(server, both, newCA), "new CA")
		assert.NoError(c, kubeProbe(server, both, oldCA), "old CA")
	}, time.Minute, 100*time.Millisecond, "swap: client certificates of both CAs work")
	k = kubeClient(t, em, "cp-1")
	kubeletsRestarted(t, em, k, "cp-1", "w-1")
	t.Logf("swap: %s", time.Since(start).Round(time.Millisecond))

	applyStage(t, cl.admin, nodes, func(_ *rotationNode, c *v1alpha1.Config) {
		c.ClusterConfig.ClusterAcceptedCAs = withoutCA(c.ClusterConfig.ClusterAcceptedCAs, oldCA.Crt)
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := kubeProbe(server, newCA.Crt, oldCA)
		assert.True(c, apierrors.IsUnauthorized(err), "an old-CA client certificate is refused: %v", err)
	}, 2*time.Minute, 100*time.Millisecond, "drop: the old CA is refused")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, kubeProbe(server, newCA.Crt, newCA))
	}, time.Minute, 100*time.Millisecond, "drop: the new CA's client certificates work")
	k = kubeClient(t, em, "cp-1")
	kubeletsRestarted(t, em, k, "cp-1", "w-1")
	t.Logf("drop: %s", time.Since(start).Round(time.Millisecond))

	require.Equal(t, etcd, etcdPID(), "etcd ran through the rotation")
}
