package tfprovider

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/tofutest"
	"github.com/rezuscloud/rezuscloud/providers"
)

// attr is how an attribute is declared, as the generated configurations and
// the state projection (controllers/apply) rely on it.
type attr struct{ required, optional, computed, sensitive bool }

// TestSchemaContract pins the resources' attributes: controllers/apply writes and
// reads them by name.
func TestSchemaContract(t *testing.T) {
	t.Parallel()
	computed := attr{computed: true}
	tests := []struct {
		name     string
		resource resource.Resource
		typeName string
		want     map[string]attr
	}{
		{"address", newAddressResource(), "emulated_address", map[string]attr{
			"id": computed, "name": {required: true}, "address": computed,
		}},
		{"machine", newMachineResource(), "emulated_machine", map[string]attr{
			"id":            computed,
			"name":          {required: true},
			"cluster":       {optional: true},
			"user_data":     {required: true, sensitive: true},
			"address":       {optional: true, computed: true},
			"talos_port":    computed,
			"hostname":      computed,
			"talos_version": computed,
			"provider_id":   computed,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			var meta resource.MetadataResponse
			tt.resource.Metadata(ctx, resource.MetadataRequest{ProviderTypeName: "emulated"}, &meta)
			require.Equal(t, tt.typeName, meta.TypeName)
			var resp resource.SchemaResponse
			tt.resource.Schema(ctx, resource.SchemaRequest{}, &resp)
			require.False(t, resp.Diagnostics.HasError(), "%v", resp.Diagnostics)
			got := map[string]attr{}
			for name, a := range resp.Schema.Attributes {
				got[name] = attr{a.IsRequired(), a.IsOptional(), a.IsComputed(), a.IsSensitive()}
			}
			require.Equal(t, tt.want, got)
		})
	}
}

// TestToolsPinTheVersion: hack/tools.sh lays the provider out in the mirror
// under the version the generated configurations ask for.
func TestToolsPinTheVersion(t *testing.T) {
	t.Parallel()
	root, err := tofutest.RepoRoot()
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(root, "hack", "tools.sh"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^EMULATED_PROVIDER_VERSION=(\S+)$`).FindSubmatch(b)
	require.NotNil(t, m, "hack/tools.sh sets EMULATED_PROVIDER_VERSION")
	require.Equal(t, Version, string(m[1]))
}

// TestEnvNamesAreTheRunners: the runner hands tofu the emulator's endpoint
// and token under the names the provider reads.
func TestEnvNamesAreTheRunners(t *testing.T) {
	require.Equal(t, providers.EmulatorEndpointEnv, EnvEndpoint)
	require.Equal(t, providers.EmulatorTokenEnv, EnvToken)
}
