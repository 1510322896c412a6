package apply

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/providers"
	"github.com/rezuscloud/rezuscloud/talos"
)

// runInputs is what a run needs besides Generate's input.
type runInputs struct {
	bundle      *secrets.Bundle
	metal       []*domain.NodeGroup
	metalInputs metalInputs
}

// inputs gathers what Generate needs: the tenant's node groups with their
// machines' rendered configs, and the providers they name.
func (w *Worker) inputs(ctx context.Context, tenant string, t *domain.Tenant) (providers.GenerateInput, runInputs, error) {
	return w.inputsWith(ctx, tenant, t, talos.Change{})
}

// inputsWith is inputs with a pending change in place of the stored object
// (a dry run's plan): a node group or config patch replaced or added; a
// tenant is passed as t.
func (w *Worker) inputsWith(ctx context.Context, tenant string, t *domain.Tenant, ch talos.Change) (providers.GenerateInput, runInputs, error) {
	groups, err := projections.List[domain.NodeGroup](w.cfg.Cache, domain.NodeGroupKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return providers.GenerateInput{}, runInputs{}, err
	}
	patches, err := projections.List[domain.ConfigPatch](w.cfg.Cache, domain.ConfigPatchKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return providers.GenerateInput{}, runInputs{}, err
	}
	if ng := ch.NodeGroup; ng != nil {
		groups = append(slices.DeleteFunc(groups, func(g domain.NodeGroup) bool { return g.Metadata.Name == ng.Metadata.Name }), *ng)
	}
	if cp := ch.Patch; cp != nil {
		patches = append(slices.DeleteFunc(patches, func(p domain.ConfigPatch) bool { return p.Metadata.Name == cp.Metadata.Name }), *cp)
	}
	machines, err := projections.List[domain.Machine](w.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return providers.GenerateInput{}, runInputs{}, err
	}
	bundle, err := w.cfg.Bundles.Bundle(ctx, tenant)
	if err != nil {
		return providers.GenerateInput{}, runInputs{}, fmt.Errorf("loading the tenant's PKI: %w", err)
	}
	in := providers.GenerateInput{Tenant: t, Providers: map[string]*domain.Provider{}, ImageFactory: w.cfg.ImageFactory}
	extra := runInputs{bundle: bundle}
	byProvider := map[string]*domain.Provider{}
	for _, ng := range groups {
		if _, ok := byProvider[ng.Spec.Provider]; ok {
			continue
		}
		p, err := w.provider(ng.Spec.Provider)
		if err != nil {
			return providers.GenerateInput{}, runInputs{}, fmt.Errorf("node group %s: %w", ng.Metadata.Name, err)
		}
		byProvider[ng.Spec.Provider] = p
	}
	cpAddress := t.Status.EndpointAddress
	if cpAddress == "" {
		cpAddress = firstControlPlaneAddress(machines)
	}
	if cpAddress == "" && t.Spec.ControlPlane.Endpoint == "" {
		cpAddress = providers.MetalControlPlaneAddress(groups, byProvider, machines)
	}
	if t.Spec.ControlPlane.Endpoint == "" && cpAddress == "" {
		in.PlaceholderEndpoint = true
		cpAddress = providers.EndpointPlaceholder
	}
	byName := map[string]*domain.Machine{}
	for i := range machines {
		byName[machines[i].Metadata.Name] = &machines[i]
	}
	slices.SortFunc(groups, func(a, b domain.NodeGroup) int { return strings.Compare(a.Metadata.Name, b.Metadata.Name) })
	for i := range groups {
		ng := &groups[i]
		if ng.Metadata.DeletionTimestamp != nil {
			continue
		}
		if providers.IsMetal(byProvider[ng.Spec.Provider]) {
			extra.metal = append(extra.metal, ng)
			continue
		}
		in.Providers[ng.Spec.Provider] = byProvider[ng.Spec.Provider]
		g := providers.GroupInput{NodeGroup: ng}
		for _, idx := range ng.Spec.MachineIndexes() {
			mname := providers.MachineName(ng.Metadata.Name, idx)
			m := byName[mname]
			if m == nil {
				// A machine to build: the built-in providers name it (and
				// so its hostname) with its cloud name, so its day-0 config
				// carries the hostname it will have, and it needs no apply
				// once built.
				m = &domain.Machine{Metadata: domain.ObjectMeta{Name: mname, Tenant: tenant},
					Spec: domain.MachineSpec{NodeGroup: ng.Metadata.Name, Role: ng.Spec.Role, Hostname: providers.CloudName(tenant, mname)}}
			}
			cfg, err := talos.Render(talos.RenderInput{Tenant: t, NodeGroup: ng, Machine: m,
				ControlPlaneAddress: cpAddress, Patches: patches, Bundle: bundle, ImageFactory: w.cfg.ImageFactory})
			if err != nil {
				return providers.GenerateInput{}, runInputs{}, fmt.Errorf("rendering the config of machine %s: %w", mname, err)
			}
			g.Machines = append(g.Machines, providers.MachineInput{Name: mname, Config: cfg})
		}
		in.Groups = append(in.Groups, g)
	}
	extra.metalInputs = metalInputs{bundle: bundle, patches: patches, cpAddress: cpAddress}
	return in, extra, nil
}

func (w *Worker) hasNodeGroups(tenant string) bool {
	return w.cfg.Cache.Count(domain.NodeGroupKind.Kind, tenant) > 0
}

// firstControlPlaneAddress is the address of the first control-plane machine
// (by name), for tenants applied before the endpoint was recorded in status.
func firstControlPlaneAddress(ms []domain.Machine) string {
	m, _ := firstControlPlane(ms)
	return m.Spec.Address
}

// firstControlPlane is the first control-plane machine with an address, by
// name (sorting ms), so every replica and every run picks the same one.
func firstControlPlane(ms []domain.Machine) (domain.Machine, bool) {
	slices.SortFunc(ms, func(a, b domain.Machine) int { return strings.Compare(a.Metadata.Name, b.Metadata.Name) })
	i := slices.IndexFunc(ms, func(m domain.Machine) bool { return m.Spec.Role == domain.RoleControlPlane && m.Spec.Address != "" })
	if i < 0 {
		return domain.Machine{}, false
	}
	return ms[i], true
}

func (w *Worker) provider(name string) (*domain.Provider, error) {
	p, ok, err := projections.Get[domain.Provider](w.cfg.Cache, domain.ObjectRef(domain.ProviderKind, "", name))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, domain.NewNotFound(domain.ProviderKind.Kind, name)
	}
	return p, nil
}

// providerEnv is the credentials of the providers the tenant's node groups name.
func (w *Worker) providerEnv(ctx context.Context, tenant string) ([]string, error) {
	groups, err := projections.List[domain.NodeGroup](w.cfg.Cache, domain.NodeGroupKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(groups))
	for _, ng := range groups {
		names = append(names, ng.Spec.Provider)
	}
	return w.credentialsEnv(ctx, names)
}

// credentialsEnv is the credentials of the named Providers (a name twice,
// or one without credentials, adds nothing).
func (w *Worker) credentialsEnv(ctx context.Context, names []string) ([]string, error) {
	seen := map[string]bool{}
	var env []string
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		p, err := w.provider(name)
		if err != nil || p.Spec.CredentialsRef == nil {
			continue
		}
		if w.cfg.ProviderCredentials == nil {
			return nil, fmt.Errorf("provider %s names credentials %q but this server has no credential store", p.Metadata.Name, p.Spec.CredentialsRef.Name)
		}
		vals, err := w.cfg.ProviderCredentials.ProviderCredentials(ctx, p.Spec.CredentialsRef.Name)
		if err != nil {
			return nil, fmt.Errorf("provider %s: credentials %q: %w", p.Metadata.Name, p.Spec.CredentialsRef.Name, err)
		}
		for _, k := range slices.Sorted(maps.Keys(vals)) {
			env = append(env, k+"="+vals[k])
		}
	}
	return env, nil
}

// recoverLock drops a state lock left by a run that is not running: this
