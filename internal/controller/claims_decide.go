package controller

import (
	"hash/fnv"
	"slices"
)

// Owner is the member that should work tenant: rendezvous (highest random
// weight) hashing over the live members. Every replica computes it alone
// from the same heartbeats, and a member joining or leaving moves only the
// tenants it wins or held: 1/N of them, not a reshuffle (consistent hashing
// without a ring to keep). "" when there are no members.
func Owner(members []string, tenant string) string {
	var best string
	var top uint64
	for _, m := range members {
		w := weight(m, tenant)
		if best == "" || w > top || (w == top && m < best) {
			best, top = m, w
		}
	}
	return best
}

// weight is member's score for tenant: 64-bit FNV-1a of both, finished by
// a mixer so that close inputs spread over the whole range.
func weight(member, tenant string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(member))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(tenant))
	x := h.Sum64()
	// splitmix64's finaliser.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Claim is who works a tenant, as the claims bucket says: the member (a
// replica's incarnation id) and the entry's revision, which every change
// of the claim must name (compare-and-set).
type Claim struct {
	Member string
	Rev    uint64
	// Holder names the member's replica (its heartbeat's key).
	Holder string
}

// ClaimOp is one change of a claim a replica decides to make.
type ClaimOp struct {
	Tenant string
	Kind   ClaimOpKind
	// To is the member a Give hands the tenant to.
	To string
	// Rev is the revision the claim must still have (0: absent).
	Rev uint64
}

// ClaimOpKind is what a ClaimOp does.
type ClaimOpKind int

const (
	// Take claims a tenant nobody live holds.
	Take ClaimOpKind = iota + 1
	// Give hands a tenant this replica holds to its owner, once its runs
	// here have ended.
	Give
	// Drop deletes the claim of a tenant that is gone (or, in a cluster
	// with a replica of a release before claims, one idle here), once its
	// runs here have ended.
	Drop
)

// ClaimsInput is what DecideClaims decides from.
type ClaimsInput struct {
	// Me is this replica's member id.
	Me string
	// Members are the live members' ids (this replica among them).
	Members []string
	// Tenants are the tenants of the read model.
	Tenants []string
	// Wanted are tenants this replica has queued work for, which its read
	// model may not have yet.
	Wanted map[string]bool
	// Busy are the tenants with runs in flight here.
	Busy map[string]bool
	// Claims are the claims bucket's entries, by tenant.
	Claims map[string]Claim
	// Legacy says a replica of a release before claims runs too: it runs
	// whatever its controllers' leases give it, so nobody claims tenants
	// ahead of work; a lease holder takes a claim when it runs the tenant
	// (OnDemand) and gives it up when idle.
	Legacy bool
	// OnDemand are the tenants a lease holder here is about to run
	// (Legacy only).
	OnDemand map[string]bool
}

// DecideClaims says which claims this replica changes. Claims are changed
// by compare-and-set, so replicas whose views of the members differ for a
// moment cannot both hold a tenant: the loser of a race sees the winner's
// claim and decides again. With every replica on claims (not Legacy):
//   - a tenant claimed by nobody live is taken by its owner;
//   - a tenant held here whose owner is another live member is given to it
//     (after this replica's runs of it end: the caller waits for them);
//   - a tenant held here that is gone from the read model and not wanted is
//     dropped (and a gone member's claim of one, by the tenant's owner).
//
// In Legacy, claims follow the leases: a tenant on demand here is taken if
// nobody live holds it, and one held here that is neither busy nor on
// demand is dropped, so another replica's lease holder can take it.
func DecideClaims(in ClaimsInput) []ClaimOp {
	live := map[string]bool{}
	for _, m := range in.Members {
		live[m] = true
	}
	if !live[in.Me] {
		return nil // not a member (yet, or any more): changes nothing
	}
	candidates := map[string]bool{}
	for _, t := range in.Tenants {
		candidates[t] = true
	}
	for t := range in.Wanted {
		candidates[t] = true
	}
	for t := range in.OnDemand {
		candidates[t] = true
	}
	for t := range in.Claims {
		candidates[t] = true
	}
	present := map[string]bool{}
	for _, t := range in.Tenants {
		present[t] = true
	}
	names := make([]string, 0, len(candidates))
	for t := range candidates {
		names = append(names, t)
	}
	slices.Sort(names)
	var ops []ClaimOp
	for _, t := range names {
		c, claimed := in.Claims[t]
		mine := claimed && c.Member == in.Me
		free := !claimed || !live[c.Member]
		if in.Legacy {
			switch {
			case free && in.OnDemand[t]:
				ops = append(ops, ClaimOp{Tenant: t, Kind: Take, Rev: c.Rev})
			case mine && !in.Busy[t] && !in.OnDemand[t]:
				ops = append(ops, ClaimOp{Tenant: t, Kind: Drop, Rev: c.Rev})
			}
			continue
		}
		wanted := present[t] || in.Wanted[t]
		owner := Owner(in.Members, t)
		switch {
		case free && wanted && owner == in.Me:
			ops = append(ops, ClaimOp{Tenant: t, Kind: Take, Rev: c.Rev})
		case free && claimed && !wanted && owner == in.Me:
			// A gone member's claim of a gone tenant: its owner cleans up.
			ops = append(ops, ClaimOp{Tenant: t, Kind: Drop, Rev: c.Rev})
		case mine && !wanted:
			ops = append(ops, ClaimOp{Tenant: t, Kind: Drop, Rev: c.Rev})
		case mine && owner != in.Me:
			ops = append(ops, ClaimOp{Tenant: t, Kind: Give, To: owner, Rev: c.Rev})
		}
	}
	return ops
}
