package apply

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/providers"
	"github.com/rezuscloud/rezuscloud/talos"
)

// A new machine's day-0 hash is the hash of what the config controller
// renders for it once built (talos.Desired renders with the endpoint address
// and the machine's hostname): otherwise every new machine would get an apply
// it does not need, and its annotation would not say what it holds.
func TestDay0ConfigsAreWhatTheMachinesGetAndWhatDay2Renders(t *testing.T) {
	tn := &domain.Tenant{Metadata: domain.ObjectMeta{Name: "acme"}}
	tn.Spec.Default()
	bundle, err := talos.NewBundle(tn.Spec.TalosVersion, time.Now())
	require.NoError(t, err)
	cp := &domain.NodeGroup{Metadata: domain.ObjectMeta{Name: "cp", Tenant: "acme"}, Spec: domain.NodeGroupSpec{Role: domain.RoleControlPlane, Count: 1}}
	workers := &domain.NodeGroup{Metadata: domain.ObjectMeta{Name: "workers", Tenant: "acme"}, Spec: domain.NodeGroupSpec{Role: domain.RoleWorker, Count: 1}}
	render := func(ng *domain.NodeGroup, name, cpAddress, address string) []byte {
		m := &domain.Machine{Metadata: domain.ObjectMeta{Name: name, Tenant: "acme"},
			Spec: domain.MachineSpec{NodeGroup: ng.Metadata.Name, Role: ng.Spec.Role, Address: address, Hostname: providers.CloudName("acme", name)}}
		cfg, err := talos.Render(talos.RenderInput{Tenant: tn, NodeGroup: ng, Machine: m, ControlPlaneAddress: cpAddress, Bundle: bundle})
		require.NoError(t, err)
		return cfg
	}
	const endpoint = "127.0.0.7"
	tests := []struct {
		name        string
		placeholder bool
		endpoint    string
		want        map[string]bool
	}{
		{"endpoint known before the run", false, "", map[string]bool{"cp-0": true, "workers-0": true}},
		{"placeholder replaced by the endpoint tofu made", true, endpoint, map[string]bool{"cp-0": true, "workers-0": true}},
		{"placeholder without an endpoint: bytes unknown", true, "", map[string]bool{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cpAddress := endpoint
			if tc.placeholder {
				cpAddress = providers.EndpointPlaceholder
			}
			in := providers.GenerateInput{Tenant: tn, PlaceholderEndpoint: tc.placeholder, Groups: []providers.GroupInput{
				{NodeGroup: cp, Machines: []providers.MachineInput{{Name: "cp-0", Config: render(cp, "cp-0", cpAddress, "")}}},
				{NodeGroup: workers, Machines: []providers.MachineInput{{Name: "workers-0", Config: render(workers, "workers-0", cpAddress, "")}}},
			}}
			got := day0Configs(in, tc.endpoint)
			require.Len(t, got, len(tc.want))
			if len(tc.want) == 0 {
				return
			}
			// What day 2 renders once the machines have their addresses.
			require.Equal(t, talos.ConfigHash(render(cp, "cp-0", endpoint, endpoint)), talos.ConfigHash(got["cp-0"]))
			require.Equal(t, talos.ConfigHash(render(workers, "workers-0", endpoint, "127.0.0.8")), talos.ConfigHash(got["workers-0"]))
		})
	}
}
