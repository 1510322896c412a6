package providers

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestMetalTargets(t *testing.T) {
	ng := func(count int, pc string) *domain.NodeGroup {
		return &domain.NodeGroup{Metadata: domain.ObjectMeta{Name: "rack", Tenant: "t"},
			Spec: domain.NodeGroupSpec{Role: domain.RoleWorker, Count: count, Provider: "dc", ProviderConfig: json.RawMessage(pc)}}
	}
	registered := []domain.Machine{
		{Metadata: domain.ObjectMeta{Name: "b", Labels: map[string]string{"rack": "r1"}}, Spec: domain.MachineSpec{NodeGroup: "rack", Role: "worker", Address: "10.0.0.2"}},
		{Metadata: domain.ObjectMeta{Name: "a", Labels: map[string]string{"rack": "r1"}}, Spec: domain.MachineSpec{NodeGroup: "rack", Role: "worker", Address: "10.0.0.1"}},
		{Metadata: domain.ObjectMeta{Name: "c", Labels: map[string]string{"rack": "r2"}}, Spec: domain.MachineSpec{NodeGroup: "rack", Role: "worker", Address: "10.0.0.3"}},
		{Metadata: domain.ObjectMeta{Name: "d", Labels: map[string]string{"rack": "r1"}}, Spec: domain.MachineSpec{NodeGroup: "other", Role: "worker", Address: "10.0.0.4"}},
	}
	tests := []struct {
		name  string
		group *domain.NodeGroup
		want  []string // name@address/disk
		field string   // the cause's field when it fails
	}{
		{"listed", ng(2, `{"machines":[{"address":"10.1.0.1","installDisk":"/dev/nvme0n1"},{"address":"node-2.lab"}],"installDisk":"/dev/sdb"}`),
			[]string{"rack-0@10.1.0.1//dev/nvme0n1", "rack-1@node-2.lab//dev/sdb"}, ""},
		{"selected by label, in name order", ng(2, `{"selector":"rack=r1"}`), []string{"a@10.0.0.1/", "b@10.0.0.2/"}, ""},
		{"selector takes count machines", ng(1, `{"selector":"rack in (r1,r2)"}`), []string{"a@10.0.0.1/"}, ""},
		{"count 0 needs nothing", ng(0, ``), nil, ""},
		{"count mismatch", ng(3, `{"machines":[{"address":"10.1.0.1"}]}`), nil, "spec.providerConfig.machines"},
		{"bad address", ng(1, `{"machines":[{"address":"not an address"}]}`), nil, "spec.providerConfig.machines[0].address"},
		{"duplicate address", ng(2, `{"machines":[{"address":"10.1.0.1"},{"address":"10.1.0.1"}]}`), nil, "spec.providerConfig.machines[1].address"},
		{"both", ng(1, `{"machines":[{"address":"10.1.0.1"}],"selector":"a=b"}`), nil, "spec.providerConfig"},
		{"too few selected", ng(3, `{"selector":"rack=r1"}`), nil, "spec.providerConfig.selector"},
		{"bad selector", ng(1, `{"selector":"=="}`), nil, "spec.providerConfig.selector"},
		{"unknown field", ng(1, `{"machine":[]}`), nil, "spec.providerConfig.machine"},
		{"nothing given", ng(1, `{}`), nil, "spec.providerConfig"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MetalTargets(tc.group, registered)
			if tc.field != "" {
				require.Error(t, err)
				st := domain.StatusOf(err)
				require.NotNil(t, st.Details, err.Error())
				require.Equal(t, tc.field, st.Details.Causes[0].Field, err.Error())
				return
			}
			require.NoError(t, err)
			var names []string
			for _, m := range got {
				names = append(names, m.Name+"@"+m.Address+"/"+m.InstallDisk)
			}
			require.Equal(t, tc.want, names)
		})
	}
}
