package kubelet_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rezuscloud/rezuscloud/emulator/kubelet"
)

// namespace creates a namespace with its default service account, which the
// ServiceAccount admission plugin requires of a pod and which no controller
// manager creates here.
func (c *cluster) namespace(t *testing.T, name string) {
	ctx := t.Context()
	_, err := c.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.admin.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// pod creates a pod bound to node (no scheduler runs here).
func (c *cluster) pod(t *testing.T, ns, name, node string, labels map[string]string) *corev1.Pod {
	p, err := c.admin.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:       node,
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox:1.37"}},
			Containers:     []corev1.Container{{Name: "app", Image: "nginx:1.29"}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return p
}

// waitRunning waits until the kubelet reports pod running and ready.
func (c *cluster) waitRunning(t *testing.T, ns, name string) *corev1.Pod {
	var pod *corev1.Pod
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var err error
		pod, err = c.admin.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		require.NoError(ct, err)
		assert.Equal(ct, corev1.PodRunning, pod.Status.Phase)
		assert.True(ct, podReady(pod), "ready")
	}, waitFor, 100*time.Millisecond)
	return pod
}

// waitGone waits until pod is deleted for good and returns how long it took.
func (c *cluster) waitGone(t *testing.T, ns, name string) time.Duration {
	begin := time.Now()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := c.admin.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		assert.True(ct, apierrors.IsNotFound(err), "pod %s is gone (%v)", name, err)
	}, waitFor, 100*time.Millisecond)
	return time.Since(begin)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func TestPodsRunAndGoWhenDeletedOrEvicted(t *testing.T) {
	c := newCluster(t)
	ctx := t.Context()
	const node, ns = "pods-1", "pods"
	c.namespace(t, ns)
	start(t, c.config(t, node, "10.5.0.13"))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := c.admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		require.NoError(ct, err)
	}, waitFor, 100*time.Millisecond)
	// What the controller manager's node IPAM would do.
	_, err := c.admin.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"spec":{"podCIDR":"10.244.7.0/24","podCIDRs":["10.244.7.0/24"]}}`), metav1.PatchOptions{})
	require.NoError(t, err)

	t.Run("a bound pod runs with an IP of the node's pod CIDR", func(t *testing.T) {
		c.pod(t, ns, "web", node, nil)
		pod := c.waitRunning(t, ns, "web")
		ip, err := netip.ParseAddr(pod.Status.PodIP)
		require.NoError(t, err)
		assert.True(t, netip.MustParsePrefix("10.244.7.0/24").Contains(ip), "pod IP %s", ip)
		assert.Equal(t, "10.5.0.13", pod.Status.HostIP)
		require.Len(t, pod.Status.ContainerStatuses, 1)
		cs := pod.Status.ContainerStatuses[0]
		assert.Equal(t, "nginx:1.29", cs.Image)
		assert.True(t, cs.Ready)
		assert.NotNil(t, cs.State.Running)
		require.Len(t, pod.Status.InitContainerStatuses, 1)
		assert.Equal(t, "Completed", pod.Status.InitContainerStatuses[0].State.Terminated.Reason)
		assert.NotNil(t, pod.Status.StartTime)
	})

	t.Run("a deleted pod goes after its grace period, capped", func(t *testing.T) {
		require.NoError(t, c.admin.CoreV1().Pods(ns).Delete(ctx, "web", metav1.DeleteOptions{}))
		took := c.waitGone(t, ns, "web")
		assert.Less(t, took, 15*time.Second, "the 30s grace period is capped at %s", kubelet.DefaultMaxGrace)
	})

	t.Run("an eviction a PodDisruptionBudget forbids is refused", func(t *testing.T) {
		labels := map[string]string{"app": "db"}
		c.pod(t, ns, "db", node, labels)
		c.waitRunning(t, ns, "db")
		pdb, err := c.admin.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "db"},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MinAvailable: ptr(intstr.FromInt32(1)),
				Selector:     &metav1.LabelSelector{MatchLabels: labels},
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		// What the disruption controller would report: the one healthy
		// pod is the minimum.
		pdb.Status = policyv1.PodDisruptionBudgetStatus{
			ObservedGeneration: pdb.Generation, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1, DisruptionsAllowed: 0,
		}
		_, err = c.admin.PolicyV1().PodDisruptionBudgets(ns).UpdateStatus(ctx, pdb, metav1.UpdateOptions{})
		require.NoError(t, err)

		err = evict(ctx, c, ns, "db")
		require.Error(t, err)
		assert.True(t, apierrors.IsTooManyRequests(err), "429, got %v", err)
		_, err = c.admin.CoreV1().Pods(ns).Get(ctx, "db", metav1.GetOptions{})
		require.NoError(t, err, "the pod stays")

		require.NoError(t, c.admin.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "db", metav1.DeleteOptions{}))
		require.NoError(t, evict(ctx, c, ns, "db"))
		c.waitGone(t, ns, "db")
	})
}

func evict(ctx context.Context, c *cluster, ns, name string) error {
	return c.admin.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
}

func TestMirrorPodsOfStaticPods(t *testing.T) {
	c := newCluster(t)
	ctx := t.Context()
	const node = "cp-1"
	static := func(apiserver string) []kubelet.StaticPod {
		return []kubelet.StaticPod{
			{Name: "kube-apiserver", Image: "registry.k8s.io/kube-apiserver:" + apiserver},
			{Name: "kube-controller-manager", Image: "registry.k8s.io/kube-controller-manager:v1.35.4"},
			{Name: "kube-scheduler", Image: "registry.k8s.io/kube-scheduler:v1.35.4"},
		}
	}
	mirrors := func(ct *assert.CollectT) map[string]corev1.Pod {
		out := map[string]corev1.Pod{}
		for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			p, err := c.admin.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, name+"-"+node, metav1.GetOptions{})
			if !assert.NoError(ct, err) {
				continue
			}
			assert.Contains(ct, p.Annotations, corev1.MirrorPodAnnotationKey)
			assert.Equal(ct, corev1.PodRunning, p.Status.Phase)
			assert.True(ct, podReady(p))
			assert.Equal(ct, "10.5.0.14", p.Status.PodIP, "host network")
			out[name] = *p
		}
		return out
	}

	cfg := c.config(t, node, "10.5.0.14")
	cfg.StaticPods = static("v1.35.4")
	first := start(t, cfg)
	var before map[string]corev1.Pod
	require.EventuallyWithT(t, func(ct *assert.CollectT) { before = mirrors(ct) }, waitFor, 100*time.Millisecond)
	n, err := c.admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	require.NoError(t, err)
	owner := before["kube-apiserver"].OwnerReferences
	require.Len(t, owner, 1)
	assert.Equal(t, n.UID, owner[0].UID)

	// An upgrade of the apiserver: the node reboots with a new manifest.
	first.Shutdown(ctx)
	cfg = c.config(t, node, "10.5.0.14")
	cfg.StaticPods = static("v1.36.1")
	start(t, cfg)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		after := mirrors(ct)
		if !assert.Len(ct, after, 3) {
			return
		}
		assert.Equal(ct, "registry.k8s.io/kube-apiserver:v1.36.1", after["kube-apiserver"].Spec.Containers[0].Image)
		assert.NotEqual(ct, before["kube-apiserver"].UID, after["kube-apiserver"].UID, "replaced")
		assert.Equal(ct, before["kube-scheduler"].UID, after["kube-scheduler"].UID, "unchanged")
	}, waitFor, 100*time.Millisecond)
}

func ptr[T any](v T) *T { return &v }
