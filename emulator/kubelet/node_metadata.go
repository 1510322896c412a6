package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// ApplyNodeMetadata is what Talos's machined does for a node with admin
// credentials once its Node exists (its k8s.NodeApplyController): it sets
// machine.nodeLabels and machine.nodeTaints, plus, on a control plane, the
// node-role.kubernetes.io/control-plane label and, unless
// allowSchedulingOnControlPlanes, that key's NoSchedule taint.
//
// Like Talos it manages only what it owns, recorded on the Node in the
// talos.dev/owned-labels and talos.dev/owned-taints annotations: a key it
// owned and no longer wants is removed, a key someone else set with another
// value is left alone, and nothing else on the Node is touched. It patches
// with the Node's resourceVersion and retries on a conflict.
func ApplyNodeMetadata(ctx context.Context, admin kubernetes.Interface, node string, labels map[string]string,
	taints []corev1.Taint, controlPlane, allowSchedulingOnControlPlanes bool,
) error {
	labels, taints = withRole(labels, taints, controlPlane, allowSchedulingOnControlPlanes)

	nodes := admin.CoreV1().Nodes()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}

		cur := nodeMetadata{Labels: n.Labels, Annotations: n.Annotations, Taints: n.Spec.Taints}
		next, err := decideNodeMetadata(cur, labels, taints)
		if err != nil {
			return fmt.Errorf("node %s: %w", node, err)
		}
		patch, err := metadataPatch(n.ResourceVersion, cur, next)
		if err != nil || patch == nil {
			return err
		}

		_, err = nodes.Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}

// withRole adds to a machine config's labels and taints what Talos adds for
// a control plane.
func withRole(labels map[string]string, taints []corev1.Taint, controlPlane, allowScheduling bool) (map[string]string, []corev1.Taint) {
	labels = maps.Clone(labels)
	if labels == nil {
		labels = map[string]string{}
	}
	taints = slices.Clone(taints)
	if controlPlane {
		labels[constants.LabelNodeRoleControlPlane] = ""
		if !allowScheduling {
			taints = append(taints, corev1.Taint{Key: constants.LabelNodeRoleControlPlane, Effect: corev1.TaintEffectNoSchedule})
		}
	}
	return labels, taints
}

// nodeMetadata is the part of a Node that ApplyNodeMetadata manages.
type nodeMetadata struct {
	Labels      map[string]string
	Annotations map[string]string
	Taints      []corev1.Taint
}

// decideNodeMetadata returns cur with labels and taints applied as Talos's
// NodeApplyController applies them. A label (a taint, by key) is taken over
// when absent or already as wanted, updated when owned, and left alone when
// someone else set it otherwise; an owned one no longer wanted is removed.
// The owned keys are recorded, sorted, in the owned-labels and owned-taints
// annotations (absent when none). cur is not modified.
func decideNodeMetadata(cur nodeMetadata, labels map[string]string, taints []corev1.Taint) (nodeMetadata, error) {
	ownedLabels, err := ownedKeys(cur.Annotations, constants.AnnotationOwnedLabels)
	if err != nil {
		return nodeMetadata{}, err
	}
	ownedTaints, err := ownedKeys(cur.Annotations, constants.AnnotationOwnedTaints)
	if err != nil {
		return nodeMetadata{}, err
	}
	next := nodeMetadata{Labels: maps.Clone(cur.Labels), Annotations: maps.Clone(cur.Annotations), Taints: slices.Clone(cur.Taints)}
	if next.Labels == nil {
		next.Labels = map[string]string{}
	}
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}

	for key, value := range labels {
		have, exists := next.Labels[key]
		switch {
		case !exists || have == value:
			next.Labels[key] = value
			ownedLabels[key] = true
		case ownedLabels[key]:
			next.Labels[key] = value
		}
	}
	for key := range ownedLabels {
		if _, wanted := labels[key]; !wanted {
			delete(next.Labels, key)
			delete(ownedLabels, key)
		}
	}

	for _, want := range taints {
		i := slices.IndexFunc(next.Taints, func(t corev1.Taint) bool { return t.Key == want.Key })
		switch {
		case i < 0:
			next.Taints = append(next.Taints, corev1.Taint{Key: want.Key, Value: want.Value, Effect: want.Effect})
			ownedTaints[want.Key] = true
		case ownedTaints[want.Key]:
			next.Taints[i].Value, next.Taints[i].Effect = want.Value, want.Effect
		case next.Taints[i].Value == want.Value && next.Taints[i].Effect == want.Effect:
			ownedTaints[want.Key] = true
		}
	}
	next.Taints = slices.DeleteFunc(next.Taints, func(t corev1.Taint) bool {
		if !ownedTaints[t.Key] || slices.ContainsFunc(taints, func(w corev1.Taint) bool { return w.Key == t.Key }) {
			return false
		}
		delete(ownedTaints, t.Key)
		return true
	})

	if err := setOwnedKeys(next.Annotations, constants.AnnotationOwnedLabels, ownedLabels); err != nil {
		return nodeMetadata{}, err
	}
	if err := setOwnedKeys(next.Annotations, constants.AnnotationOwnedTaints, ownedTaints); err != nil {
		return nodeMetadata{}, err
	}
	return next, nil
}

// ownedKeys reads an owned-keys annotation, a JSON list of keys.
func ownedKeys(annotations map[string]string, name string) (map[string]bool, error) {
	owned := map[string]bool{}
	raw, ok := annotations[name]
	if !ok || raw == "" {
		return owned, nil
	}
	var keys []string
	if err := json.Unmarshal([]byte(raw), &keys); err != nil {
		return nil, fmt.Errorf("reading annotation %s: %w", name, err)
	}
	for _, k := range keys {
		owned[k] = true
	}
	return owned, nil
}

func setOwnedKeys(annotations map[string]string, name string, owned map[string]bool) error {
	if len(owned) == 0 {
		delete(annotations, name)
		return nil
	}
	b, err := json.Marshal(slices.Sorted(maps.Keys(owned)))
	if err != nil {
		return err
	}
	annotations[name] = string(b)
	return nil
}

// metadataPatch is the JSON merge patch from cur to next, nil when they do
// not differ. It carries resourceVersion, so it fails with a conflict if the
// Node changed since cur was read: the decision was made on what was read.
func metadataPatch(resourceVersion string, cur, next nodeMetadata) ([]byte, error) {
	meta := map[string]any{}
	if d := mapDiff(cur.Labels, next.Labels); len(d) > 0 {
		meta["labels"] = d
	}
	if d := mapDiff(cur.Annotations, next.Annotations); len(d) > 0 {
		meta["annotations"] = d
	}
	patch := map[string]any{}
	if !equality.Semantic.DeepEqual(cur.Taints, next.Taints) && (len(cur.Taints) > 0 || len(next.Taints) > 0) {
		// A merge patch replaces a list whole.
		patch["spec"] = map[string]any{"taints": next.Taints}
	}
	if len(meta) == 0 && len(patch) == 0 {
		return nil, nil
	}
	meta["resourceVersion"] = resourceVersion
	patch["metadata"] = meta
	return json.Marshal(patch)
}

// mapDiff is the merge patch of a string map: changed keys with their value,
// removed keys with null.
func mapDiff(cur, next map[string]string) map[string]*string {
	d := map[string]*string{}
	for k, v := range next {
		if old, ok := cur[k]; !ok || old != v {
			d[k] = ptr(v)
		}
	}
	for k := range cur {
		if _, ok := next[k]; !ok {
			d[k] = nil
		}
	}
	return d
}
