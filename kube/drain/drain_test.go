package drain

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeCluster is a fake API server with one node n1 whose pods are evicted
// at once (the eviction deletes the pod), but for the pods a budget holds.
func fakeCluster(t *testing.T, held map[string]bool, pods ...*corev1.Pod) *fake.Clientset {
	t.Helper()
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	for _, p := range pods {
		p.Spec.NodeName = "n1"
		_, err := cs.CoreV1().Pods(p.Namespace).Create(t.Context(), p, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		if held[ev.Name] {
			st := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
			st.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: "DisruptionBudget", Message: "The disruption budget web needs 2 healthy pods and has 2 currently"}}
			st.ErrStatus.Code = http.StatusTooManyRequests
			return true, nil, st
		}
		err := cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), ev.Namespace, ev.Name)
		return true, nil, err
	})
	return cs
}

func podOf(name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: k8stypes.UID("uid-" + name)}}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func daemonSetPod(p *corev1.Pod) {
	yes := true
	p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "ds", Controller: &yes}}
}

func mirrorPod(p *corev1.Pod) {
	p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
}

func TestDrainEvictsAllButDaemonSetAndMirrorPods(t *testing.T) {
	cs := fakeCluster(t, nil, podOf("web-1"), podOf("web-2"), podOf("ds-1", daemonSetPod), podOf("kube-apiserver-n1", mirrorPod))
	var progress []int
	d := &Drainer{Client: cs, Poll: time.Millisecond, Progress: func(left int) { progress = append(progress, left) }}
	require.NoError(t, d.Drain(t.Context(), "n1", time.Now(), Timeout(time.Minute)))
	n, err := cs.CoreV1().Nodes().Get(t.Context(), "n1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, n.Spec.Unschedulable, "cordoned")
	pods, err := cs.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	var left []string
	for _, p := range pods.Items {
		left = append(left, p.Name)
	}
	assert.ElementsMatch(t, []string{"ds-1", "kube-apiserver-n1"}, left)
	assert.Equal(t, []int{2, 0}, progress)

	require.NoError(t, d.Uncordon(t.Context(), "n1"))
	n, err = cs.CoreV1().Nodes().Get(t.Context(), "n1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.False(t, n.Spec.Unschedulable, "uncordoned")
}

func TestDrainBlockedByABudgetNamesIt(t *testing.T) {
	cs := fakeCluster(t, map[string]bool{"web-1": true}, podOf("web-1"), podOf("web-2"))
	start := time.Now()
	d := &Drainer{Client: cs, Poll: time.Millisecond}
	err := d.Drain(t.Context(), "n1", start, Timeout(50*time.Millisecond))
	var blocked *BlockedError
	require.ErrorAs(t, err, &blocked)
	assert.Equal(t, 1, blocked.Left, "web-2 went, web-1 is held")
	assert.Equal(t, "drain of n1 blocked: evicting default/web-1: The disruption budget web needs 2 healthy pods and has 2 currently", err.Error())
	n, err := cs.CoreV1().Nodes().Get(t.Context(), "n1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, n.Spec.Unschedulable, "left cordoned: the caller decides")
}

func TestDrainTimeoutCountsFromStarted(t *testing.T) {
	// A drain resumed after a restart keeps its first start: past the
	// timeout already, it answers blocked after one look.
	cs := fakeCluster(t, map[string]bool{"web-1": true}, podOf("web-1"))
	d := &Drainer{Client: cs, Poll: time.Hour}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err := d.Drain(ctx, "n1", time.Now().Add(-time.Hour), Timeout(time.Minute))
	var blocked *BlockedError
	require.ErrorAs(t, err, &blocked)
}

func TestDrainOfAnUnknownNode(t *testing.T) {
	cs := fake.NewClientset()
	d := &Drainer{Client: cs, Poll: time.Millisecond}
	err := d.Drain(t.Context(), "ghost", time.Now(), Timeout(time.Minute))
	require.True(t, errors.Is(err, ErrNoNode), "%v", err)
	require.NoError(t, d.Uncordon(t.Context(), "ghost"), "uncordoning a node that is gone is fine")
	require.NoError(t, d.Delete(t.Context(), "ghost"), "deleting a node that is gone is fine")
}

func TestWaitReady(t *testing.T) {
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Message: "rebooting"}}}})
	d := &Drainer{Client: cs, Poll: time.Millisecond}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	err := d.WaitReady(ctx, "n1")
	require.ErrorContains(t, err, "NotReady: rebooting")
	n, err := cs.CoreV1().Nodes().Get(t.Context(), "n1", metav1.GetOptions{})
	require.NoError(t, err)
	n.Status.Conditions[0].Status = corev1.ConditionTrue
	_, err = cs.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, d.WaitReady(t.Context(), "n1"))
	require.ErrorIs(t, d.WaitReady(t.Context(), "ghost"), ErrNoNode)
}
