package projections

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// The address index follows Machines' spec.address and metal NodeGroups'
// listed machines across tenants as they come, change and go.
func TestCacheAddressClaims(t *testing.T) {
	c := NewCache(nil, nil)
	machine := func(seq uint64, tenant, name, group, address string, deleted bool) *eventstore.Record {
		r := machineRecord(seq, tenant, name, group, deleted)
		r.Event.Object.Spec = []byte(fmt.Sprintf(`{"nodeGroup":%q,"role":"worker","address":%q}`, group, address))
		return r
	}
	group := func(seq uint64, tenant, name, machines string, deleted bool) *eventstore.Record {
		r := nodeGroupRecord(seq, tenant, name, deleted)
		r.Event.Object.Spec = []byte(`{"role":"worker","count":2,"provider":"dc","providerConfig":{"machines":` + machines + `}}`)
		return r
	}
	m := func(tenant, name, group string) domain.AddressClaim {
		return domain.AddressClaim{Kind: domain.MachineKind.Kind, Tenant: tenant, Name: name, NodeGroup: group}
	}
	ng := func(tenant, name string) domain.AddressClaim {
		return domain.AddressClaim{Kind: domain.NodeGroupKind.Kind, Tenant: tenant, Name: name}
	}

	c.apply(machine(1, "beta", "spare", "workers", "10.0.0.5", false))
	c.apply(group(2, "acme", "workers", `[{"address":"10.0.0.4"},{"address":"Node-7.Lab"}]`, false))
	require.Equal(t, []domain.AddressClaim{m("beta", "spare", "workers")}, c.AddressClaims("10.0.0.5"))
	require.Equal(t, []domain.AddressClaim{m("beta", "spare", "workers")}, c.AddressClaims("::ffff:10.0.0.5"), "another spelling of the IP")
	require.Equal(t, []domain.AddressClaim{ng("acme", "workers")}, c.AddressClaims("node-7.lab."))
	require.Empty(t, c.AddressClaims("10.0.0.6"))

	// The group lists beta's machine too: both hold it.
	c.apply(group(3, "acme", "workers", `[{"address":"10.0.0.4"},{"address":"10.0.0.5"}]`, false))
	require.Equal(t, []domain.AddressClaim{m("beta", "spare", "workers"), ng("acme", "workers")}, c.AddressClaims("10.0.0.5"))
	require.Empty(t, c.AddressClaims("node-7.lab"), "an address the group no longer lists")

	// A machine that changes its address, and objects that go, leave nothing behind.
	c.apply(machine(4, "beta", "spare", "workers", "10.0.0.9", false))
	require.Equal(t, []domain.AddressClaim{ng("acme", "workers")}, c.AddressClaims("10.0.0.5"))
	require.Equal(t, []domain.AddressClaim{m("beta", "spare", "workers")}, c.AddressClaims("10.0.0.9"))
	c.apply(machine(5, "beta", "spare", "workers", "10.0.0.9", true))
	c.apply(group(6, "acme", "workers", `[]`, true))
	require.Empty(t, c.AddressClaims("10.0.0.9"))
	require.Empty(t, c.AddressClaims("10.0.0.5"))
	require.Empty(t, c.addresses, "no set left behind")

	// A group of another type with no listed machines holds nothing.
	r := nodeGroupRecord(7, "acme", "cloud", false)
	r.Event.Object.Spec = []byte(`{"role":"worker","count":1,"provider":"oci","providerConfig":{"machines":3}}`)
	c.apply(r)
	require.Empty(t, c.addresses)
}
