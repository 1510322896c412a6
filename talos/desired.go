package talos

import (
	"context"
	"fmt"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
)

// Desired is what a tenant's machines should hold: the inputs every machine
// config of the tenant is rendered from (tenant, node groups, patches, PKI,
// endpoint), loaded once from the read model. The day-2 config controller and
// the Kubernetes upgrade run render through it, so they agree byte for byte
// (and with the config-hash annotation) on what a machine's config is.
type Desired struct {
	view   *tenantView
	groups map[string]*domain.NodeGroup
}

// Desired loads a tenant's render inputs.
func (s *Service) Desired(ctx context.Context, tenant string) (*Desired, error) {
	v, err := s.load(ctx, tenant)
	if err != nil {
		return nil, err
	}
	// Only the groups the machines name: the work follows the machines, not
	// the node groups a tenant declares without machines yet.
	d := &Desired{view: v, groups: map[string]*domain.NodeGroup{}}
	for _, m := range v.machines {
		name := m.Spec.NodeGroup
		if _, seen := d.groups[name]; seen || name == "" {
			continue
		}
		ng, ok, err := projections.Get[domain.NodeGroup](s.cache, domain.Ref{Kind: domain.NodeGroupKind.Kind, Tenant: tenant, Name: name})
		if err != nil {
			return nil, err
		}
		if ok {
			d.groups[name] = ng
		}
	}
	return d, nil
}

// Tenant is the tenant the configs are of.
func (d *Desired) Tenant() *domain.Tenant { return d.view.tenant }

// Machines are the tenant's machines, in name order.
func (d *Desired) Machines() []domain.Machine { return d.view.machines }

// NodeGroup is the node group of that name.
func (d *Desired) NodeGroup(name string) (*domain.NodeGroup, bool) {
	ng, ok := d.groups[name]
	return ng, ok
}

// Config renders machine m's config. kubernetesVersion overrides the version
// it carries (an upgrade's next or previous config); "" means the tenant's
// (KubernetesVersionOf).
func (d *Desired) Config(m *domain.Machine, kubernetesVersion string) ([]byte, error) {
	ng, ok := d.groups[m.Spec.NodeGroup]
	if !ok {
		return nil, fmt.Errorf("machine %s: %w", m.Metadata.Name, domain.NewNotFound(domain.NodeGroupKind.Kind, m.Spec.NodeGroup))
	}
	return Render(RenderInput{Tenant: d.view.tenant, NodeGroup: ng, Machine: m, ControlPlaneAddress: d.view.firstControlPlane(),
		Patches: d.view.patches, Bundle: d.view.bundle, KubernetesVersion: kubernetesVersion, ImageFactory: d.view.factory})
}
