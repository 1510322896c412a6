package talos

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
)

// Service renders configs and credentials of the tenants in the read model.
type Service struct {
	cache *projections.Cache
	pki   *PKI
	// factory is the Image Factory URL the installers come from ("": the
	// public one).
	factory string
}

// NewService returns a Service reading objects from cache and bundles from pki.
func NewService(cache *projections.Cache, pki *PKI) *Service {
	return &Service{cache: cache, pki: pki}
}

// WithImageFactory makes the configs name installers of the Image Factory at
// url (serve --image-factory) and returns s.
func (s *Service) WithImageFactory(url string) *Service {
	s.factory = url
	return s
}

// ImageFactory is the Image Factory URL the configs' installers come from.
func (s *Service) ImageFactory() string {
	if s.factory == "" {
		return domain.DefaultImageFactory
	}
	return s.factory
}

// PKI returns the service's PKI.
func (s *Service) PKI() *PKI { return s.pki }

// tenantView is what a tenant's renders need from the read model.
type tenantView struct {
	tenant   *domain.Tenant
	machines []domain.Machine
	patches  []domain.ConfigPatch
	bundle   *secrets.Bundle
	factory  string
}

func (s *Service) load(ctx context.Context, tenant string) (*tenantView, error) {
	t, err := getTyped[domain.Tenant](s.cache, domain.TenantRef(tenant))
	if err != nil {
		return nil, err
	}
	v := &tenantView{tenant: t, factory: s.factory}
	if v.machines, err = projections.List[domain.Machine](s.cache, domain.MachineKind, projections.ListOptions{Tenant: tenant}); err != nil {
		return nil, err
	}
	if v.patches, err = projections.List[domain.ConfigPatch](s.cache, domain.ConfigPatchKind, projections.ListOptions{Tenant: tenant}); err != nil {
		return nil, err
	}
	if v.bundle, err = s.pki.Bundle(ctx, tenant); err != nil {
		return nil, err
	}
	return v, nil
}

// controlPlaneAddresses are the addresses of the tenant's control-plane machines, in name order.
func (v *tenantView) controlPlaneAddresses() []string {
	var out []string
	for _, m := range v.machines {
		if m.Spec.Role == domain.RoleControlPlane && m.Spec.Address != "" {
			out = append(out, m.Spec.Address)
		}
	}
	return out
}

func (v *tenantView) firstControlPlane() string {
	if a := v.tenant.Status.EndpointAddress; a != "" {
		return a
	}
	if a := v.controlPlaneAddresses(); len(a) > 0 {
		return a[0]
	}
	return ""
}

// Pending says which patch to show the effect of: the named stored patch, or
// the spec given (not stored). The diff is between the config without the
// patch and with it, taken as enabled; its target still applies.
type Pending struct {
	Name string
	Spec *domain.ConfigPatchSpec
}

// ConfigOptions says what a rendered config answer holds.
type ConfigOptions struct {
	// Pending asks for the unified diff a pending patch would make instead
	// of the config.
	Pending *Pending
	// IncludeSecrets keeps the keys, tokens and secrets of the tenant's PKI
	// (for global admins only: the caller decides). Otherwise they are
	// emptied and the answer starts with a comment naming them.
	IncludeSecrets bool
}

// RenderedConfig is a rendered config (or a diff) as a caller reads it.
type RenderedConfig struct {
	Body []byte
	// LeftOut are the paths of the secrets emptied (RedactSecrets).
	LeftOut []string
}

// MachineConfig renders one machine's config; with a pending patch, it
// answers the unified diff the patch would make instead.
func (s *Service) MachineConfig(ctx context.Context, tenant, machineName string, opts ConfigOptions) (*RenderedConfig, error) {
	v, err := s.load(ctx, tenant)
	if err != nil {
		return nil, err
	}
	var m *domain.Machine
	for i := range v.machines {
		if v.machines[i].Metadata.Name == machineName {
			m = &v.machines[i]
		}
	}
	if m == nil {
		return nil, domain.NewNotFound(domain.MachineKind.Kind, machineName)
	}
	ng, err := getTyped[domain.NodeGroup](s.cache, domain.ObjectRef(domain.NodeGroupKind, tenant, m.Spec.NodeGroup))
	if err != nil {
		return nil, fmt.Errorf("machine %s: %w", machineName, err)
	}
	return s.renderOrDiff(v, ng, m, opts)
}

// NodeGroupConfig renders a node group's template: the config of a machine of
// the group before machine-targeted patches. With pending it answers a diff.
func (s *Service) NodeGroupConfig(ctx context.Context, tenant, nodeGroup string, opts ConfigOptions) (*RenderedConfig, error) {
	v, err := s.load(ctx, tenant)
	if err != nil {
		return nil, err
	}
	ng, err := getTyped[domain.NodeGroup](s.cache, domain.ObjectRef(domain.NodeGroupKind, tenant, nodeGroup))
	if err != nil {
		return nil, err
	}
	return s.renderOrDiff(v, ng, nil, opts)
}

// renderFor renders in as the caller may read it: without secrets unless
// asked for them.
func renderFor(in RenderInput, opts ConfigOptions) ([]byte, []string, error) {
	cfg, err := Render(in)
	if err != nil || opts.IncludeSecrets {
		return cfg, nil, err
	}
	out, leftOut, err := RedactSecrets(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("leaving the secrets out of the config: %w", err)
	}
	return out, leftOut, nil
}

func (s *Service) renderOrDiff(v *tenantView, ng *domain.NodeGroup, m *domain.Machine, opts ConfigOptions) (*RenderedConfig, error) {
	in := RenderInput{Tenant: v.tenant, NodeGroup: ng, Machine: m, ControlPlaneAddress: v.firstControlPlane(), Bundle: v.bundle, ImageFactory: v.factory}
	pending := opts.Pending
	if pending == nil {
		in.Patches = v.patches
		cfg, leftOut, err := renderFor(in, opts)
		if err != nil {
			return nil, err
		}
		return &RenderedConfig{Body: append(RedactionHeader(leftOut), cfg...), LeftOut: leftOut}, nil
	}
	var p domain.ConfigPatch
	name := pending.Name
	if pending.Spec != nil {
		p = domain.ConfigPatch{Metadata: domain.ObjectMeta{Name: name}, Spec: *pending.Spec}
	} else {
		found := false
		for _, cp := range v.patches {
			if cp.Metadata.Name == name {
				p, found = cp, true
			}
		}
		if !found {
			return nil, domain.NewNotFound(domain.ConfigPatchKind.Kind, name)
		}
	}
	enabled := true
	p.Spec.Enabled = &enabled
	var without []domain.ConfigPatch
	for _, cp := range v.patches {
		if cp.Metadata.Name != name {
			without = append(without, cp)
		}
	}
	in.Patches = without
	// Both sides without secrets, so that neither a changed line nor its
	// context carries one.
	before, leftOut, err := renderFor(in, opts)
	if err != nil {
		return nil, err
	}
	in.Patches = append(append([]domain.ConfigPatch{}, without...), p)
	after, leftAfter, err := renderFor(in, opts)
	if err != nil {
		return nil, err
	}
	label := "configpatch/" + name
	leftOut = append(leftOut, leftAfter...)
	slices.Sort(leftOut)
	leftOut = slices.Compact(leftOut)
	return &RenderedConfig{Body: []byte(UnifiedDiff("current", "with "+label, string(before), string(after))), LeftOut: leftOut}, nil
}

// ValidatePatch checks a patch as the API receives it: machinery must load it
// as the declared format and applying it alone to a config of each role it may
// reach must give a valid config. reason is machinery's explanation when the
// patch is bad; err is a failure to check (unknown tenant, PKI unavailable).
func (s *Service) ValidatePatch(ctx context.Context, tenant string, spec domain.ConfigPatchSpec) (reason string, err error) {
	if _, err := LoadPatch(spec); err != nil {
		return err.Error(), nil
	}
	v, err := s.load(ctx, tenant)
	if err != nil {
		return "", err
	}
	roles := []string{domain.RoleControlPlane, domain.RoleWorker}
	switch spec.Target.Kind {
	case domain.TargetRole:
		roles = []string{spec.Target.Name}
	case domain.TargetNodeGroup:
		if ng, err := getTyped[domain.NodeGroup](s.cache, domain.ObjectRef(domain.NodeGroupKind, tenant, spec.Target.Name)); err == nil {
			roles = []string{ng.Spec.Role}
		}
	case domain.TargetMachine:
		for _, m := range v.machines {
			if m.Metadata.Name == spec.Target.Name {
				roles = []string{m.Spec.Role}
			}
		}
	}
	// Before the first control-plane machine has an address, a documentation
	// address (RFC 5737) stands in: the endpoint does not change what a patch does.
	cp := v.firstControlPlane()
	if cp == "" {
		cp = "192.0.2.1"
	}
	spec.Target = domain.PatchTarget{Kind: domain.TargetAll}
	enabled := true
	spec.Enabled = &enabled
	p := domain.ConfigPatch{Metadata: domain.ObjectMeta{Name: "pending"}, Spec: spec}
	for _, role := range roles {
		ng := &domain.NodeGroup{Metadata: domain.ObjectMeta{Name: "pending", Tenant: tenant}, Spec: domain.NodeGroupSpec{Role: role}}
		if _, err := render(RenderInput{Tenant: v.tenant, NodeGroup: ng, ControlPlaneAddress: cp, Patches: []domain.ConfigPatch{p}, Bundle: v.bundle, ImageFactory: v.factory}); err != nil {
			return fmt.Sprintf("applied to a %s config: %s", role, strings.TrimPrefix(err.Error(), "configpatch pending: ")), nil
		}
	}
	return "", nil
}
