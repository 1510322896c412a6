package projections

// The cache's index of machine addresses: which Machines (spec.address) and
// NodeGroups (spec.providerConfig.machines[].address) hold each address, so
// the API and the apply worker find who holds an address in time
// proportional to its holders, not by listing and decoding every machine
// (issue 42: an address of another tenant's machine is refused).

import (
	"cmp"
	"encoding/json"
	"slices"

	"github.com/rezuscloud/rezuscloud/domain"
)

// addressIndex maps a canonical address to its claims, keyed by the
// holder's kind and key.
type addressIndex map[string]map[string]domain.AddressClaim

// update moves ref's claims from old's addresses to e's (either may be nil).
// The caller holds the cache's lock.
func (ai addressIndex) update(ref domain.Ref, old, e *entry) {
	if old == nil && e == nil {
		return
	}
	holder := ref.Kind + "/" + ref.Key()
	if old != nil {
		for _, a := range old.addrs {
			if g := ai[a]; g != nil {
				delete(g, holder)
				if len(g) == 0 {
					delete(ai, a)
				}
			}
		}
	}
	if e == nil || len(e.addrs) == 0 {
		return
	}
	claim := domain.AddressClaim{Kind: ref.Kind, Tenant: ref.Tenant, Name: ref.Name}
	if ref.Kind == domain.MachineKind.Kind && e.ref != "" {
		claim.NodeGroup = e.ref[len(ref.Tenant)+1:] // "<tenant>.<group>"
	}
	for _, a := range e.addrs {
		g := ai[a]
		if g == nil {
			g = map[string]domain.AddressClaim{}
			ai[a] = g
		}
		g[holder] = claim
	}
}

// entryAddresses are the machine addresses an object holds, canonical and
// without repeats: a Machine's spec.address, a NodeGroup's listed metal
// machines (whatever its Provider's type: only metal groups list any).
func entryAddresses(state *domain.Object) []string {
	var out []string
	add := func(a string) {
		if a = domain.CanonicalAddress(a); a == "" {
			return
		}
		for _, x := range out {
			if x == a {
				return
			}
		}
		out = append(out, a)
	}
	switch state.Kind {
	case domain.MachineKind.Kind:
		var s struct {
			Address string `json:"address"`
		}
		if json.Unmarshal(state.Spec, &s) == nil {
			add(s.Address)
		}
	case domain.NodeGroupKind.Kind:
		var s struct {
			ProviderConfig struct {
				Machines []struct {
					Address string `json:"address"`
				} `json:"machines"`
			} `json:"providerConfig"`
		}
		if json.Unmarshal(state.Spec, &s) == nil {
			for _, m := range s.ProviderConfig.Machines {
				add(m.Address)
			}
		}
	}
	return out
}

// AddressClaims returns the Machines and NodeGroups, in every tenant, that
// hold address (in any spelling CanonicalAddress makes equal), ordered by
// kind, tenant and name: work proportional to them, not to all objects.
func (c *Cache) AddressClaims(address string) []domain.AddressClaim {
	a := domain.CanonicalAddress(address)
	c.mu.RLock()
	defer c.mu.RUnlock()
	g := c.addresses[a]
	out := make([]domain.AddressClaim, 0, len(g))
	for _, claim := range g {
		out = append(out, claim)
	}
	slices.SortFunc(out, func(x, y domain.AddressClaim) int {
		return cmp.Or(cmp.Compare(x.Kind, y.Kind), cmp.Compare(x.Tenant, y.Tenant), cmp.Compare(x.Name, y.Name))
	})
	return out
}
