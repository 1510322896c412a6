package kubelet_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rezuscloud/rezuscloud/emulator/kubelet"
)

func TestApplyNodeMetadataManagesOnlyWhatItOwns(t *testing.T) {
	c := newCluster(t)
	ctx := t.Context()
	const node = "meta-1"
	_, err := c.admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: node, Labels: map[string]string{corev1.LabelHostname: node},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)

	// The TaintNodesByCondition admission plugin taints a new Node not-ready
	// (the node lifecycle controller, not running here, lifts it): a taint
	// of someone else's from the start.
	notReady := corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}
	dedicated := corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}
	require.NoError(t, kubelet.ApplyNodeMetadata(ctx, c.admin, node,
		map[string]string{"topology.kubernetes.io/zone": "a", "rack": "r1"}, []corev1.Taint{dedicated}, true, false))
	n, err := c.admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		corev1.LabelHostname: node, "topology.kubernetes.io/zone": "a", "rack": "r1", "node-role.kubernetes.io/control-plane": "",
	}, n.Labels)
	assert.ElementsMatch(t, []corev1.Taint{notReady, dedicated, {Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}, n.Spec.Taints)
	assert.JSONEq(t, `["node-role.kubernetes.io/control-plane","rack","topology.kubernetes.io/zone"]`, n.Annotations["talos.dev/owned-labels"])

	// Someone else labels and taints the node.
	_, err = c.admin.CoreV1().Nodes().Patch(ctx, node, types.JSONPatchType, []byte(`[
		{"op": "add", "path": "/metadata/labels/team", "value": "storage"},
		{"op": "add", "path": "/spec/taints/-", "value": {"key": "maintenance", "effect": "NoExecute"}}
	]`), metav1.PatchOptions{})
	require.NoError(t, err)

	// The config drops rack and the dedicated taint, and now schedules on control planes.
	require.NoError(t, kubelet.ApplyNodeMetadata(ctx, c.admin, node,
		map[string]string{"topology.kubernetes.io/zone": "a"}, nil, true, true))
	n, err = c.admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		corev1.LabelHostname: node, "topology.kubernetes.io/zone": "a", "team": "storage", "node-role.kubernetes.io/control-plane": "",
	}, n.Labels)
	assert.Equal(t, []corev1.Taint{notReady, {Key: "maintenance", Effect: corev1.TaintEffectNoExecute}}, n.Spec.Taints,
		"the owned taints go, the others' stay")
	assert.NotContains(t, n.Annotations, "talos.dev/owned-taints")
}
