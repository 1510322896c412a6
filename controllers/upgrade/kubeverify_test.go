package upgrade

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/rezuscloud/rezuscloud/domain"
)

// fakeKube is a tenant's cluster: a fake clientset and the versions the API
// servers answer by address.
type fakeKube struct {
	cs       kubernetes.Interface
	versions map[string]string
}

func (f fakeKube) For(context.Context, string) (kubernetes.Interface, error) { return f.cs, nil }

func (f fakeKube) ServerVersionAt(_ context.Context, _, address string) (string, error) {
	v, ok := f.versions[address]
	if !ok {
		return "", errors.New("connection refused")
	}
	return v, nil
}

func TestKubeVersionProblem(t *testing.T) {
	node := func(name, kubelet string, ready corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: kubelet},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Message: "kubelet is restarting"}}}}
	}
	cp := &domain.Machine{Metadata: domain.ObjectMeta{Name: "cp-1"}, Spec: domain.MachineSpec{Role: domain.RoleControlPlane, Address: "10.0.0.11", Hostname: "cp-1"}}
	w := &domain.Machine{Metadata: domain.ObjectMeta{Name: "w-1"}, Spec: domain.MachineSpec{Role: domain.RoleWorker, Address: "10.0.0.21", Hostname: "w-1"}}
	for _, tc := range []struct {
		name     string
		m        *domain.Machine
		nodes    []*corev1.Node
		versions map[string]string
		noKube   bool
		want     string
	}{
		{name: "worker on the target", m: w, nodes: []*corev1.Node{node("w-1", "v1.36.1", corev1.ConditionTrue)}},
		{name: "worker's kubelet still old", m: w, nodes: []*corev1.Node{node("w-1", "v1.35.4", corev1.ConditionTrue)},
			want: "its Node w-1 reports kubelet v1.35.4, not v1.36.1"},
		{name: "worker's Node NotReady", m: w, nodes: []*corev1.Node{node("w-1", "v1.36.1", corev1.ConditionFalse)},
			want: "its Node w-1 is NotReady: kubelet is restarting"},
		{name: "worker without a Node", m: w, want: `reading its Node w-1: nodes "w-1" not found`},
		{name: "control plane on the target", m: cp, nodes: []*corev1.Node{node("cp-1", "v1.36.1", corev1.ConditionTrue)},
			versions: map[string]string{"10.0.0.11": "v1.36.1"}},
		{name: "control plane's API server still old", m: cp, nodes: []*corev1.Node{node("cp-1", "v1.36.1", corev1.ConditionTrue)},
			versions: map[string]string{"10.0.0.11": "v1.35.4"}, want: "its API server answers v1.35.4, not v1.36.1"},
		{name: "control plane's API server away", m: cp, nodes: []*corev1.Node{node("cp-1", "v1.36.1", corev1.ConditionTrue)},
			want: "its API server does not answer /version: connection refused"},
		{name: "no Kubernetes to ask", m: w, noKube: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			for _, n := range tc.nodes {
				_, err := cs.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{})
				assert.NoError(t, err)
			}
			cfg := Config{Kube: fakeKube{cs: cs, versions: tc.versions}}
			if tc.noKube {
				cfg.Kube = nil
			}
			r := &upgradeRun{s: &Saga{cfg: cfg}, ref: domain.Ref{Tenant: "acme", Name: "k"}}
			assert.Equal(t, tc.want, r.kubeVersionProblem(t.Context(), tc.m, "1.36.1"))
		})
	}
}
