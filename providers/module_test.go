package providers

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func emulatedModuleSpec(extra map[string]string) *domain.ProviderSpec {
	files, _ := BuiltinModule(domain.ProviderEmulated)
	for k, v := range extra {
		files.Files[k] = v
	}
	return &domain.ProviderSpec{Type: domain.ProviderModule, Module: files, Config: json.RawMessage(`{"emulator":"http://x"}`)}
}

// TestModuleCheckerInfo: what a run learns of a module, and what the
// server's flags change.
func TestModuleCheckerInfo(t *testing.T) {
	mirror := map[string]bool{"registry.opentofu.org/rezuscloud/emulated": true}
	info, causes := ModuleChecker{Available: mirror}.Check(emulatedModuleSpec(nil))
	require.Empty(t, causes)
	require.Equal(t, []string{ModuleVarEndpoint, ModuleVarMachines, ModuleVarRole, ModuleVarTenant}, info.Inputs)
	require.Equal(t, map[string]bool{"emulator": true}, info.Own, "without it the provider reads EMULATOR_ENDPOINT")
	require.True(t, info.Endpoint)
	require.Equal(t, map[string]string{"emulated": "registry.opentofu.org/rezuscloud/emulated"}, info.Providers)

	exec := map[string]string{"exec.tf": "resource \"terraform_data\" \"x\" {\n  provisioner \"local-exec\" {\n    command = \"true\"\n  }\n}\n"}
	_, causes = ModuleChecker{Available: mirror}.Check(emulatedModuleSpec(exec))
	require.Len(t, causes, 1)
	require.Equal(t, "spec.module.files[exec.tf]", causes[0].Field)
	_, causes = ModuleChecker{Available: mirror, AllowExec: true}.Check(emulatedModuleSpec(exec))
	require.Empty(t, causes, "--allow-module-exec; terraform_data is built in")

	// An aliased provider reference names its local name; JSON syntax is
	// walked like HCL.
	aliased := map[string]string{"alias.tf.json": `{"provider": {"emulated": {"alias": "b", "endpoint": "http://y"}},
		"resource": {"emulated_address": {"a": {"provider": "emulated.b", "name": "a"}}},
		"output": {"extra": {"value": "${emulated_address.a.address}"}}}`}
	_, causes = ModuleChecker{Available: mirror}.Check(emulatedModuleSpec(aliased))
	require.Empty(t, causes)
	other := map[string]string{"other.tf": "resource \"x_thing\" \"a\" {\n  provider = emulated.b\n}\n"}
	_, causes = ModuleChecker{Available: mirror}.Check(emulatedModuleSpec(other))
	require.Empty(t, causes, "the provider meta-argument, not the type's prefix, names the provider")
	// Without a mirror, sources are not checked.
	_, causes = ModuleChecker{}.Check(emulatedModuleSpec(map[string]string{"null.tf": "resource \"null_resource\" \"x\" {}\n"}))
	require.Empty(t, causes)
}

func TestModuleNames(t *testing.T) {
	for _, tc := range []struct{ group, provider string }{{"cp", "emulated"}, {"gpu-workers", "emu-2"}, {"a--b", "x--y"}} {
		name := ModuleName(tc.group, tc.provider)
		g, p, ok := ParseModuleName("module." + name)
		require.True(t, ok, name)
		require.Equal(t, tc, struct{ group, provider string }{g, p})
	}
	for _, bad := range []string{"ng_cp", "ng___p", "cp__p", "module.ng_cp__"} {
		_, _, ok := ParseModuleName(bad)
		require.False(t, ok, bad)
	}
	require.Equal(t, "module.ng_a__b", moduleRoot(`module.ng_a__b.module.inner["k"]`))
	require.Equal(t, "module.ng_a__b", moduleRoot(`module.ng_a__b["x"]`))
}
