package talos

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"

	"github.com/rezuscloud/rezuscloud/domain"
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

// validationMode is how RezusCloud's machines run: installed to disk, not in a container.
type validationMode struct{}

func (validationMode) String() string        { return "metal" }
func (validationMode) RequiresInstall() bool { return true }
func (validationMode) InContainer() bool     { return false }
