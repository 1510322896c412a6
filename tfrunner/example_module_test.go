package tfrunner

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// exampleModuleDir is the module of examples/module-provider, which the
// documentation tells people to copy.
var exampleModuleDir = filepath.Join("..", "examples", "module-provider", "module")

func exampleModule(t *testing.T) *domain.ModuleSource {
	t.Helper()
	entries, err := os.ReadDir(exampleModuleDir)
	require.NoError(t, err)
	m := &domain.ModuleSource{Files: map[string]string{}}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tf") || strings.HasSuffix(e.Name(), ".tf.json") {
			b, err := os.ReadFile(filepath.Join(exampleModuleDir, e.Name()))
			require.NoError(t, err)
			m.Files[e.Name()] = string(b)
		}
	}
	require.NotEmpty(t, m.Files)
	return m
}

// TestExampleModuleProvider checks the example module provider as the
// server would (the contract, against the mirror's providers) and plans a
// tenant built with it with real tofu: each group's machines, and the
// endpoint address a control plane makes.
func TestExampleModuleProvider(t *testing.T) {
	tofu := newTofuRunner(t)
	_, mirror := tofutest.Tools(t)
	checker, err := NewModuleChecker(mirror, false)
	require.NoError(t, err)

	p := genProvider("lab", domain.ProviderModule, `{"emulator":"http://127.0.0.1:1","shape":"lab-large"}`)
	p.Spec.Module = exampleModule(t)
	require.Empty(t, p.Spec.Validate("spec"), "the domain's checks")
	_, causes := checker.Check(&p.Spec)
	require.Empty(t, causes, "the module contract")

	te := genTenant("demo", "")
	in := GenerateInput{Tenant: te, Providers: map[string]*domain.Provider{"lab": p}, Modules: checker,
		Groups: []GroupInput{genGroup(te, "cp", domain.RoleControlPlane, "lab", 1, ""), genGroup(te, "workers", domain.RoleWorker, "lab", 2, "")}}
	dir := writeGenerated(t, in)
	tofu.run(t, dir, "init", "-input=false", "-no-color")
	var res struct {
		Valid        bool `json:"valid"`
		WarningCount int  `json:"warning_count"`
	}
	out := tofu.run(t, dir, "validate", "-json", "-no-color")
	require.NoError(t, json.Unmarshal(out, &res), "%s", out)
	require.True(t, res.Valid, "%s", out)
	require.Zero(t, res.WarningCount, "%s", out)

	tofu.run(t, dir, "plan", "-input=false", "-lock=false", "-no-color", "-out=plan.bin")
	var plan struct {
		ResourceChanges []struct {
			Address string `json:"address"`
		} `json:"resource_changes"`
	}
	require.NoError(t, json.Unmarshal(tofu.run(t, dir, "show", "-json", "plan.bin"), &plan))
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
