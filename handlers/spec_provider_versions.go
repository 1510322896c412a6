package handlers

import (
	"encoding/json"
	"fmt"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
)

// The provider checks of version writes: a Kubernetes or Talos version that
// a Provider named by the tenant's node groups does not run (its
// spec.versions) is refused, with or without machines, since new machines
// would be built on it and an Upgrade to it would wait for a control plane
// that never comes (issue 43). Only a change is checked: a tenant already at
// a version its Provider dropped since keeps working until it changes.

// versionProblem picks the Kubernetes or the Talos list of spec.versions:
// (*domain.ProviderVersions).KubernetesProblem or TalosProblem.
type versionProblem func(v *domain.ProviderVersions, provider, version string) string

// tenantProviderVersionCauses refuses a tenant's kubernetesVersion (every
// group's Provider) or talosVersion (the Providers of the groups that take
// the tenant's) that a Provider does not run.
func (a *API) tenantProviderVersionCauses(ref domain.Ref, cur *domain.Object, next *domain.TenantSpec) []domain.Cause {
	if cur == nil {
		return nil // a new tenant has no node groups yet
	}
	var was domain.TenantSpec
	if json.Unmarshal(cur.Spec, &was) != nil {
		return nil
	}
	kube, talos := next.KubernetesVersion != was.KubernetesVersion, next.TalosVersion != was.TalosVersion
	if !kube && !talos {
		return nil
	}
	groups := a.liveNodeGroups(ref.Name)
	var causes []domain.Cause
	if kube {
		causes = append(causes, a.providerVersionCauses("spec.kubernetesVersion", next.KubernetesVersion, groups,
			(*domain.ProviderVersions).KubernetesProblem)...)
	}
	if talos {
		var followers []domain.NodeGroup
		for _, g := range groups {
			if g.Spec.TalosVersion == "" {
				followers = append(followers, g)
			}
		}
		causes = append(causes, a.providerVersionCauses("spec.talosVersion", next.TalosVersion, followers,
			(*domain.ProviderVersions).TalosProblem)...)
	}
	return causes
}

// nodeGroupProviderVersionCauses refuses a node group whose Provider does
// not run the tenant's Kubernetes version or the group's Talos version: on
// create, and on an update that changes the Provider or the Talos version.
// The cause is on spec.talosVersion when the group declares its own, on
// spec.provider otherwise (the versions are then the tenant's).
func (a *API) nodeGroupProviderVersionCauses(ref domain.Ref, cur *domain.Object, next *domain.NodeGroupSpec) []domain.Cause {
	versions := a.providerVersions(next.Provider)
	if versions == nil {
		return nil // the Provider runs any version: the tenant need not be read (every group create would decode it)
	}
	t, ok, err := projections.Get[domain.Tenant](a.cache, domain.TenantRef(ref.Tenant))
	if err != nil || !ok {
		return nil // the write answers a missing tenant itself
	}
	providerChanges, talosChanges := true, true
	if cur != nil {
		var was domain.NodeGroup
		if json.Unmarshal(cur.Spec, &was.Spec) != nil {
			return nil
		}
		providerChanges = was.Spec.Provider != next.Provider
		talosChanges = providerChanges || declaredTalos(&t.Spec, &was) != declaredTalos(&t.Spec, &domain.NodeGroup{Spec: *next})
	}
	if !talosChanges {
		return nil
	}
	var causes []domain.Cause
	if p := versions.KubernetesProblem(next.Provider, t.Spec.KubernetesVersion); p != "" && providerChanges {
		causes = append(causes, domain.Cause{Field: "spec.provider", Type: domain.CauseNotSupported,
			Message: fmt.Sprintf("tenant %s runs Kubernetes %s: %s", ref.Tenant, t.Spec.KubernetesVersion, p)})
	}
	if next.TalosVersion != "" {
		if p := versions.TalosProblem(next.Provider, next.TalosVersion); p != "" {
			causes = append(causes, domain.Cause{Field: "spec.talosVersion", Type: domain.CauseNotSupported, Message: p})
		}
	} else if p := versions.TalosProblem(next.Provider, t.Spec.TalosVersion); p != "" {
		causes = append(causes, domain.Cause{Field: "spec.provider", Type: domain.CauseNotSupported,
			Message: fmt.Sprintf("tenant %s runs Talos %s: %s", ref.Tenant, t.Spec.TalosVersion, p)})
	}
	return causes
}

// upgradeProviderVersionCauses refuses an Upgrade to a version that a
// Provider of the node groups it covers does not run.
func (a *API) upgradeProviderVersionCauses(tenant string, spec *domain.UpgradeSpec) []domain.Cause {
	var groups []domain.NodeGroup
	for _, g := range a.liveNodeGroups(tenant) {
		if spec.Includes(g.Metadata.Name) {
			groups = append(groups, g)
		}
	}
	if spec.Kubernetes() {
		return a.providerVersionCauses("spec.kubernetesVersion", spec.KubernetesVersion, groups, (*domain.ProviderVersions).KubernetesProblem)
	}
	return a.providerVersionCauses("spec.talosVersion", spec.TalosVersion, groups, (*domain.ProviderVersions).TalosProblem)
}

// providerVersionCauses answers one cause on field per Provider of groups
// that does not run version, naming the groups that build on it.
func (a *API) providerVersionCauses(field, version string, groups []domain.NodeGroup, problem versionProblem) []domain.Cause {
	var causes []domain.Cause
	for _, p := range domain.GroupVersionProblems(version, groups, a.providerVersions, problem) {
		causes = append(causes, domain.Cause{Field: field, Type: domain.CauseNotSupported, Message: p})
	}
	return causes
}

// providerVersions is spec.versions of the Provider named name (nil: any).
func (a *API) providerVersions(name string) *domain.ProviderVersions {
	return projections.ProviderVersions(a.cache, name)
}

// liveNodeGroups are the tenant's node groups that are not being deleted,
// read through the cache's per-tenant key range.
func (a *API) liveNodeGroups(tenant string) []domain.NodeGroup {
	list, err := projections.List[domain.NodeGroup](a.cache, domain.NodeGroupKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return nil
	}
	out := list[:0]
	for _, g := range list {
		if g.Metadata.DeletionTimestamp == nil {
			out = append(out, g)
		}
	}
	return out
}
