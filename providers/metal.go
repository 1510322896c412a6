package providers

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/rezuscloud/rezuscloud/domain"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Bare metal (Provider type metal) is built straight through the Talos API,
// not with tofu (the apply worker's metal path): this file is what the rest reads of
// a metal node group's providerConfig.
//
//	providerConfig:
//	  machines:                        # count must equal the number listed
//	  - {address: 10.0.0.10, installDisk: /dev/nvme0n1, hostname: cp-a}
//	  selector: "rack=r1"             # or: registered Machines of the group matching this label selector
//	  installDisk: /dev/sda            # the default for listed machines

// metalType is applied through the Talos API: no generator.
var metalType = ProviderType{
	Type:        domain.ProviderMetal,
	GroupConfig: metalGroupConfig{},
	config:      metalConfig{},
}

// metalProviderConfig is a metal Provider's spec.config: it takes no
// settings (the machines are listed or selected per node group).
type metalProviderConfig struct{}

// metalGroupConfig is a metal group's providerConfig; its installDisk is
// the default of the listed machines.
type metalGroupConfig struct {
	Machines []metalMachine `json:"machines,omitempty"`
	Selector string         `json:"selector,omitempty"`
	domain.TalosInstall
}

type metalMachine struct {
	Address     string `json:"address"`
	InstallDisk string `json:"installDisk,omitempty"`
	Hostname    string `json:"hostname,omitempty"`
}

// MetalTarget is one machine a metal group wants.
type MetalTarget struct {
	Name, Address, Hostname, InstallDisk string
	NodeGroup                            *domain.NodeGroup
	// Registered machines are the user's objects (Machine is set); listed
	// ones are RezusCloud's.
	Registered bool
	Machine    *domain.Machine
}

// IsMetal reports whether p is a metal Provider.
func IsMetal(p *domain.Provider) bool { return p != nil && p.Spec.Type == domain.ProviderMetal }

// MetalTargets resolves a metal group's machines, with errors naming the field at fault.
func MetalTargets(ng *domain.NodeGroup, machines []domain.Machine) ([]MetalTarget, error) {
	var cfg metalGroupConfig
	pc := field.NewPath("spec", "providerConfig")
	bad := func(p *field.Path, msg string) error {
		return domain.NewInvalid(domain.NodeGroupKind.Kind, ng.Metadata.Name, []domain.Cause{{Field: p.String(), Type: domain.CauseInvalid, Message: msg}})
	}
	if len(ng.Spec.ProviderConfig) > 0 {
		if causes := domain.DecodeStrict(ng.Spec.ProviderConfig, &cfg, "spec.providerConfig"); len(causes) > 0 {
			return nil, domain.NewInvalid(domain.NodeGroupKind.Kind, ng.Metadata.Name, causes)
		}
	}
	switch {
	case len(cfg.Machines) > 0 && cfg.Selector != "":
		return nil, bad(pc, "give machines or selector, not both")
	case len(cfg.Machines) > 0:
		if len(cfg.Machines) != ng.Spec.Count {
			return nil, bad(pc.Child("machines"), fmt.Sprintf("lists %d machines but spec.count is %d", len(cfg.Machines), ng.Spec.Count))
		}
		var out []MetalTarget
		seen := map[string]bool{}
		for i, m := range cfg.Machines {
			f := pc.Child("machines").Index(i)
			if _, err := netip.ParseAddr(m.Address); err != nil && !looksLikeHost(m.Address) {
				return nil, bad(f.Child("address"), fmt.Sprintf("%q is neither an IP address nor a DNS name", m.Address))
			}
			if seen[m.Address] {
				return nil, bad(f.Child("address"), fmt.Sprintf("%s is listed twice", m.Address))
			}
			seen[m.Address] = true
			disk := m.InstallDisk
			if disk == "" {
				disk = cfg.InstallDisk
			}
			out = append(out, MetalTarget{Name: MachineName(ng.Metadata.Name, i), Address: m.Address, Hostname: m.Hostname, InstallDisk: disk, NodeGroup: ng})
		}
		return out, nil
	case cfg.Selector != "":
		sel, err := domain.ParseSelector(cfg.Selector)
		if err != nil {
			return nil, bad(pc.Child("selector"), err.Error())
		}
		var out []MetalTarget
		for i := range machines {
			m := &machines[i]
			if m.Spec.NodeGroup == ng.Metadata.Name && m.Metadata.Labels[domain.LabelManagedBy] == "" && sel.Matches(m.Metadata.Labels) && m.Spec.Address != "" {
				out = append(out, MetalTarget{Name: m.Metadata.Name, Address: m.Spec.Address, Hostname: m.Spec.Hostname, InstallDisk: cfg.InstallDisk, NodeGroup: ng, Registered: true, Machine: m})
			}
		}
		slices.SortFunc(out, func(a, b MetalTarget) int { return strings.Compare(a.Name, b.Name) })
		if len(out) < ng.Spec.Count {
			return nil, bad(pc.Child("selector"), fmt.Sprintf("%d registered machines of node group %s with an address match %q; spec.count is %d", len(out), ng.Metadata.Name, cfg.Selector, ng.Spec.Count))
		}
		return out[:ng.Spec.Count], nil
	case ng.Spec.Count == 0:
		return nil, nil
	}
	return nil, bad(pc, "a metal node group lists its machines (machines: [{address: ...}]) or selects registered ones (selector: ...)")
}

func looksLikeHost(s string) bool {
	return s != "" && !strings.ContainsAny(s, " /:@") && len(s) <= 253
}

// MetalControlPlaneAddress is the first listed control-plane address of the
// tenant's metal groups (by machine name): the endpoint's host when the tenant
// declares none.
func MetalControlPlaneAddress(groups []domain.NodeGroup, providers map[string]*domain.Provider, machines []domain.Machine) string {
	var best, addr string
	for i := range groups {
		ng := &groups[i]
		if ng.Spec.Role != domain.RoleControlPlane || !IsMetal(providers[ng.Spec.Provider]) {
			continue
		}
		ts, err := MetalTargets(ng, machines)
		if err != nil {
			continue
		}
		for _, t := range ts {
			if best == "" || t.Name < best {
				best, addr = t.Name, t.Address
			}
		}
	}
	return addr
}

// metalConfig validates metal configs.
type metalConfig struct{}

func (metalConfig) decodeConfig(raw json.RawMessage) (any, []domain.Cause) {
	var cfg metalProviderConfig
	return cfg, decodeStrictObject(raw, &cfg, "spec.config")
}

func (metalConfig) decodeGroupConfig(raw json.RawMessage) (any, []domain.Cause) {
	var cfg metalGroupConfig
	return cfg, decodeStrictObject(raw, &cfg, "spec.providerConfig")
}

// metalGroupCauses are metalTargets' causes for a group that lists its
// machines; for a selector, the selector's syntax.
func metalGroupCauses(spec *domain.NodeGroupSpec) []domain.Cause {
	var cfg metalGroupConfig
	if causes := decodeStrictObject(spec.ProviderConfig, &cfg, "spec.providerConfig"); len(causes) > 0 {
		return causes
	}
	if cfg.Selector != "" && len(cfg.Machines) == 0 {
		if _, err := domain.ParseSelector(cfg.Selector); err != nil {
			return []domain.Cause{{Field: "spec.providerConfig.selector", Type: domain.CauseInvalid, Message: err.Error()}}
		}
		return nil
	}
	_, err := MetalTargets(&domain.NodeGroup{Metadata: domain.ObjectMeta{Name: "group"}, Spec: *spec}, nil)
	if err == nil {
		return nil
	}
	var de *domain.Error
	if errors.As(err, &de) && len(de.Causes) > 0 {
		return de.Causes
	}
	return []domain.Cause{{Field: "spec.providerConfig", Type: domain.CauseInvalid, Message: fmt.Sprint(err)}}
}
