package kubecp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestBootstrapAndRestart runs one node's real control plane: etcd
// bootstraps, the apiserver serves with the certificates Talos would
// issue, the controller manager and the scheduler take their leases, and
// a restart on the same data dir keeps what was written.
func TestBootstrapAndRestart(t *testing.T) {
	bins := testBinaries(t, testKubeVersion)
	addr := freeAddress(t)
	cp, _ := testConfigs(t, "https://"+net.JoinHostPort(addr, "6443"))
	cfg := testConfig(t, cp, "cp-1", addr, bins)
	cfg.Bootstrap = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	n, took := startNode(t, cfg)
	t.Logf("started in %s", took.Round(time.Millisecond))
	require.NoError(t, n.Healthy(ctx))
	cs := clientset(t, n.AdminKubeconfig())
	v, err := cs.Discovery().ServerVersion()
	require.NoError(t, err)
	assert.Equal(t, testKubeVersion, v.GitVersion)

	_, err = cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kubecp"}, Data: map[string]string{"written": "before restart"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	got, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "kubecp", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "before restart", got.Data["written"])

	// The serving certificate is the kube CA's, for the node's address and
	// for the in-cluster name of the kubernetes Service.
	conn, err := tls.Dial("tcp", net.JoinHostPort(addr, "6443"), &tls.Config{RootCAs: pool(t, cfg.PKI.KubeCA.Cert), ServerName: addr})
	require.NoError(t, err)
	serving := conn.ConnectionState().PeerCertificates[0]
	_ = conn.Close()
	_, err = serving.Verify(x509.VerifyOptions{Roots: pool(t, cfg.PKI.KubeCA.Cert), DNSName: "kubernetes.default.svc"})
	require.NoError(t, err)

	// The controller manager and the scheduler run: each holds its lease.
	for _, name := range []string{"kube-controller-manager", "kube-scheduler"} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			l, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, name, metav1.GetOptions{})
			if !assert.NoError(c, err) {
				return
			}
			assert.True(c, holds(l), "lease %s has no holder", name)
		}, 2*time.Minute, 250*time.Millisecond, "lease %s", name)
	}

	procs := n.Processes()
	require.Len(t, procs, 4)
	// Memory once the controller manager and the scheduler lead.
	var total int
	for i, want := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		assert.Equal(t, want, procs[i].Name)
		require.NotZero(t, procs[i].PID)
		rss, err := rssKiB(procs[i].PID)
		require.NoError(t, err)
		total += rss
		t.Logf("%s %s pid %d: VmRSS %d MiB", procs[i].Name, procs[i].Version, procs[i].PID, rss>>10)
	}
	t.Logf("control plane VmRSS total: %d MiB", total>>10)
	assert.Equal(t, "v"+EtcdVersion, procs[0].Version)
	assert.Equal(t, testKubeVersion, procs[1].Version)

	// A restart on the same data: no bootstrap, no join. A client's watch
	// open on the API server does not hold its stop until SIGKILL (it did
	// for the whole stopGrace, at every Reissue of a watched API server).
	w, err := cs.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	defer w.Stop()
	stop := time.Now()
	n.Stop()
	stopped := time.Since(stop)
	t.Logf("stopped in %s", stopped.Round(time.Millisecond))
	assert.Less(t, stopped, stopGrace, "a watched kube-apiserver waited for SIGKILL")
	n.Stop()
	for _, p := range procs {
		assert.ErrorIs(t, syscall.Kill(p.PID, 0), syscall.ESRCH, "%s still runs", p.Name)
	}
	cfg.Bootstrap = false
	n, took = startNode(t, cfg)
	t.Logf("restarted in %s", took.Round(time.Millisecond))
	got, err = clientset(t, n.AdminKubeconfig()).CoreV1().ConfigMaps("default").Get(ctx, "kubecp", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "before restart", got.Data["written"])
}

// TestJoin adds a second control plane: it joins etcd as a learner, is
// promoted, serves what the first wrote, and leaves again.
func TestJoin(t *testing.T) {
	bins := testBinaries(t, testKubeVersion)
	addr1, addr2 := freeAddress(t), freeAddress(t)
	cp, _ := testConfigs(t, "https://"+net.JoinHostPort(addr1, "6443"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	cfg1 := testConfig(t, cp, "cp-1", addr1, bins)
	cfg1.Bootstrap = true
	n1, _ := startNode(t, cfg1)
	_, err := clientset(t, n1.AdminKubeconfig()).CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kubecp"}, Data: map[string]string{"written": "through cp-1"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	cfg2 := testConfig(t, cp, "cp-2", addr2, bins)
	cfg2.Join = []Member{n1.Member()}
	n2, took := startNode(t, cfg2)
	t.Logf("joined in %s", took.Round(time.Millisecond))

	cli, err := n1.Etcd(ctx)
	require.NoError(t, err)
	defer cli.Close()
	list, err := cli.MemberList(ctx)
	require.NoError(t, err)
	require.Len(t, list.Members, 2)
	for _, m := range list.Members {
		assert.False(t, m.IsLearner, "%s is still a learner", m.Name)
	}

	got, err := clientset(t, n2.AdminKubeconfig()).CoreV1().ConfigMaps("default").Get(ctx, "kubecp", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "through cp-1", got.Data["written"])

	// cp-2 leaves as a Talos reset does: its member is removed (with
	// MemberRemove) through cp-1 while its etcd still runs, since two
	// members down to one need both for the change.
	require.NoError(t, n2.Leave(ctx))
	require.NoError(t, MemberRemove(ctx, cli, "cp-2")) // safe twice
	list, err = cli.MemberList(ctx)
	require.NoError(t, err)
	require.Len(t, list.Members, 1)
	assert.Equal(t, "cp-1", list.Members[0].Name)
	require.NoError(t, n1.Healthy(ctx))
	require.ErrorContains(t, n1.Leave(ctx), "cp-1 is its last member")

	require.NoError(t, WipeData(cfg2.DataDir))
	assert.False(t, hasEtcdData(cfg2.DataDir))
}

func clientset(t *testing.T, kubeconfig []byte) *kubernetes.Clientset {
	t.Helper()
	rc, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	require.NoError(t, err)
	rc.Timeout = 15 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	require.NoError(t, err)
	return cs
}

func holds(l *coordinationv1.Lease) bool {
	return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != ""
}
