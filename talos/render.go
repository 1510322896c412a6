package talos

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"strings"

	jsonpatch "github.com/evanphx/json-patch"
	"github.com/siderolabs/talos/pkg/machinery/config"
	configdoc "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
)

// Install defaults, used when a node group's providerConfig names none.
const (
	DefaultInstallDisk = "/dev/sda"
	// VanillaSchematic is the Image Factory schematic without extensions.
	VanillaSchematic = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
)

// DefaultInstallImage is the Image Factory installer of a Talos version.
func DefaultInstallImage(talosVersion string) string {
	return "factory.talos.dev/metal-installer/" + VanillaSchematic + ":" + talosVersion
}

// RenderInput is everything a machine config derives from.
type RenderInput struct {
	Tenant    *domain.Tenant
	NodeGroup *domain.NodeGroup
	// Machine is nil for the node group's template: machine-targeted patches are then skipped.
	Machine *domain.Machine
	// ControlPlaneAddress is the first control-plane machine's address, the
	// endpoint's host when the tenant declares no spec.controlPlane.endpoint.
	ControlPlaneAddress string
	// Patches are the tenant's ConfigPatches; Render picks the enabled ones that
	// target this machine and applies them by weight, then name.
	Patches []domain.ConfigPatch
	Bundle  *secrets.Bundle
}

// TalosVersion is the version the machine runs: the node group's override, else the tenant's.
func (in RenderInput) TalosVersion() string {
	if in.NodeGroup != nil && in.NodeGroup.Spec.TalosVersion != "" {
		return in.NodeGroup.Spec.TalosVersion
	}
	return in.Tenant.Spec.TalosVersion
}

// ClusterEndpoint is the Kubernetes API URL of a tenant: its declared
// endpoint, else https://<first control-plane address>:6443.
func ClusterEndpoint(t *domain.Tenant, controlPlaneAddress string) (string, error) {
	if t.Spec.ControlPlane.Endpoint != "" {
		return strings.TrimSuffix(t.Spec.ControlPlane.Endpoint, "/"), nil
	}
	if controlPlaneAddress == "" {
		return "", domain.NewConflict(domain.TenantKind.Kind, t.Metadata.Name,
			"no control-plane endpoint yet: set spec.controlPlane.endpoint or wait for a control-plane machine with an address")
	}
	return "https://" + net.JoinHostPort(controlPlaneAddress, "6443"), nil
}

// Render produces the machine config of one machine (or a node group's
// template), validated by machinery. The patches are applied in order and the
// result checked as a whole, so a bad patch fails the render, never half-applies.
func Render(in RenderInput) ([]byte, error) {
	cfg, err := render(in)
	if err != nil {
		return nil, err
	}
	return cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
}

func render(in RenderInput) (config.Provider, error) {
	version := in.TalosVersion()
	contract, err := config.ParseContractFromVersion(version)
	if err != nil {
		return nil, fmt.Errorf("talos version %q: %w", version, err)
	}
	endpoint, err := ClusterEndpoint(in.Tenant, in.ControlPlaneAddress)
	if err != nil {
		return nil, err
	}
	var pc struct {
		InstallDisk  string `json:"installDisk"`
		InstallImage string `json:"installImage"`
	}
	if len(in.NodeGroup.Spec.ProviderConfig) > 0 {
		_ = json.Unmarshal(in.NodeGroup.Spec.ProviderConfig, &pc) // other keys are the provider's
	}
	if pc.InstallDisk == "" {
		pc.InstallDisk = DefaultInstallDisk
	}
	if pc.InstallImage == "" {
		pc.InstallImage = DefaultInstallImage(version)
	}
	nw := in.Tenant.Spec.Network
	gen, err := generate.NewInput(in.Tenant.Metadata.Name, endpoint, strings.TrimPrefix(in.Tenant.Spec.KubernetesVersion, "v"),
		generate.WithSecretsBundle(in.Bundle),
		generate.WithVersionContract(contract),
		generate.WithDNSDomain(nw.DNSDomain),
		generate.WithInstallDisk(pc.InstallDisk),
		generate.WithInstallImage(pc.InstallImage),
	)
	if err != nil {
		return nil, fmt.Errorf("preparing config generation: %w", err)
	}
	if len(nw.PodSubnets) > 0 {
		gen.PodNet = nw.PodSubnets
	}
	if len(nw.ServiceSubnets) > 0 {
		gen.ServiceNet = nw.ServiceSubnets
	}
	role := in.NodeGroup.Spec.Role
	mt := machine.TypeWorker
	if role == domain.RoleControlPlane {
		mt = machine.TypeControlPlane
	}
	base, err := gen.Config(mt)
	if err != nil {
		return nil, fmt.Errorf("generating the %s config: %w", role, err)
	}
	patches := []configpatcher.Patch{}
	if p, err := nodeGroupPatch(in.NodeGroup); err != nil {
		return nil, err
	} else if p != nil {
		patches = append(patches, p)
	}
	machineName := ""
	if in.Machine != nil {
		machineName = in.Machine.Metadata.Name
	}
	for _, cp := range SelectPatches(in.Patches, role, in.NodeGroup.Metadata.Name, machineName) {
		p, err := LoadPatch(cp.Spec)
		if err != nil {
			return nil, fmt.Errorf("configpatch %s: %w", cp.Metadata.Name, err)
		}
		patches = append(patches, p)
	}
	cfg, err := ApplyPatches(base, patches)
	if err != nil {
		return nil, fmt.Errorf("applying config patches: %w", err)
	}
	if _, err := cfg.Validate(validationMode{}, validation.WithLocal()); err != nil {
		return nil, fmt.Errorf("the rendered config is invalid: %w", err)
	}
	return cfg, nil
}

// ApplyPatches applies patches in order with machinery's config patcher.
// Machinery refuses JSON 6902 patches on multi-document configs (Talos 1.12+
// configs carry a HostnameConfig document beside v1alpha1), so a JSON 6902
// patch is applied to the v1alpha1 document alone, its paths being v1alpha1
// paths as users write them, and the other documents are kept as they were.
func ApplyPatches(cfg config.Provider, patches []configpatcher.Patch) (config.Provider, error) {
	for _, p := range patches {
		var err error
		if jp, ok := p.(jsonpatch.Patch); ok {
			cfg, err = applyJSON6902(cfg, jp)
		} else {
			var out configpatcher.Output
			if out, err = configpatcher.Apply(configpatcher.WithConfig(cfg), []configpatcher.Patch{p}); err == nil {
				cfg, err = out.Config()
			}
		}
		if err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

func applyJSON6902(cfg config.Provider, p jsonpatch.Patch) (config.Provider, error) {
	v1 := cfg.RawV1Alpha1()
	if v1 == nil {
		return nil, fmt.Errorf("the config has no v1alpha1 document for a JSON 6902 patch")
	}
	var others []configdoc.Document
	for _, d := range cfg.Documents() {
		if _, ok := d.(*v1alpha1.Config); !ok {
			others = append(others, d)
		}
	}
	single, err := container.New(v1)
	if err != nil {
		return nil, err
	}
	raw, err := single.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return nil, err
	}
	patched, err := configpatcher.JSON6902(raw, p)
	if err != nil {
		return nil, err
	}
	loaded, err := configloader.NewFromBytes(patched)
	if err != nil {
		return nil, err
	}
	return container.New(append(loaded.Documents(), others...)...)
}

// nodeGroupPatch gives the group's node labels and taints as a strategic patch.
func nodeGroupPatch(ng *domain.NodeGroup) (configpatcher.Patch, error) {
	if len(ng.Spec.Labels) == 0 && len(ng.Spec.Taints) == 0 {
		return nil, nil
	}
	m := map[string]any{}
	if len(ng.Spec.Labels) > 0 {
		m["nodeLabels"] = ng.Spec.Labels
	}
	if len(ng.Spec.Taints) > 0 {
		taints := map[string]string{}
		for _, t := range ng.Spec.Taints {
			taints[t.Key] = t.Value + ":" + t.Effect
		}
		m["nodeTaints"] = taints
	}
	// JSON is YAML, and machinery's loader reads either.
	raw, err := json.Marshal(map[string]any{"version": "v1alpha1", "machine": m})
	if err != nil {
		return nil, err
	}
	p, err := configpatcher.LoadPatch(raw)
	if err != nil {
		return nil, fmt.Errorf("node group %s labels and taints: %w", ng.Metadata.Name, err)
	}
	return p, nil
}

// SelectPatches returns the enabled patches that target a machine of role in
// node group (and machine, when not empty), ordered by weight, then name.
func SelectPatches(all []domain.ConfigPatch, role, nodeGroup, machine string) []domain.ConfigPatch {
	var out []domain.ConfigPatch
	for _, p := range all {
		if p.Spec.Enabled != nil && !*p.Spec.Enabled {
			continue
		}
		if Targets(p.Spec.Target, role, nodeGroup, machine) {
			out = append(out, p)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Spec.Weight != out[j].Spec.Weight {
			return out[i].Spec.Weight < out[j].Spec.Weight
		}
		return out[i].Metadata.Name < out[j].Metadata.Name
	})
	return out
}

// Targets reports whether a patch target selects the machine.
func Targets(t domain.PatchTarget, role, nodeGroup, machine string) bool {
	switch t.Kind {
	case domain.TargetAll, "":
		return true
	case domain.TargetRole:
		return t.Name == role
	case domain.TargetNodeGroup:
		return t.Name == nodeGroup
	case domain.TargetMachine:
		return machine != "" && t.Name == machine
	}
	return false
}

// LoadPatch parses a patch with machinery and checks it is of the declared format.
func LoadPatch(spec domain.ConfigPatchSpec) (configpatcher.Patch, error) {
	p, err := configpatcher.LoadPatch([]byte(spec.Patch))
	if err != nil {
		return nil, err
	}
	_, isJSON := p.(jsonpatch.Patch)
	switch {
	case spec.Format == domain.PatchJSON6902 && !isJSON:
		return nil, fmt.Errorf("format is json6902 but the patch is a strategic merge patch (a partial machine config)")
	case spec.Format != domain.PatchJSON6902 && isJSON:
		return nil, fmt.Errorf("format is strategic but the patch is a JSON 6902 patch; set format: json6902")
	}
	return p, nil
}

// validationMode is how RezusCloud's machines run: installed to disk, not in a container.
type validationMode struct{}

func (validationMode) String() string        { return "metal" }
func (validationMode) RequiresInstall() bool { return true }
func (validationMode) InContainer() bool     { return false }

// Service renders configs and credentials of the tenants in the read model.
type Service struct {
	cache *projections.Cache
	pki   *PKI
}

// NewService returns a Service reading objects from cache and bundles from pki.
func NewService(cache *projections.Cache, pki *PKI) *Service {
	return &Service{cache: cache, pki: pki}
}

// PKI returns the service's PKI.
func (s *Service) PKI() *PKI { return s.pki }

// tenantView is what a tenant's renders need from the read model.
type tenantView struct {
	tenant   *domain.Tenant
	machines []domain.Machine
	patches  []domain.ConfigPatch
	bundle   *secrets.Bundle
}

func (s *Service) load(ctx context.Context, tenant string) (*tenantView, error) {
	t, err := getTyped[domain.Tenant](s.cache, domain.Ref{Kind: domain.TenantKind.Kind, Name: tenant})
	if err != nil {
		return nil, err
	}
	v := &tenantView{tenant: t}
	if v.machines, err = listTyped[domain.Machine](s.cache, domain.MachineKind.Kind, tenant); err != nil {
		return nil, err
	}
	if v.patches, err = listTyped[domain.ConfigPatch](s.cache, domain.ConfigPatchKind.Kind, tenant); err != nil {
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

func listTyped[T any](cache *projections.Cache, kind, tenant string) ([]T, error) {
	res, err := cache.List(kind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(res.Items))
	for _, raw := range res.Items {
		var v T
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", strings.ToLower(kind), err)
		}
		out = append(out, v)
	}
	return out, nil
}

// Pending says which patch to show the effect of: the named stored patch, or
// the spec given (not stored). The diff is between the config without the
// patch and with it, taken as enabled; its target still applies.
type Pending struct {
	Name string
	Spec *domain.ConfigPatchSpec
}

// MachineConfig renders one machine's config; with pending, it answers the
// unified diff the pending patch would make instead.
func (s *Service) MachineConfig(ctx context.Context, tenant, machineName string, pending *Pending) ([]byte, error) {
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
	ng, err := getTyped[domain.NodeGroup](s.cache, domain.Ref{Kind: domain.NodeGroupKind.Kind, Tenant: tenant, Name: m.Spec.NodeGroup})
	if err != nil {
		return nil, fmt.Errorf("machine %s: %w", machineName, err)
	}
	return s.renderOrDiff(v, ng, m, pending)
}

// NodeGroupConfig renders a node group's template: the config of a machine of
// the group before machine-targeted patches. With pending it answers a diff.
func (s *Service) NodeGroupConfig(ctx context.Context, tenant, nodeGroup string, pending *Pending) ([]byte, error) {
	v, err := s.load(ctx, tenant)
	if err != nil {
		return nil, err
	}
	ng, err := getTyped[domain.NodeGroup](s.cache, domain.Ref{Kind: domain.NodeGroupKind.Kind, Tenant: tenant, Name: nodeGroup})
	if err != nil {
		return nil, err
	}
	return s.renderOrDiff(v, ng, nil, pending)
}

func (s *Service) renderOrDiff(v *tenantView, ng *domain.NodeGroup, m *domain.Machine, pending *Pending) ([]byte, error) {
	in := RenderInput{Tenant: v.tenant, NodeGroup: ng, Machine: m, ControlPlaneAddress: v.firstControlPlane(), Bundle: v.bundle}
	if pending == nil {
		in.Patches = v.patches
		return Render(in)
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
	before, err := Render(in)
	if err != nil {
		return nil, err
	}
	in.Patches = append(append([]domain.ConfigPatch{}, without...), p)
	after, err := Render(in)
	if err != nil {
		return nil, err
	}
	label := "configpatch/" + name
	return []byte(UnifiedDiff("current", "with "+label, string(before), string(after))), nil
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
		if ng, err := getTyped[domain.NodeGroup](s.cache, domain.Ref{Kind: domain.NodeGroupKind.Kind, Tenant: tenant, Name: spec.Target.Name}); err == nil {
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
		if _, err := render(RenderInput{Tenant: v.tenant, NodeGroup: ng, ControlPlaneAddress: cp, Patches: []domain.ConfigPatch{p}, Bundle: v.bundle}); err != nil {
			return fmt.Sprintf("applied to a %s config: %s", role, strings.TrimPrefix(err.Error(), "configpatch pending: ")), nil
		}
	}
	return "", nil
}
