package upgrade

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestDeclaredBuild(t *testing.T) {
	iscsi := &domain.Schematic{Extensions: []string{"siderolabs/iscsi-tools"}}
	gpu := &domain.Schematic{Extensions: []string{"siderolabs/nvidia-container-toolkit-lts"}}
	explicit := json.RawMessage(`{"installImage":"ghcr.io/acme/installer:v1.13.0"}`)
	for _, tc := range []struct {
		name   string
		tenant *domain.Schematic
		group  domain.NodeGroupSpec
		want   string
		owns   bool
	}{
		{"none: the version alone, as before schematics", nil, domain.NodeGroupSpec{}, "v1.13.0", false},
		{"the tenant's", iscsi, domain.NodeGroupSpec{}, "v1.13.0 " + iscsi.ID(), false},
		{"the group's own wins", iscsi, domain.NodeGroupSpec{Schematic: gpu}, "v1.13.0 " + gpu.ID(), true},
		{"an empty own schematic is the vanilla one", iscsi, domain.NodeGroupSpec{Schematic: &domain.Schematic{}}, "v1.13.0", true},
		{"an explicit installImage: the version alone", iscsi, domain.NodeGroupSpec{ProviderConfig: explicit}, "v1.13.0", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := declaredBuild(&domain.TenantSpec{Schematic: tc.tenant}, &tc.group, "v1.13.0")
			require.Equal(t, tc.want, got)
			require.Equal(t, "v1.13.0", rememberedVersion(got))
			require.Equal(t, tc.owns, ownsSchematic(&tc.group))
		})
	}
}
