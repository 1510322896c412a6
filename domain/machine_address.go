package domain

import (
	"net/netip"
	"strings"
)

// A machine address (a Machine's spec.address, an entry of a metal node
// group's spec.providerConfig.machines) names one host, and a host belongs
// to one tenant: a metal apply gives a machine in maintenance mode the
// tenant's PKI, so an address another tenant holds would be taken over
// (issue 42). These are the pure rules; the read model indexes the claims
// (projections.Cache.AddressClaims), the API refuses a conflicting write and
// the apply worker refuses again before it dials.

// CanonicalAddress is the form addresses are compared in: an IP address
// in its canonical text (an IPv4-mapped IPv6 address as IPv4, without a
// zone), a DNS name in lower case without a trailing dot. Two spellings of
// one IP address compare equal; a name and the IP it resolves to do not
// (the apply worker checks resolved addresses itself).
func CanonicalAddress(s string) string {
	s = strings.TrimSpace(s)
	if ip, err := netip.ParseAddr(s); err == nil {
		return ip.Unmap().WithZone("").String()
	}
	return strings.TrimSuffix(strings.ToLower(s), ".")
}

// AddressClaim is one object's hold on a machine address: a Machine (by
// spec.address, NodeGroup its spec.nodeGroup) or a NodeGroup (by an entry of
// spec.providerConfig.machines).
type AddressClaim struct {
	Kind, Tenant, Name string
	// NodeGroup is a Machine's spec.nodeGroup ("" for a NodeGroup).
	NodeGroup string
}

// ConflictingClaim returns the first of claims that an address held by self
// conflicts with. An address belongs to one tenant: any claim of another
// tenant conflicts. Within a tenant it belongs to one node group: two
// groups listing it conflict, and so do a group listing it and a machine of
// another group (a selector would build it too); the machines recorded for
// a listing group name it and share the address. Two Machines of a tenant
// at one address do not conflict (the tenant's own bookkeeping, as when a
// machine is replaced). self's own claim never conflicts with itself.
func ConflictingClaim(self AddressClaim, claims []AddressClaim) (AddressClaim, bool) {
	for _, c := range claims {
		switch {
		case c.Kind == self.Kind && c.Tenant == self.Tenant && c.Name == self.Name:
			continue
		case c.Tenant != self.Tenant:
			return c, true
		case self.Kind == NodeGroupKind.Kind && c.Kind == MachineKind.Kind && c.NodeGroup == self.Name:
			continue
		case self.Kind == MachineKind.Kind && c.Kind == NodeGroupKind.Kind && c.Name == self.NodeGroup:
			continue
		case self.Kind == MachineKind.Kind && c.Kind == MachineKind.Kind:
			continue
		}
		return c, true
	}
	return AddressClaim{}, false
}

// ForeignClaim returns a claim of claims outside tenant, if any.
func ForeignClaim(tenant string, claims []AddressClaim) (AddressClaim, bool) {
	for _, c := range claims {
		if c.Tenant != tenant {
			return c, true
		}
	}
	return AddressClaim{}, false
}

// AddressConflictMessage says why address is refused because of c, for
// someone of tenant: a claim of another tenant is not named (which tenants
// exist and what they hold is not the writer's to learn).
func AddressConflictMessage(address, tenant string, c AddressClaim) string {
	switch {
	case c.Tenant != tenant:
		return address + " is registered in another tenant: a machine belongs to one tenant (it must leave that tenant first)"
	case c.Kind == NodeGroupKind.Kind:
		return address + " is listed by node group " + c.Name + " already"
	}
	return address + " is the address of machine " + c.Name + " (node group " + c.NodeGroup + ") already; it must leave that group first"
}
