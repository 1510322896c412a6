package talos_test

import (
	"encoding/json"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/talos"
)

// A metal group lists its machines, each with its own install disk: Render
// picks the one of the machine whose address matches, so the day-2 path
// (Desired.Config) renders what the maintenance-mode apply gave the machine.
func TestRenderListedMachineInstallDisk(t *testing.T) {
	b := fixedBundle(t, "v1.12.0")
	ng := &domain.NodeGroup{Metadata: domain.ObjectMeta{Name: "metal", Tenant: "acme"},
		Spec: domain.NodeGroupSpec{Role: domain.RoleWorker, Count: 2, Provider: "metal",
			ProviderConfig: json.RawMessage(`{"installDisk":"/dev/sdb","machines":[{"address":"10.0.0.21","installDisk":"/dev/nvme0n1"},{"address":"10.0.0.22"}]}`)}}
	tests := []struct {
		name, address, want string
	}{
		{"its own disk", "10.0.0.21", "/dev/nvme0n1"},
		{"the group's default", "10.0.0.22", "/dev/sdb"},
		{"not listed", "10.0.0.99", "/dev/sdb"},
		{"no address yet", "", "/dev/sdb"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &domain.Machine{Metadata: domain.ObjectMeta{Name: "metal-0", Tenant: "acme"},
				Spec: domain.MachineSpec{NodeGroup: "metal", Role: domain.RoleWorker, Address: tc.address}}
			got, err := talos.Render(talos.RenderInput{Tenant: tenant("v1.12.0"), NodeGroup: ng, Machine: m, ControlPlaneAddress: "10.0.0.10", Bundle: b})
			require.NoError(t, err)
			cfg, err := configloader.NewFromBytes(got)
			require.NoError(t, err)
			require.Equal(t, tc.want, cfg.Machine().Install().Disk())
		})
	}
}

// A registered machine's install-disk annotation wins over its group's installDisk.
func TestRenderRegisteredMachineInstallDisk(t *testing.T) {
	b := fixedBundle(t, "v1.12.0")
	ng := &domain.NodeGroup{Metadata: domain.ObjectMeta{Name: "metal", Tenant: "acme"},
		Spec: domain.NodeGroupSpec{Role: domain.RoleWorker, Count: 1, Provider: "metal",
			ProviderConfig: json.RawMessage(`{"installDisk":"/dev/sdb","selector":"rack=r1"}`)}}
	for _, tc := range []struct{ name, annotation, want string }{
		{"its own disk", "/dev/nvme1n1", "/dev/nvme1n1"},
		{"the group's", "", "/dev/sdb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &domain.Machine{Metadata: domain.ObjectMeta{Name: "node3", Tenant: "acme", Labels: map[string]string{"rack": "r1"}},
				Spec: domain.MachineSpec{NodeGroup: "metal", Role: domain.RoleWorker, Address: "10.0.0.13"}}
			if tc.annotation != "" {
				m.Metadata.Annotations = map[string]string{domain.AnnotationInstallDisk: tc.annotation}
			}
			got, err := talos.Render(talos.RenderInput{Tenant: tenant("v1.12.0"), NodeGroup: ng, Machine: m, ControlPlaneAddress: "10.0.0.10", Bundle: b})
			require.NoError(t, err)
			cfg, err := configloader.NewFromBytes(got)
			require.NoError(t, err)
			require.Equal(t, tc.want, cfg.Machine().Install().Disk())
		})
	}
}
