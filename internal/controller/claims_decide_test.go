package controller

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOwnerSpreadsTenantsAndMovesOnlyTheFairShare(t *testing.T) {
	tenants := make([]string, 3000)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("tenant-%d", i)
	}
	owners := func(members []string) map[string]string {
		out := map[string]string{}
		for _, tn := range tenants {
			out[tn] = Owner(members, tn)
		}
		return out
	}
	three := []string{"a", "b", "c"}
	before := owners(three)
	count := map[string]int{}
	for _, o := range before {
		count[o]++
	}
	for _, m := range three {
		// A fair share is 1000; rendezvous hashing keeps each within a few
		// percent of it at this size.
		require.InDelta(t, 1000, count[m], 100, "tenants of %s: %v", m, count)
	}

	tests := []struct {
		name    string
		members []string
		// moved is the share of tenants that may change owner: the new
		// member's fair share on a join, the lost member's on a leave.
		moved float64
		// from names the only member tenants may move from ("" any) and to
		// the only one they may move to.
		from, to string
	}{
		{name: "join", members: []string{"a", "b", "c", "d"}, moved: 1.0 / 4, to: "d"},
		{name: "leave", members: []string{"a", "c"}, moved: 1.0 / 3, from: "b"},
		{name: "same members in another order", members: []string{"c", "a", "b"}, moved: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			after := owners(tc.members)
			moved := 0
			for _, tn := range tenants {
				if before[tn] == after[tn] {
					continue
				}
				moved++
				if tc.from != "" {
					require.Equal(t, tc.from, before[tn], "%s moved from a member that stayed", tn)
				}
				if tc.to != "" {
					require.Equal(t, tc.to, after[tn], "%s moved to a member that was there", tn)
				}
			}
			require.InDelta(t, tc.moved*float64(len(tenants)), float64(moved), 0.04*float64(len(tenants)))
		})
	}
	require.Equal(t, "", Owner(nil, "x"))
}

func TestDecideClaims(t *testing.T) {
	// Owners among a, b, c of the tenants used below, as the hash has them.
	members := []string{"a", "b", "c"}
	ownedBy := func(m string, skip int) string {
		for i := 0; ; i++ {
			tn := fmt.Sprintf("t%d", i)
			if Owner(members, tn) == m {
				if skip == 0 {
					return tn
				}
				skip--
			}
		}
	}
	mineA, mineA2, ofB := ownedBy("a", 0), ownedBy("a", 1), ownedBy("b", 0)
	tests := []struct {
		name string
		in   ClaimsInput
		want []ClaimOp
	}{{
		name: "an unclaimed tenant is taken by its owner only",
		in:   ClaimsInput{Me: "a", Members: members, Tenants: []string{mineA, ofB}},
		want: []ClaimOp{{Tenant: mineA, Kind: Take}},
	}, {
		name: "a tenant claimed by a gone member is taken by its owner at the claim's revision",
		in: ClaimsInput{Me: "a", Members: members, Tenants: []string{mineA, ofB},
			Claims: map[string]Claim{mineA: {Member: "dead", Rev: 7}, ofB: {Member: "dead", Rev: 8}}},
		want: []ClaimOp{{Tenant: mineA, Kind: Take, Rev: 7}},
	}, {
		name: "a tenant held by a live member is left alone, even when this replica owns it",
		in: ClaimsInput{Me: "a", Members: members, Tenants: []string{mineA},
			Claims: map[string]Claim{mineA: {Member: "b", Rev: 3}}},
	}, {
		name: "a tenant held here that another member owns is given to it",
		in: ClaimsInput{Me: "a", Members: members, Tenants: []string{mineA, ofB},
			Claims: map[string]Claim{mineA: {Member: "a", Rev: 1}, ofB: {Member: "a", Rev: 2}}},
		want: []ClaimOp{{Tenant: ofB, Kind: Give, To: "b", Rev: 2}},
	}, {
		name: "a tenant wanted here but not yet in the read model is taken",
		in:   ClaimsInput{Me: "a", Members: members, Wanted: map[string]bool{mineA: true}},
		want: []ClaimOp{{Tenant: mineA, Kind: Take}},
	}, {
		name: "a gone tenant held here is dropped; a gone member's claim of one by its owner",
		in: ClaimsInput{Me: "a", Members: members, Tenants: []string{mineA},
			Claims: map[string]Claim{mineA2: {Member: "a", Rev: 4}, ofB: {Member: "a", Rev: 5}, mineA + "x": {Member: "dead", Rev: 6}}},
		want: append([]ClaimOp{{Tenant: mineA, Kind: Take}, {Tenant: mineA2, Kind: Drop, Rev: 4}}, func() []ClaimOp {
			out := []ClaimOp{{Tenant: ofB, Kind: Drop, Rev: 5}}
			if Owner(members, mineA+"x") == "a" {
				out = append([]ClaimOp{{Tenant: mineA + "x", Kind: Drop, Rev: 6}}, out...)
			}
			return out
		}()...),
	}, {
		name: "a replica not among the members changes nothing",
		in:   ClaimsInput{Me: "z", Members: members, Tenants: []string{mineA}},
	}, {
		name: "legacy: nothing is taken ahead of work",
		in:   ClaimsInput{Me: "a", Members: members, Legacy: true, Tenants: []string{mineA, ofB}},
	}, {
		name: "legacy: a tenant on demand is taken when free, whoever owns it",
		in: ClaimsInput{Me: "a", Members: members, Legacy: true, Tenants: []string{mineA, ofB},
			OnDemand: map[string]bool{ofB: true, mineA: true}, Claims: map[string]Claim{mineA: {Member: "c", Rev: 9}}},
		want: []ClaimOp{{Tenant: ofB, Kind: Take}},
	}, {
		name: "legacy: a claim held here is dropped once idle",
		in: ClaimsInput{Me: "a", Members: members, Legacy: true, Tenants: []string{mineA, ofB, mineA2},
			Busy:   map[string]bool{mineA2: true},
			Claims: map[string]Claim{mineA: {Member: "a", Rev: 1}, ofB: {Member: "a", Rev: 2}, mineA2: {Member: "a", Rev: 3}}},
		want: []ClaimOp{{Tenant: mineA, Kind: Drop, Rev: 1}, {Tenant: ofB, Kind: Drop, Rev: 2}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := DecideClaims(tc.in)
			want := tc.want
			require.ElementsMatch(t, want, got)
		})
	}
}
