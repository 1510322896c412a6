package domain

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCanonicalAddress(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1":           "10.0.0.1",
		" 10.0.0.1 ":         "10.0.0.1",
		"::ffff:10.0.0.1":    "10.0.0.1",
		"2001:DB8::1":        "2001:db8::1",
		"2001:db8:0:0::1":    "2001:db8::1",
		"fe80::1%eth0":       "fe80::1",
		"Node-2.Lab.":        "node-2.lab",
		"node-2.lab":         "node-2.lab",
		"169.254.169.254":    "169.254.169.254",
		"::ffff:127.0.0.1":   "127.0.0.1",
		"rack1-node.example": "rack1-node.example",
	} {
		assert.Equal(t, want, CanonicalAddress(in), in)
	}
}

func TestConflictingClaim(t *testing.T) {
	ng := func(tenant, name string) AddressClaim {
		return AddressClaim{Kind: NodeGroupKind.Kind, Tenant: tenant, Name: name}
	}
	m := func(tenant, name, group string) AddressClaim {
		return AddressClaim{Kind: MachineKind.Kind, Tenant: tenant, Name: name, NodeGroup: group}
	}
	for _, tc := range []struct {
		name   string
		self   AddressClaim
		claims []AddressClaim
		want   *AddressClaim
	}{
		{"free", ng("a", "cp"), nil, nil},
		{"its own claim", ng("a", "cp"), []AddressClaim{ng("a", "cp")}, nil},
		{"a machine recorded for the group", ng("a", "cp"), []AddressClaim{m("a", "cp-0", "cp")}, nil},
		{"a machine of another tenant", ng("a", "cp"), []AddressClaim{m("b", "spare", "cp")}, &AddressClaim{Kind: "Machine", Tenant: "b", Name: "spare", NodeGroup: "cp"}},
		{"a group of another tenant", ng("a", "cp"), []AddressClaim{ng("b", "cp")}, &AddressClaim{Kind: "NodeGroup", Tenant: "b", Name: "cp"}},
		{"another group of the tenant", ng("a", "cp"), []AddressClaim{ng("a", "workers")}, &AddressClaim{Kind: "NodeGroup", Tenant: "a", Name: "workers"}},
		{"a machine of another group", ng("a", "cp"), []AddressClaim{m("a", "workers-0", "workers")}, &AddressClaim{Kind: "Machine", Tenant: "a", Name: "workers-0", NodeGroup: "workers"}},
		{"machine: itself", m("a", "m1", "cp"), []AddressClaim{m("a", "m1", "cp")}, nil},
		{"machine: the group that lists it", m("a", "cp-0", "cp"), []AddressClaim{ng("a", "cp")}, nil},
		{"machine: another machine of the tenant", m("a", "m2", "workers"), []AddressClaim{m("a", "m1", "cp")}, nil},
		{"machine: a machine of another tenant", m("a", "m2", "cp"), []AddressClaim{m("b", "m1", "cp")}, &AddressClaim{Kind: "Machine", Tenant: "b", Name: "m1", NodeGroup: "cp"}},
		{"machine: a group of another tenant", m("a", "m1", "cp"), []AddressClaim{ng("b", "cp")}, &AddressClaim{Kind: "NodeGroup", Tenant: "b", Name: "cp"}},
		{"machine: another group lists it", m("a", "m1", "cp"), []AddressClaim{ng("a", "workers")}, &AddressClaim{Kind: "NodeGroup", Tenant: "a", Name: "workers"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ConflictingClaim(tc.self, tc.claims)
			if tc.want == nil {
				require.False(t, ok, "%+v", got)
				return
			}
			require.True(t, ok)
			assert.Equal(t, *tc.want, got)
		})
	}
}

func TestAddressConflictMessageHidesOtherTenants(t *testing.T) {
	msg := AddressConflictMessage("10.0.0.5", "a", AddressClaim{Kind: MachineKind.Kind, Tenant: "secret-b", Name: "spare-7"})
	assert.Contains(t, msg, "another tenant")
	assert.NotContains(t, msg, "secret-b")
	assert.NotContains(t, msg, "spare-7")
	assert.Contains(t, AddressConflictMessage("10.0.0.5", "a", AddressClaim{Kind: NodeGroupKind.Kind, Tenant: "a", Name: "workers"}), "node group workers")
}
