package configsync

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestProviderIDPatches(t *testing.T) {
	now := metav1.Now().Time
	machine := func(name, group, hostname string, deleting bool) domain.Machine {
		m := domain.Machine{}
		m.Metadata.Name = name
		m.Spec.NodeGroup, m.Spec.Hostname = group, hostname
		if deleting {
			m.Metadata.DeletionTimestamp = &now
		}
		return m
	}
	node := func(name, providerID string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: providerID}}
	}
	autoscaled := func(g string) bool { return g == "workers" }
	for _, tc := range []struct {
		name     string
		machines []domain.Machine
		nodes    []corev1.Node
		want     map[string]string
	}{
		{"a Node registered before its group autoscaled gets one",
			[]domain.Machine{machine("workers-0", "workers", "", false)}, []corev1.Node{node("workers-0", "")},
			map[string]string{"workers-0": "rezuscloud://acme/workers-0"}},
		{"by hostname",
			[]domain.Machine{machine("workers-1", "workers", "acme-w1", false)}, []corev1.Node{node("acme-w1", "")},
			map[string]string{"acme-w1": "rezuscloud://acme/workers-1"}},
		{"a Node that has one keeps it",
			[]domain.Machine{machine("workers-0", "workers", "", false)}, []corev1.Node{node("workers-0", "rezuscloud://acme/workers-0")},
			map[string]string{}},
		{"another provider's ID is never changed",
			[]domain.Machine{machine("workers-0", "workers", "", false)}, []corev1.Node{node("workers-0", "openstack:///abc")},
			map[string]string{}},
		{"groups that do not autoscale, control planes, machines going and unknown Nodes: nothing",
			[]domain.Machine{machine("fixed-0", "fixed", "", false), machine("cp-0", "cp", "", false), machine("workers-2", "workers", "", true)},
			[]corev1.Node{node("fixed-0", ""), node("cp-0", ""), node("workers-2", ""), node("stranger", "")},
			map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, providerIDPatches("acme", tc.machines, autoscaled, tc.nodes))
		})
	}
}
