package talos

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config"
	configdoc "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/network"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"

	"github.com/rezuscloud/rezuscloud/domain"
)

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
	// Bundle is the tenant's PKI as PKI.Bundle gives it: during a rotation
	// its OS and Kubernetes CA certificates carry the accepted CAs after the
	// issuing one, which go to machine.acceptedCAs and cluster.acceptedCAs.
	Bundle *secrets.Bundle
	// KubernetesVersion overrides the version the config carries (a
	// Kubernetes upgrade renders a machine's next and previous configs);
	// empty means KubernetesVersionOf(Tenant).
	KubernetesVersion string
	// ImageFactory is the Image Factory URL the installer comes from when
	// the node group names no installImage; "" is the public one.
	ImageFactory string
}

// KubernetesVersionOf is the Kubernetes version a tenant's configs carry: the
// one its machines were last moved to (status.kubernetesVersion), else the
// declared one. A spec change reaches machines only through an Upgrade run.
func KubernetesVersionOf(t *domain.Tenant) string {
	if v := t.Status.KubernetesVersion; v != "" {
		return v
	}
	return t.Spec.KubernetesVersion
}

// kubernetesVersion is the version the rendered config carries.
func (in RenderInput) kubernetesVersion() string {
	if in.KubernetesVersion != "" {
		return in.KubernetesVersion
	}
	return KubernetesVersionOf(in.Tenant)
}

// ConfigHash is the hex SHA-256 of a config's bytes: the value of a machine's
// domain.AnnotationConfigHash, and what the node emulator reports as the
// config a node holds.
func ConfigHash(cfg []byte) string {
	sum := sha256.Sum256(cfg)
	return hex.EncodeToString(sum[:])
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
	pc, err := domain.ReadInstallSettings(in.NodeGroup.Spec.ProviderConfig)
	if err != nil {
		return nil, fmt.Errorf("node group %s: %w", in.NodeGroup.Metadata.Name, err)
	}
	if in.Machine != nil {
		pc.InstallDisk = pc.DiskFor(in.Machine.Spec.Address)
	}
	if in.Machine != nil && in.Machine.Metadata.Annotations[domain.AnnotationInstallDisk] != "" {
		// A registered machine's own disk.
		pc.InstallDisk = in.Machine.Metadata.Annotations[domain.AnnotationInstallDisk]
	}
	if pc.InstallDisk == "" {
		pc.InstallDisk = domain.DefaultInstallDisk
	}
	if pc.InstallImage == "" {
		factory := in.ImageFactory
		if factory == "" {
			factory = domain.DefaultImageFactory
		}
		pc.InstallImage = domain.FactoryInstaller(factory, domain.EffectiveSchematic(&in.Tenant.Spec, &in.NodeGroup.Spec), version)
	}
	nw := in.Tenant.Spec.Network
	bundle, accepted, err := SplitTrust(in.Bundle)
	if err != nil {
		return nil, err
	}
	gen, err := generate.NewInput(in.Tenant.Metadata.Name, endpoint, strings.TrimPrefix(in.kubernetesVersion(), "v"),
		generate.WithSecretsBundle(bundle),
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
	if base, err = withAccepted(base, accepted); err != nil {
		return nil, fmt.Errorf("adding the accepted CAs: %w", err)
	}
	if in.Machine != nil && in.Machine.Spec.Hostname != "" {
		if base, err = withHostname(base, in.Machine.Spec.Hostname); err != nil {
			return nil, fmt.Errorf("setting the hostname: %w", err)
		}
	}
	machineName := ""
	if in.Machine != nil {
		machineName = in.Machine.Metadata.Name
	}
	patches := []configpatcher.Patch{}
	if p, err := nodeGroupPatch(in.NodeGroup, in.Tenant.Metadata.Name, machineName); err != nil {
		return nil, err
	} else if p != nil {
		patches = append(patches, p)
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

// withAccepted lists the CAs a rotation accepts beside the issuing ones, as
// talosctl rotate-ca patches them in.
func withAccepted(cfg config.Provider, acc Accepted) (config.Provider, error) {
	if len(acc.OS) == 0 && len(acc.Kubernetes) == 0 {
		return cfg, nil
	}
	return cfg.PatchV1Alpha1(func(c *v1alpha1.Config) error {
		if len(acc.OS) > 0 && c.MachineConfig != nil {
			c.MachineConfig.MachineAcceptedCAs = append(c.MachineConfig.MachineAcceptedCAs, acc.OS...)
		}
		if len(acc.Kubernetes) > 0 && c.ClusterConfig != nil {
			c.ClusterConfig.ClusterAcceptedCAs = append(c.ClusterConfig.ClusterAcceptedCAs, acc.Kubernetes...)
		}
		return nil
	})
}

// validationMode is how RezusCloud's machines run: installed to disk, not in a container.
type validationMode struct{}

func (validationMode) String() string        { return "metal" }
func (validationMode) RequiresInstall() bool { return true }
func (validationMode) InContainer() bool     { return false }

// withHostname gives the machine a static hostname: in its HostnameConfig
// document (Talos 1.12+, which replaces the automatic "stable" hostname), else
// in v1alpha1's machine.network.hostname. Patches applied afterwards may
// still override it.
func withHostname(cfg config.Provider, hostname string) (config.Provider, error) {
	docs := cfg.Documents()
	out := make([]configdoc.Document, 0, len(docs))
	found := false
	for _, d := range docs {
		if h, ok := d.(*network.HostnameConfigV1Alpha1); ok {
			h = h.DeepCopy()
			h.ConfigAuto = nil
			h.ConfigHostname = hostname
			d, found = h, true
		}
		out = append(out, d)
	}
	if !found {
		for i, d := range out {
			if v1, ok := d.(*v1alpha1.Config); ok && v1.MachineConfig != nil {
				v1 = v1.DeepCopy()
				//lint:ignore SA1019 pre-1.12 configs have no HostnameConfig document: machine.network.hostname is theirs
				if v1.MachineConfig.MachineNetwork == nil {
					//lint:ignore SA1019 see above
					v1.MachineConfig.MachineNetwork = &v1alpha1.NetworkConfig{}
				}
				//lint:ignore SA1019 see above
				v1.MachineConfig.MachineNetwork.NetworkHostname = hostname
				out[i] = v1
			}
		}
	}
	return container.New(out...)
}
