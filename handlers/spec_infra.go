package handlers

import (
	"encoding/json"
	"fmt"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/providers"
)

// nodeGroupScaleCauses refuses a control-plane scale-down that would leave
// etcd without quorum on the way, or an even number of control planes, or
// none while the tenant has other node groups (domain.PlanScaleDown). The
// machines' health is their observed readiness in the read model; a machine
// never observed counts as healthy, because the apply worker checks the live
// etcd membership again before it removes anything. A group that stops being
// a control-plane group loses all of its control planes.
func (a *API) nodeGroupScaleCauses(ref domain.Ref, cur *domain.Object, next *domain.NodeGroupSpec) []domain.Cause {
	if cur == nil {
		return nil
	}
	var old domain.NodeGroupSpec
	if json.Unmarshal(cur.Spec, &old) != nil || old.Role != domain.RoleControlPlane {
		return nil
	}
	count := next.Count
	if next.Role != domain.RoleControlPlane {
		count = 0
	}
	if count >= old.Count && next.Role == domain.RoleControlPlane {
		return nil
	}
	if err := a.controlPlaneScaleDown(ref, count); err != nil {
		return []domain.Cause{{Field: "spec.count", Type: domain.CauseForbidden,
			Message: fmt.Sprintf("scaling the control planes of %s from %d to %d is refused: %v", ref.Name, old.Count, count, err)}}
	}
	return nil
}

// nodeGroupDeleteCauses refuses deleting a control-plane group when the
// scale-down to no machines would be refused (a tenant being deleted takes
// its groups with it).
func (a *API) nodeGroupDeleteCauses(ref domain.Ref, cur *domain.Object) []domain.Cause {
	var spec domain.NodeGroupSpec
	if cur == nil || json.Unmarshal(cur.Spec, &spec) != nil || spec.Role != domain.RoleControlPlane {
		return nil
	}
	if err := a.controlPlaneScaleDown(ref, 0); err != nil {
		return []domain.Cause{{Field: "spec.count", Type: domain.CauseForbidden,
			Message: fmt.Sprintf("deleting %s removes its %d control planes and is refused: %v", ref.Name, spec.Count, err)}}
	}
	return nil
}

// controlPlaneScaleDown checks node group ref going to count machines
// against the tenant's control planes.
func (a *API) controlPlaneScaleDown(ref domain.Ref, count int) error {
	if t, ok, _ := projections.Get[domain.Tenant](a.cache, domain.TenantRef(ref.Tenant)); !ok || t.Metadata.DeletionTimestamp != nil {
		return nil
	}
	machines, err := projections.List[domain.Machine](a.cache, domain.MachineKind, projections.ListOptions{Tenant: ref.Tenant})
	if err != nil {
		return nil // the apply worker checks again
	}
	groups, err := projections.List[domain.NodeGroup](a.cache, domain.NodeGroupKind, projections.ListOptions{Tenant: ref.Tenant})
	if err != nil {
		return nil
	}
	in := domain.ScaleDown{AllowNone: true}
	for _, g := range groups {
		if g.Metadata.Name != ref.Name && g.Metadata.DeletionTimestamp == nil {
			in.AllowNone = false
		}
	}
	var names []string
	for _, m := range machines {
		if m.Spec.Role != domain.RoleControlPlane {
			continue
		}
		in.Members = append(in.Members, domain.EtcdMember{Name: m.Metadata.Name, NodeGroup: m.Spec.NodeGroup,
			Healthy: m.Status.Ready || m.Status.LastSeen == nil})
		if m.Spec.NodeGroup == ref.Name {
			names = append(names, m.Metadata.Name)
		}
	}
	in.Going = domain.GroupGoing(ref.Name, count, names)
	_, err = domain.PlanScaleDown(in)
	return err
}

// nodeGroupProviderCauses refuses a Provider that does not exist and runs
// the provider type's own validation of spec.providerConfig (the code the
// generator runs at apply time). A group that keeps naming a Provider deleted
// since is left to the apply, which reports it.
func (a *API) nodeGroupProviderCauses(ref domain.Ref, cur *domain.Object, next *domain.NodeGroupSpec) []domain.Cause {
	p, ok, err := projections.Get[domain.Provider](a.cache, domain.ObjectRef(domain.ProviderKind, "", next.Provider))
	if err != nil {
		return nil
	}
	if !ok {
		var old domain.NodeGroupSpec
		if cur != nil && json.Unmarshal(cur.Spec, &old) == nil && old.Provider == next.Provider {
			return nil
		}
		return []domain.Cause{{Field: "spec.provider", Type: domain.CauseNotFound,
			Message: fmt.Sprintf("provider %q not found; create the Provider first", next.Provider)}}
	}
	if p.Spec.TenantSelector != "" {
		var labels map[string]string
		if t, ok, err := projections.Get[domain.Tenant](a.cache, domain.TenantRef(ref.Tenant)); err == nil && ok {
			labels = t.Metadata.Labels
		}
		if !p.Spec.AllowsTenant(labels) {
			return []domain.Cause{domain.TenantRefused("spec.provider", next.Provider, ref.Tenant, p.Spec.TenantSelector)}
		}
	}
	return providers.ValidateGroupConfig(p, next)
}

// providerConfigCauses runs the provider type's own validation of spec.config
// (the code the generator runs at apply time). A change of spec.type is also
// checked against the node groups that name the Provider: their
// providerConfig must suit the new type.
func (a *API) providerConfigCauses(ref domain.Ref, cur *domain.Object, next *domain.ProviderSpec) []domain.Cause {
	causes := providers.ValidateProviderSpec(next)
	if next.Type == domain.ProviderModule && next.Module != nil {
		_, mc := a.cfg.Modules.Check(next)
		causes = append(causes, mc...)
	}
	var old domain.ProviderSpec
	if cur == nil || json.Unmarshal(cur.Spec, &old) != nil || old.Type == next.Type {
		return causes
	}
	p := &domain.Provider{Metadata: domain.ObjectMeta{Name: ref.Name}, Spec: *next}
	for _, raw := range a.cache.NodeGroupsOf(ref.Name) {
		var g domain.NodeGroup
		if json.Unmarshal(raw, &g) != nil {
			continue
		}
		for _, c := range providers.ValidateGroupConfig(p, &g.Spec) {
			causes = append(causes, domain.Cause{Field: "spec.type", Type: domain.CauseInvalid,
				Message: fmt.Sprintf("node group %s/%s does not suit type %s: %s: %s", g.Metadata.Tenant, g.Metadata.Name, next.Type, c.Field, c.Message)})
		}
	}
	return causes
}
