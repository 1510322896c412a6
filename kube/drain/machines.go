package drain

import (
	"context"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Clients gives a tenant's Kubernetes client (a *kubeclient.Clients).
type Clients interface {
	For(ctx context.Context, tenant string) (kubernetes.Interface, error)
}

// Machines is how a controller drains its tenants' machines, the same for
// every controller that disrupts one (the upgrade saga, the config
// controller, the apply worker): the policy from the machine's node group,
// and a Drainer of the tenant's cluster. The zero value drains nothing.
type Machines struct {
	// Kube reaches the tenants' clusters; nil: nothing is drained.
	Kube Clients
	// Group finds a tenant's node group in the read model.
	Group func(tenant, name string) (*domain.NodeGroup, bool)
	// Skip says why a node group's machines run no Kubernetes to drain
	// ("" when they do); nil: every group's machines do.
	Skip func(*domain.NodeGroup) string
	// Poll and Now are the Drainer's.
	Poll time.Duration
	Now  func() time.Time
}

// Policy decides the drain of machine m of tenant by its node group; a
// group that is gone is asked about by its name alone (and drained for the
// default timeout). optOut, when not "", says how the run opts out.
func (ms Machines) Policy(tenant string, m *domain.Machine, optOut string) Policy {
	var spec *domain.NodeGroupSpec
	ng, ok := (*domain.NodeGroup)(nil), false
	if ms.Group != nil {
		ng, ok = ms.Group(tenant, m.Spec.NodeGroup)
	}
	if ok {
		spec = &ng.Spec
	} else {
		ng = &domain.NodeGroup{Metadata: domain.ObjectMeta{Tenant: tenant, Name: m.Spec.NodeGroup}}
	}
	return Decide(ms.Kube != nil, optOut, spec, ms.SkipOf(ng))
}

// SkipOf says why ng's machines run no Kubernetes ("" when they do).
func (ms Machines) SkipOf(ng *domain.NodeGroup) string {
	if ms.Skip == nil {
		return ""
	}
	return ms.Skip(ng)
}

// Drainer is a Drainer of tenant's cluster; progress, when not nil, is
// told how many pods are left.
func (ms Machines) Drainer(ctx context.Context, tenant string, progress func(left int)) (*Drainer, error) {
	cs, err := ms.Kube.For(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return &Drainer{Client: cs, Poll: ms.Poll, Now: ms.Now, Progress: progress}, nil
}
