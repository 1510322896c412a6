package kubelet

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

const (
	ownedLabels = "talos.dev/owned-labels"
	ownedTaints = "talos.dev/owned-taints"
	cpRole      = "node-role.kubernetes.io/control-plane"
)

func taint(key, value string, effect corev1.TaintEffect) corev1.Taint {
	return corev1.Taint{Key: key, Value: value, Effect: effect}
}

func TestDecideNodeMetadata(t *testing.T) {
	hostname := map[string]string{corev1.LabelHostname: "n1"}
	for _, tc := range []struct {
		name   string
		cur    nodeMetadata
		labels map[string]string
		taints []corev1.Taint
		want   nodeMetadata
	}{
		{
			name:   "a fresh node gets and owns every label and taint",
			cur:    nodeMetadata{Labels: hostname},
			labels: map[string]string{"zone": "a", cpRole: ""},
			taints: []corev1.Taint{taint(cpRole, "", corev1.TaintEffectNoSchedule)},
			want: nodeMetadata{
				Labels:      map[string]string{corev1.LabelHostname: "n1", "zone": "a", cpRole: ""},
				Annotations: map[string]string{ownedLabels: `["node-role.kubernetes.io/control-plane","zone"]`, ownedTaints: `["node-role.kubernetes.io/control-plane"]`},
				Taints:      []corev1.Taint{taint(cpRole, "", corev1.TaintEffectNoSchedule)},
			},
		},
		{
			name: "an owned label gone from the config is removed, another's stays",
			cur: nodeMetadata{
				Labels:      map[string]string{"zone": "a", "rack": "r1", "team": "x"},
				Annotations: map[string]string{ownedLabels: `["rack","zone"]`, "other": "kept"},
			},
			labels: map[string]string{"zone": "a"},
			want: nodeMetadata{
				Labels:      map[string]string{"zone": "a", "team": "x"},
				Annotations: map[string]string{ownedLabels: `["zone"]`, "other": "kept"},
			},
		},
		{
			name:   "an owned label takes the config's new value",
			cur:    nodeMetadata{Labels: map[string]string{"zone": "a"}, Annotations: map[string]string{ownedLabels: `["zone"]`}},
			labels: map[string]string{"zone": "b"},
			want:   nodeMetadata{Labels: map[string]string{"zone": "b"}, Annotations: map[string]string{ownedLabels: `["zone"]`}},
		},
		{
			name:   "a label someone else set otherwise is left alone and not owned",
			cur:    nodeMetadata{Labels: map[string]string{"zone": "theirs"}},
			labels: map[string]string{"zone": "a"},
			want:   nodeMetadata{Labels: map[string]string{"zone": "theirs"}, Annotations: map[string]string{}},
		},
		{
			name:   "a label someone else set as wanted is taken over",
			cur:    nodeMetadata{Labels: map[string]string{"zone": "a"}},
			labels: map[string]string{"zone": "a"},
			want:   nodeMetadata{Labels: map[string]string{"zone": "a"}, Annotations: map[string]string{ownedLabels: `["zone"]`}},
		},
		{
			name: "an owned taint gone from the config is removed, another's stays",
			cur: nodeMetadata{
				Labels:      map[string]string{},
				Annotations: map[string]string{ownedTaints: `["dedicated","node-role.kubernetes.io/control-plane"]`},
				Taints: []corev1.Taint{
					taint(cpRole, "", corev1.TaintEffectNoSchedule),
					taint(corev1.TaintNodeUnschedulable, "", corev1.TaintEffectNoSchedule),
					taint("dedicated", "db", corev1.TaintEffectNoSchedule),
				},
			},
			taints: []corev1.Taint{taint("dedicated", "db", corev1.TaintEffectNoSchedule)},
			want: nodeMetadata{
				Labels:      map[string]string{},
				Annotations: map[string]string{ownedTaints: `["dedicated"]`},
				Taints: []corev1.Taint{
					taint(corev1.TaintNodeUnschedulable, "", corev1.TaintEffectNoSchedule),
					taint("dedicated", "db", corev1.TaintEffectNoSchedule),
				},
			},
		},
		{
			name: "an owned taint takes the config's new value and effect; another's key is left alone",
			cur: nodeMetadata{
				Annotations: map[string]string{ownedTaints: `["dedicated"]`},
				Taints:      []corev1.Taint{taint("dedicated", "db", corev1.TaintEffectNoSchedule), taint("gpu", "theirs", corev1.TaintEffectNoSchedule)},
			},
			taints: []corev1.Taint{taint("dedicated", "web", corev1.TaintEffectNoExecute), taint("gpu", "ours", corev1.TaintEffectNoSchedule)},
			want: nodeMetadata{
				Labels:      map[string]string{},
				Annotations: map[string]string{ownedTaints: `["dedicated"]`},
				Taints:      []corev1.Taint{taint("dedicated", "web", corev1.TaintEffectNoExecute), taint("gpu", "theirs", corev1.TaintEffectNoSchedule)},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decideNodeMetadata(tc.cur, tc.labels, tc.taints)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)

			again, err := decideNodeMetadata(got, tc.labels, tc.taints)
			require.NoError(t, err)
			patch, err := metadataPatch("1", got, again)
			require.NoError(t, err)
			assert.Nil(t, patch, "a second apply changes nothing")
		})
	}
}

func TestDecideNodeMetadataRefusesAMalformedAnnotation(t *testing.T) {
	_, err := decideNodeMetadata(nodeMetadata{Annotations: map[string]string{ownedLabels: "zone"}}, nil, nil)
	assert.ErrorContains(t, err, ownedLabels)
}

func TestMetadataPatch(t *testing.T) {
	cur := nodeMetadata{Labels: map[string]string{"a": "1", "gone": "x"}, Taints: []corev1.Taint{taint("t", "", corev1.TaintEffectNoSchedule)}}
	next := nodeMetadata{Labels: map[string]string{"a": "2"}, Annotations: map[string]string{ownedLabels: `["a"]`}}
	patch, err := metadataPatch("42", cur, next)
	require.NoError(t, err)
	assert.JSONEq(t, `{
		"metadata": {"resourceVersion": "42", "labels": {"a": "2", "gone": null}, "annotations": {"talos.dev/owned-labels": "[\"a\"]"}},
		"spec": {"taints": null}
	}`, string(patch))
}

func TestWithRole(t *testing.T) {
	cfgLabels := map[string]string{"zone": "a"}
	for _, tc := range []struct {
		name                  string
		controlPlane, allowCP bool
		wantLabels            map[string]string
		wantTaints            []corev1.Taint
	}{
		{"worker", false, false, map[string]string{"zone": "a"}, nil},
		{"control plane", true, false, map[string]string{"zone": "a", cpRole: ""}, []corev1.Taint{taint(cpRole, "", corev1.TaintEffectNoSchedule)}},
		{"control plane scheduling workloads", true, true, map[string]string{"zone": "a", cpRole: ""}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			labels, taints := withRole(cfgLabels, nil, tc.controlPlane, tc.allowCP)
			assert.Equal(t, tc.wantLabels, labels)
			assert.Equal(t, tc.wantTaints, taints)
		})
	}
	assert.Equal(t, map[string]string{"zone": "a"}, cfgLabels, "the config's map is not modified")
}
