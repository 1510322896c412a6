package providers

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// emulatedExampleDir is examples/providers/emulated, a module provider on
// the Talos emulator to copy: the smallest module that follows the contract.
const emulatedExampleDir = "../examples/providers/emulated"

// emulatedExampleModule is the directory's module files, as rezusctl create
// provider --from-dir reads them.
func emulatedExampleModule(t *testing.T) *domain.ModuleSource {
	return &domain.ModuleSource{Files: tofutest.ModuleFiles(t, emulatedExampleDir)}
}

// TestExampleEmulated checks the example as the server does when it is
// written (against the mirror's providers; the apply worker's
// TestExamplesPassTheModuleValidator runs the validator after) and plans a tenant built with it with real tofu: each group's
// machines, and the endpoint address a control plane makes.
func TestExampleEmulated(t *testing.T) {
	tofu := tofutest.NewRunner(t)
	_, mirror := tofutest.Tools(t)
	checker, err := NewModuleChecker(mirror, false)
	require.NoError(t, err)

	p := genProvider("lab", domain.ProviderModule, `{"emulator":"http://127.0.0.1:1","shape":"lab-large"}`)
	p.Spec.Module = emulatedExampleModule(t)
	require.Empty(t, p.Spec.Validate("spec"), "the domain's checks")
	info, causes := checker.Check(&p.Spec)
	require.Empty(t, causes, "the module contract")
	require.True(t, info.Endpoint, "it makes the endpoint of a tenant that declares none")
	require.Equal(t, map[string]bool{"emulator": false, "shape": true}, info.Own)

	te := genTenant("demo", "")
	in := GenerateInput{Tenant: te, Providers: map[string]*domain.Provider{"lab": p}, Modules: checker,
		Groups: []GroupInput{genGroup(te, "cp", domain.RoleControlPlane, "lab", 1, ""), genGroup(te, "workers", domain.RoleWorker, "lab", 2, "")}}
	dir := writeGenerated(t, in)
	tofu.Run(t, dir, "init", "-input=false", "-no-color")
	var res struct {
		Valid        bool `json:"valid"`
		WarningCount int  `json:"warning_count"`
	}
	out := tofu.Run(t, dir, "validate", "-json", "-no-color")
	require.NoError(t, json.Unmarshal(out, &res), "%s", out)
	require.True(t, res.Valid, "%s", out)
	require.Zero(t, res.WarningCount, "%s", out)

	tofu.Run(t, dir, "plan", "-input=false", "-lock=false", "-no-color", "-out=plan.bin")
	var plan struct {
		ResourceChanges []struct {
			Address string `json:"address"`
		} `json:"resource_changes"`
	}
	require.NoError(t, json.Unmarshal(tofu.Run(t, dir, "show", "-json", "plan.bin"), &plan))
	var addrs []string
	for _, c := range plan.ResourceChanges {
		addrs = append(addrs, c.Address)
	}
	require.ElementsMatch(t, []string{
		`module.ng_cp__lab.emulated_address.endpoint[0]`,
		`module.ng_cp__lab.emulated_machine.machine["cp-0"]`,
		`module.ng_workers__lab.emulated_machine.machine["workers-0"]`,
		`module.ng_workers__lab.emulated_machine.machine["workers-1"]`,
	}, addrs)
}
