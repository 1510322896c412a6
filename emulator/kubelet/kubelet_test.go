package kubelet_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/rezuscloud/rezuscloud/emulator/kubelet"
	"github.com/rezuscloud/rezuscloud/internal/kubetest"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// waitFor bounds every wait on the apiserver: generous, as tests share two
// cores with builds.
const waitFor = 30 * time.Second

// cluster is the shared apiserver as a test sees it.
type cluster struct {
	env   *kubetest.Env
	admin kubernetes.Interface
}

func newCluster(t *testing.T) *cluster {
	env := kubetest.Shared(t)
	admin, err := kubernetes.NewForConfig(env.AdminConfig)
	require.NoError(t, err)
	return &cluster{env: env, admin: admin}
}

// nodeClient authenticates as node name's kubelet.
func (c *cluster) nodeClient(t *testing.T, name string) kubernetes.Interface {
	cs, err := kubernetes.NewForConfig(c.env.ClientFor("system:node:"+name, "system:nodes"))
	require.NoError(t, err)
	return cs
}

// config is a kubelet config for node name with fast heartbeats, so a test
// sees several in seconds.
func (c *cluster) config(t *testing.T, name, address string) kubelet.Config {
	return kubelet.Config{
		NodeName:      name,
		Address:       address,
		Client:        c.nodeClient(t, name),
		Version:       "v1.36.1",
		LeaseDuration: 4 * time.Second,
		StatusEvery:   time.Second,
		Logf:          func(format string, args ...any) { t.Logf(name+": "+format, args...) },
	}
}

// running is a Kubelet whose Run goroutine a test started.
type running struct {
	*kubelet.Kubelet
	cancel context.CancelFunc
	done   chan error
}

// start runs a Kubelet for cfg until the test ends (or stop).
func start(t *testing.T, cfg kubelet.Config) *running {
	k, err := kubelet.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Kubelet: k, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- k.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop ends Run and checks that it returned and left no goroutine behind.
func (r *running) stop(t *testing.T) {
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			require.NoError(t, err)
			close(r.done)
		}
	case <-time.After(waitFor):
		t.Fatal("Run did not return after its context ended")
	}
	requireNoKubeletGoroutines(t)
}

// requireNoKubeletGoroutines fails unless every goroutine of a Kubelet (its
// loops and its pod informer's reflector) is gone. Tests here run one after
// another, so any such goroutine is a leak.
func requireNoKubeletGoroutines(t *testing.T) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(stacks, "\n\n") {
			for _, leak := range []string{"/emulator/kubelet.", "k8s.io/client-go/tools/cache.(*Reflector)"} {
				assert.NotContains(c, g, leak)
			}
		}
	}, 5*time.Second, 50*time.Millisecond)
}

func readyCondition(n *corev1.Node) corev1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c
		}
	}
	return corev1.NodeCondition{}
}

func TestKubeletRegistersNodeRenewsLeaseAndShutsDown(t *testing.T) {
	c := newCluster(t)
	ctx := t.Context()
	cfg := c.config(t, "reg-1", "10.5.0.11")
	cfg.ProviderID = "rezuscloud://acme/reg-1" // --provider-id, through the Node authorizer and NodeRestriction
	k := start(t, cfg)

	var node *corev1.Node
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var err error
		node, err = c.admin.CoreV1().Nodes().Get(ctx, "reg-1", metav1.GetOptions{})
		require.NoError(ct, err)
		assert.Equal(ct, corev1.ConditionTrue, readyCondition(node).Status)
	}, waitFor, 100*time.Millisecond)
	assert.Equal(t, "v1.36.1", node.Status.NodeInfo.KubeletVersion)
	assert.Equal(t, kubelet.DefaultOSImage, node.Status.NodeInfo.OSImage)
	assert.Equal(t, runtime.GOARCH, node.Status.NodeInfo.Architecture)
	assert.Equal(t, []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.5.0.11"}, {Type: corev1.NodeHostName, Address: "reg-1"}}, node.Status.Addresses)
	assert.True(t, resource.MustParse("4").Equal(node.Status.Capacity[corev1.ResourceCPU]))
	assert.True(t, resource.MustParse("110").Equal(node.Status.Allocatable[corev1.ResourcePods]))
	assert.Equal(t, "reg-1", node.Labels[corev1.LabelHostname])
	assert.Equal(t, "linux", node.Labels[corev1.LabelOSStable])
	assert.NotContains(t, node.Labels, "node-role.kubernetes.io/control-plane")
	assert.EqualValues(t, 10250, node.Status.DaemonEndpoints.KubeletEndpoint.Port)
	assert.Equal(t, "rezuscloud://acme/reg-1", node.Spec.ProviderID)

	var first *coordinationv1.Lease
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var err error
		first, err = c.admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "reg-1", metav1.GetOptions{})
		require.NoError(ct, err)
	}, waitFor, 100*time.Millisecond)
	assert.Equal(t, "reg-1", *first.Spec.HolderIdentity)
	assert.EqualValues(t, 4, *first.Spec.LeaseDurationSeconds)
	require.Len(t, first.OwnerReferences, 1)
	assert.Equal(t, node.UID, first.OwnerReferences[0].UID)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		l, err := c.admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "reg-1", metav1.GetOptions{})
		require.NoError(ct, err)
		assert.True(ct, l.Spec.RenewTime.After(first.Spec.RenewTime.Time), "the lease is renewed")
	}, waitFor, 100*time.Millisecond)

	k.Shutdown(ctx)
	select {
	case err := <-k.done:
		require.NoError(t, err)
		close(k.done)
	case <-time.After(waitFor):
		t.Fatal("Run did not return after Shutdown")
	}
	node, err := c.admin.CoreV1().Nodes().Get(ctx, "reg-1", metav1.GetOptions{})
	require.NoError(t, err)
	ready := readyCondition(node)
	assert.Equal(t, corev1.ConditionFalse, ready.Status)
	assert.Equal(t, "KubeletNotReady", ready.Reason)
	assert.Equal(t, "node is shutting down", ready.Message)

	// A reboot: a new Kubelet for the same node adopts its Node.
	start(t, c.config(t, "reg-1", "10.5.0.11"))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		n, err := c.admin.CoreV1().Nodes().Get(ctx, "reg-1", metav1.GetOptions{})
		require.NoError(ct, err)
		assert.Equal(ct, node.UID, n.UID)
		assert.Equal(ct, corev1.ConditionTrue, readyCondition(n).Status)
		assert.NotEqual(ct, node.Status.NodeInfo.BootID, n.Status.NodeInfo.BootID, "a reboot is a new boot")
	}, waitFor, 100*time.Millisecond)
}

func TestCordonSurvivesHeartbeats(t *testing.T) {
	c := newCluster(t)
	ctx := t.Context()
	start(t, c.config(t, "cordon-1", "10.5.0.12"))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		n, err := c.admin.CoreV1().Nodes().Get(ctx, "cordon-1", metav1.GetOptions{})
		require.NoError(ct, err)
		assert.Equal(ct, corev1.ConditionTrue, readyCondition(n).Status)
	}, waitFor, 100*time.Millisecond)

	// kubectl cordon
	n, err := c.admin.CoreV1().Nodes().Patch(ctx, "cordon-1", types.StrategicMergePatchType,
		[]byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	cordoned := readyCondition(n).LastHeartbeatTime

	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		n, err := c.admin.CoreV1().Nodes().Get(ctx, "cordon-1", metav1.GetOptions{})
		require.NoError(ct, err)
		assert.True(ct, readyCondition(n).LastHeartbeatTime.After(cordoned.Add(time.Second)), "two heartbeats since the cordon")
	}, waitFor, 100*time.Millisecond)
	n, err = c.admin.CoreV1().Nodes().Get(ctx, "cordon-1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, n.Spec.Unschedulable, "the kubelet's heartbeats keep the cordon")
}
