package handlers

import (
	"encoding/json"
	"fmt"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/providers"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Machine addresses are untrusted input (issue 42, finding 5): an editor of
// one tenant listed the address of another tenant's maintenance-mode
// machine in a metal group, and the apply gave it the editor's PKI. A write
// that would hold an address another tenant holds, or another node group
// or machine of the same tenant, is refused on the field at fault, whoever
// writes it; so is an IP address the metal address rule refuses
// (Config.MetalAddresses). The apply worker checks both again before it
// dials (a write may race another tenant's). Addresses the stored object
// holds already are not checked again, so a conflict born of such a race
// does not block the object's other edits (the apply reports it).

func (a *API) machineHooks() kindHooks {
	return &specHooks[domain.MachineSpec]{a: a, kind: domain.MachineKind, checks: []func(domain.Ref, *domain.Object, *domain.MachineSpec) []domain.Cause{
		a.machineAddressCauses,
	}}
}

// machineAddressCauses checks a Machine's spec.address when it is new.
func (a *API) machineAddressCauses(ref domain.Ref, cur *domain.Object, next *domain.MachineSpec) []domain.Cause {
	if next.Address == "" {
		return nil
	}
	if cur != nil {
		var old domain.MachineSpec
		if json.Unmarshal(cur.Spec, &old) == nil && domain.CanonicalAddress(old.Address) == domain.CanonicalAddress(next.Address) {
			return nil
		}
	}
	self := domain.AddressClaim{Kind: domain.MachineKind.Kind, Tenant: ref.Tenant, Name: ref.Name, NodeGroup: next.NodeGroup}
	return a.addressCauses("spec.address", next.Address, self)
}

// listedMachines are the addresses of a metal group's spec.providerConfig.machines.
type listedMachines struct {
	Machines []struct {
		Address string `json:"address"`
	} `json:"machines"`
}

// nodeGroupAddressCauses checks the machines a metal group lists that its
// stored spec did not.
func (a *API) nodeGroupAddressCauses(ref domain.Ref, cur *domain.Object, next *domain.NodeGroupSpec) []domain.Cause {
	var listed listedMachines
	if len(next.ProviderConfig) == 0 || json.Unmarshal(next.ProviderConfig, &listed) != nil || len(listed.Machines) == 0 {
		return nil // nothing listed (the provider type's validation reports a bad providerConfig)
	}
	p, ok, err := projections.Get[domain.Provider](a.cache, domain.ObjectRef(domain.ProviderKind, "", next.Provider))
	if err != nil || !ok || !providers.IsMetal(p) {
		return nil // another type lists no machines; a missing Provider is refused by nodeGroupProviderCauses
	}
	held := map[string]bool{}
	if cur != nil {
		var old domain.NodeGroupSpec
		var was listedMachines
		if json.Unmarshal(cur.Spec, &old) == nil && len(old.ProviderConfig) > 0 && json.Unmarshal(old.ProviderConfig, &was) == nil {
			for _, m := range was.Machines {
				held[domain.CanonicalAddress(m.Address)] = true
			}
		}
	}
	self := domain.AddressClaim{Kind: domain.NodeGroupKind.Kind, Tenant: ref.Tenant, Name: ref.Name}
	var causes []domain.Cause
	for i, m := range listed.Machines {
		if m.Address == "" || held[domain.CanonicalAddress(m.Address)] {
			continue
		}
		causes = append(causes, a.addressCauses(field.NewPath("spec", "providerConfig", "machines").Index(i).Child("address").String(), m.Address, self)...)
	}
	return causes
}

// nodeGroupMetalAutoscalingCauses refuses spec.autoscaling and
// spec.members on a metal group: its machines are the ones it lists or its
// selector picks, not indexes an autoscaler can add and remove.
func (a *API) nodeGroupMetalAutoscalingCauses(_ domain.Ref, _ *domain.Object, next *domain.NodeGroupSpec) []domain.Cause {
	if next.Autoscaling == nil && next.Members == nil {
		return nil
	}
	p, ok, err := projections.Get[domain.Provider](a.cache, domain.ObjectRef(domain.ProviderKind, "", next.Provider))
	if err != nil || !ok || !providers.IsMetal(p) {
		return nil
	}
	f := "spec.autoscaling"
	if next.Autoscaling == nil {
		f = "spec.members"
	}
	return []domain.Cause{{Field: f, Type: domain.CauseNotSupported,
		Message: "metal groups do not autoscale yet: their machines are the ones providerConfig lists or selects"}}
}

// addressCauses refuses address at field when the metal address rule
// refuses it or another object holds it (domain.ConflictingClaim).
func (a *API) addressCauses(field, address string, self domain.AddressClaim) []domain.Cause {
	if err := a.cfg.MetalAddresses.CheckAddress(address); err != nil {
		return []domain.Cause{{Field: field, Type: domain.CauseForbidden,
			Message: fmt.Sprintf("%v: metal machines may not be there (serve --metal-networks)", err)}}
	}
	if c, ok := domain.ConflictingClaim(self, a.cache.AddressClaims(address)); ok {
		return []domain.Cause{{Field: field, Type: domain.CauseDuplicate, Message: domain.AddressConflictMessage(address, self.Tenant, c)}}
	}
	return nil
}
