package handlers

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// The version checks of tenant and node group writes: a declared version
// that the run it starts would refuse is refused here, so that the spec never
// declares what no machine can run. The rules are the run's own
// (talos/versions.go); the versions are what the machines were observed on
// (status.talosVersion) and what their configs carry (the tenant's
// status.kubernetesVersion). Only a change of a version is checked, and a
// tenant or group without machines takes any valid version: new machines are
// built on it.

// tenantVersionCauses refuses a tenant's talosVersion or kubernetesVersion
// that a run would refuse (issue 12: minor downgrade, minor skip, unsupported pair).
func (a *API) tenantVersionCauses(ref domain.Ref, cur *domain.Object, next *domain.TenantSpec) []domain.Cause {
	if cur == nil {
		return nil
	}
	var t domain.Tenant
	if json.Unmarshal(objectJSON(cur), &t) != nil {
		return nil
	}
	machines, groups := a.versionInputs(ref.Name)
	if len(machines) == 0 {
		return nil
	}
	// follows reports whether a machine's group takes the tenant's talosVersion.
	follows := func(m *domain.Machine) bool {
		ng, ok := groups[m.Spec.NodeGroup]
		return !ok || ng.Spec.TalosVersion == ""
	}
	talosChanges := next.TalosVersion != t.Spec.TalosVersion
	var causes []domain.Cause
	if talosChanges {
		k8s := talos.KubernetesVersionOf(&t)
		observed := map[string][]string{}
		for i := range machines {
			if m := &machines[i]; follows(m) && m.Status.TalosVersion != "" {
				observed[m.Status.TalosVersion] = append(observed[m.Status.TalosVersion], m.Metadata.Name)
			}
		}
		causes = append(causes, machineVersionCauses("spec.talosVersion", "run", observed, func(v string) string {
			return talos.TalosUpgradeProblem(v, next.TalosVersion, k8s)
		})...)
	}
	if next.KubernetesVersion == t.Spec.KubernetesVersion {
		return causes
	}
	from := t.Status.KubernetesVersion
	if from == "" {
		from = t.Spec.KubernetesVersion
	}
	if p := talos.KubernetesPathProblem(from, next.KubernetesVersion); p != "" {
		return append(causes, domain.Cause{Field: "spec.kubernetesVersion", Type: domain.CauseInvalid,
			Message: "the machines' configs carry Kubernetes " + from + ": " + p})
	}
	// The Talos version each machine runs when the Kubernetes run comes: a
	// Talos run started by this same write goes first.
	runs := map[string][]string{}
	for i := range machines {
		m := &machines[i]
		v := m.Status.TalosVersion
		if talosChanges && follows(m) {
			v = next.TalosVersion
		}
		if v == "" {
			v = declaredTalos(&t.Spec, groups[m.Spec.NodeGroup])
		}
		runs[v] = append(runs[v], m.Metadata.Name)
	}
	return append(causes, machineVersionCauses("spec.kubernetesVersion", "run Talos", runs, func(v string) string {
		return talos.KubernetesSupportProblem(next.KubernetesVersion, v)
	})...)
}

// nodeGroupVersionCauses does the same for a node group's talosVersion.
func (a *API) nodeGroupVersionCauses(ref domain.Ref, cur *domain.Object, next *domain.NodeGroupSpec) []domain.Cause {
	if cur == nil {
		return nil // a new group has no machines yet
	}
	t, ok, err := projections.Get[domain.Tenant](a.cache, domain.TenantRef(ref.Tenant))
	if err != nil || !ok {
		return nil
	}
	var was domain.NodeGroup
	if json.Unmarshal(objectJSON(cur), &was) != nil {
		return nil
	}
	to := declaredTalos(&t.Spec, &domain.NodeGroup{Spec: *next})
	if to == declaredTalos(&t.Spec, &was) {
		return nil
	}
	machines, _ := a.versionInputs(ref.Tenant)
	observed := map[string][]string{}
	for _, m := range machines {
		if m.Spec.NodeGroup == ref.Name && m.Status.TalosVersion != "" {
			observed[m.Status.TalosVersion] = append(observed[m.Status.TalosVersion], m.Metadata.Name)
		}
	}
	k8s := talos.KubernetesVersionOf(t)
	return machineVersionCauses("spec.talosVersion", "run", observed, func(v string) string { return talos.TalosUpgradeProblem(v, to, k8s) })
}

// versionInputs reads a tenant's machines and node groups (by name).
func (a *API) versionInputs(tenant string) ([]domain.Machine, map[string]*domain.NodeGroup) {
	machines, err := projections.List[domain.Machine](a.cache, domain.MachineKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return nil, nil
	}
	list, err := projections.List[domain.NodeGroup](a.cache, domain.NodeGroupKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return nil, nil
	}
	groups := make(map[string]*domain.NodeGroup, len(list))
	for i := range list {
		groups[list[i].Metadata.Name] = &list[i]
	}
	return machines, groups
}

// declaredTalos is the Talos version a group's machines are declared at.
func declaredTalos(t *domain.TenantSpec, ng *domain.NodeGroup) string {
	if ng != nil && ng.Spec.TalosVersion != "" {
		return ng.Spec.TalosVersion
	}
	return t.TalosVersion
}

// machineVersionCauses asks problem of each version machines run (byVersion:
// version → machine names) and answers one cause on field per refused
// version, naming up to five of its machines ("machines a, b <verb> <version>: ...").
func machineVersionCauses(field, verb string, byVersion map[string][]string, problem func(version string) string) []domain.Cause {
	versions := make([]string, 0, len(byVersion))
	for v := range byVersion {
		versions = append(versions, v)
	}
	sort.Strings(versions)
	var causes []domain.Cause
	for _, v := range versions {
		p := problem(v)
		if p == "" {
			continue
		}
		ms := append([]string(nil), byVersion[v]...)
		sort.Strings(ms)
		if len(ms) > 5 {
			ms = append(ms[:5:5], fmt.Sprintf("and %d more", len(ms)-5))
		}
		causes = append(causes, domain.Cause{Field: field, Type: domain.CauseInvalid,
			Message: fmt.Sprintf("machines %s %s %s: %s", strings.Join(ms, ", "), verb, v, p)})
	}
	return causes
}

func objectJSON(o *domain.Object) []byte {
	b, _ := json.Marshal(o)
	return b
}
