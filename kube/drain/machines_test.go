package drain

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/rezuscloud/rezuscloud/domain"
)

type clients struct{ cs kubernetes.Interface }

func (c clients) For(context.Context, string) (kubernetes.Interface, error) { return c.cs, nil }

// TestMachinesPolicy: every controller decides a machine's drain the same
// way, from the node group it finds in the read model (or by its name alone
// when the group is gone).
func TestMachinesPolicy(t *testing.T) {
	no := false
	groups := map[string]*domain.NodeGroup{
		"workers": {Spec: domain.NodeGroupSpec{}},
		"nodrain": {Spec: domain.NodeGroupSpec{Drain: &no}},
		"light":   {Spec: domain.NodeGroupSpec{}},
	}
	find := func(tenant, name string) (*domain.NodeGroup, bool) {
		ng, ok := groups[name]
		if ok {
			ng.Metadata = domain.ObjectMeta{Tenant: tenant, Name: name}
		}
		return ng, ok
	}
	skip := func(ng *domain.NodeGroup) string {
		if ng.Metadata.Name == "light" || ng.Metadata.Name == "gone-light" {
			return "its machines run no Kubernetes"
		}
		return ""
	}
	kube := clients{cs: fake.NewClientset()}
	tests := []struct {
		name   string
		ms     Machines
		group  string
		optOut string
		drain  bool
		why    string
	}{
		{"a group that drains", Machines{Kube: kube, Group: find, Skip: skip}, "workers", "", true, ""},
		{"no client", Machines{Group: find, Skip: skip}, "workers", "", false, "no Kubernetes client is configured"},
		{"the run opts out", Machines{Kube: kube, Group: find}, "workers", "the run says noDrain", false, "the run says noDrain"},
		{"drain: false", Machines{Kube: kube, Group: find}, "nodrain", "", false, "its node group says drain: false"},
		{"no Kubernetes on the group", Machines{Kube: kube, Group: find, Skip: skip}, "light", "", false, "its machines run no Kubernetes"},
		{"a group that is gone drains", Machines{Kube: kube, Group: find, Skip: skip}, "gone", "", true, ""},
		{"a gone group drains, whatever its name", Machines{Kube: kube, Group: find, Skip: skip}, "gone-light", "", true, ""},
		{"no read model", Machines{Kube: kube}, "workers", "", true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &domain.Machine{Spec: domain.MachineSpec{NodeGroup: tc.group}}
			p := tc.ms.Policy("acme", m, tc.optOut)
			require.Equal(t, tc.drain, p.Drain, p.Why)
			require.Equal(t, tc.why, p.Why)
			if p.Drain {
				require.Equal(t, domain.DefaultDrainTimeout, p.Timeout)
			}
		})
	}
	d, err := Machines{Kube: kube}.Drainer(context.Background(), "acme", nil)
	require.NoError(t, err)
	require.Same(t, kube.cs.(*fake.Clientset), d.Client.(*fake.Clientset))
}
