package providers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
	"github.com/rezuscloud/rezuscloud/talos"
)

// writeGenerated generates in and writes the files into a fresh directory.
func writeGenerated(t *testing.T, in GenerateInput) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, mustGenerate(t, in))
	return dir
}

// writeFiles writes generated files into dir as the runner does.
func writeFiles(t *testing.T, dir string, files Files) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, MainFileName), files.Main, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, VarsFileName), files.Vars, 0o600))
	for name, fs := range files.Modules {
		mdir := filepath.Join(dir, ModulesDir, name)
		require.NoError(t, os.MkdirAll(mdir, 0o700))
		for fname, text := range fs {
			require.NoError(t, os.WriteFile(filepath.Join(mdir, fname), []byte(text), 0o600))
		}
	}
}

// TestGeneratedConfigsValidate runs `tofu validate` on the generated
// configurations against the real provider schemas: terraform-provider-openstack
// v3.4.0 and this project's emulated provider, installed from the mirror. (The
// oracle/oci provider is not in the mirror; its configurations are checked by
// the golden files and checkGenerated only.)
func TestGeneratedConfigsValidate(t *testing.T) {
	tofu := tofutest.NewRunner(t)
	cases := generateCases()
	for _, name := range []string{
		"emulated_placeholder", "emulated_addressed", "emulated_endpoint",
		"openstack_placeholder", "openstack_endpoint", "mixed_placeholder", "destroy",
	} {
		t.Run(name, func(t *testing.T) {
			dir := writeGenerated(t, cases[name])
			tofu.Run(t, dir, "init", "-input=false", "-no-color")
			var res struct {
				Valid        bool `json:"valid"`
				ErrorCount   int  `json:"error_count"`
				WarningCount int  `json:"warning_count"`
				Diagnostics  []struct {
					Severity, Summary, Detail string
				} `json:"diagnostics"`
			}
			out := tofu.Run(t, dir, "validate", "-json", "-no-color")
			require.NoError(t, json.Unmarshal(out, &res), "%s", out)
			require.True(t, res.Valid, "%s", out)
			require.Zero(t, res.ErrorCount, "%s", out)
			require.Zero(t, res.WarningCount, "%s", out)
		})
	}
}

// TestGeneratedEmulatedPlan plans generated emulated configurations with real
// tofu (the emulated provider needs no emulator to plan a create), to see
// what tofu makes of them: one machine per for_each key with its cloud name,
// the vars file's configs taken verbatim (a "${" in a config stays text),
// the first control plane booted on the reserved address, and the user data
// waiting for that address while the placeholder is in use.
func TestGeneratedEmulatedPlan(t *testing.T) {
	tofu := tofutest.NewRunner(t)
	cases := generateCases()

	type change struct {
		Address string `json:"address"`
		Change  struct {
			Actions      []string       `json:"actions"`
			After        map[string]any `json:"after"`
			AfterUnknown map[string]any `json:"after_unknown"`
		} `json:"change"`
	}
	plan := func(t *testing.T, in GenerateInput) map[string]change {
		dir := writeGenerated(t, in)
		tofu.Run(t, dir, "init", "-input=false", "-no-color")
		tofu.Run(t, dir, "plan", "-input=false", "-lock=false", "-no-color", "-out=plan.bin")
		var p struct {
			ResourceChanges []change `json:"resource_changes"`
		}
		out := tofu.Run(t, dir, "show", "-json", "plan.bin")
		require.NoError(t, json.Unmarshal(out, &p))
		byAddr := map[string]change{}
		for _, c := range p.ResourceChanges {
			require.Equal(t, []string{"create"}, c.Change.Actions, c.Address)
			byAddr[c.Address] = c
		}
		return byAddr
	}

	t.Run("addressed", func(t *testing.T) {
		in := cases["emulated_addressed"]
		got := plan(t, in)
		require.Len(t, got, 1+3+4, "the reserved address, 3 control planes, 4 workers")
		require.Contains(t, got, "module.ng_cp__emulated.emulated_address.endpoint[0]")
		configs := map[string]string{}
		for _, g := range in.Groups {
			for _, m := range g.Machines {
				configs[m.Name] = string(m.Config)
			}
		}
		for addr, c := range got {
			if c.Address == "module.ng_cp__emulated.emulated_address.endpoint[0]" {
				require.Equal(t, "demo-endpoint", c.Change.After["name"])
				continue
			}
			key := addr[strings.Index(addr, `["`)+2 : len(addr)-2]
			require.Equal(t, "demo-"+key, c.Change.After["name"], addr)
			require.Equal(t, "demo", c.Change.After["cluster"], addr)
			require.Equal(t, configs[key], c.Change.After["user_data"], addr)
			require.Contains(t, c.Change.After["user_data"], "${value}", addr)
			if key == "cp-0" {
				require.Equal(t, true, c.Change.AfterUnknown["address"], "cp-0 boots on the reserved address")
			}
		}
	})

	t.Run("placeholder", func(t *testing.T) {
		got := plan(t, cases["emulated_placeholder"])
		require.Len(t, got, 1+1+2)
		for _, addr := range []string{`module.ng_cp__emulated.emulated_machine.machine["cp-0"]`, `module.ng_workers__emulated.emulated_machine.machine["workers-0"]`, `module.ng_workers__emulated.emulated_machine.machine["workers-1"]`} {
			require.Equal(t, true, got[addr].Change.AfterUnknown["user_data"], "%s: the endpoint is known once the address is reserved", addr)
		}
		require.Equal(t, true, got[`module.ng_cp__emulated.emulated_machine.machine["cp-0"]`].Change.AfterUnknown["address"])
	})

	t.Run("declared endpoint", func(t *testing.T) {
		te := genTenant("declared", "https://k8s.example.com:6443")
		got := plan(t, GenerateInput{Tenant: te,
			Providers: map[string]*domain.Provider{"emulated": genProvider("emulated", domain.ProviderEmulated, cfgEmulated)},
			Groups:    []GroupInput{genGroup(te, "cp", domain.RoleControlPlane, "emulated", 1, "")}})
		require.Len(t, got, 1)
		require.Contains(t, got[`module.ng_cp__emulated.emulated_machine.machine["cp-0"]`].Change.After["user_data"], "https://k8s.example.com:6443")
	})
}

// TestGeneratedEmulatedApply builds a tenant with real tofu and the emulated
// provider (built from this tree) against an in-process emulator: the first
// apply with the endpoint placeholder, then the configuration as the next
// apply generates it (configs rendered with the now known address) must plan
// no change, a scale-up adds one machine, the state projects into the
// machines the emulator runs, and a destroy leaves nothing. With -update it
// writes testdata/state_emulated.json from the real state (configs scrubbed).
func TestGeneratedEmulatedApply(t *testing.T) {
	tofuBin, mirror := tofutest.Tools(t)
	mirror = tofutest.WithProvider(t, mirror, "registry.opentofu.org/rezuscloud/emulated", "0.1.0", "./cmd/terraform-provider-emulated")
	tofu := tofutest.NewRunnerWith(t, tofuBin, mirror)
	em, url := startTestEmulator(t)
	// As serve --with-emulator registers its emulator: the endpoint and the
	// token in the Provider's credentials, which the runner hands tofu as
	// its environment; nothing about the emulator in the generated files.
	tofu.Env = []string{"EMULATOR_ENDPOINT=" + url, "EMULATOR_TOKEN=" + em.APIToken()}

	tn := genTenant("demo", "")
	bundle, err := talos.NewBundle(tn.Spec.TalosVersion, time.Now())
	require.NoError(t, err)
	providers := map[string]*domain.Provider{"emulated": genProvider("emulated", domain.ProviderEmulated, `{}`)}
	providers["emulated"].Spec.CredentialsRef = &domain.SecretRef{Name: "emulated"}
	input := func(cpAddress string, workers int) GenerateInput {
		return emulatedInput(t, tn, bundle, providers, cpAddress, workers)
	}
	dir := t.TempDir()
	write := func(in GenerateInput) { writeFiles(t, dir, mustGenerate(t, in)) }

	write(input(EndpointPlaceholder, 2))
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		require.NotContains(t, string(b), url, path)
		require.NotContains(t, string(b), em.APIToken(), path)
		return err
	}))
	tofu.Run(t, dir, "init", "-input=false", "-no-color")
	out := tofu.Run(t, dir, "apply", "-auto-approve", "-input=false", "-no-color")
	require.Contains(t, string(out), "Apply complete! Resources: 4 added, 0 changed, 0 destroyed.")
	require.NotContains(t, string(out), "BEGIN", "a machine config leaked into tofu's output")

	state := tofu.Run(t, dir, "state", "pull")
	endpoint, ok, err := StateEndpoint(state)
	require.NoError(t, err)
	require.True(t, ok)
	machines, err := ProjectState(state)
	require.NoError(t, err)
	require.Len(t, machines, 3)
	for _, m := range machines {
		node, err := em.Get("demo-" + m.Name)
		require.NoError(t, err, m.Name)
		host, _, err := net.SplitHostPort(node.Address)
		require.NoError(t, err)
		require.Equal(t, ObservedMachine{Name: m.Name, NodeGroup: strings.TrimSuffix(m.Name, m.Name[strings.LastIndex(m.Name, "-"):]),
			Address: host, ProviderID: "emulated://demo-" + m.Name, Shape: "emulated", Hostname: "demo-" + m.Name}, m)
		require.Equal(t, map[bool]string{true: "controlplane", false: "worker"}[m.NodeGroup == "cp"], node.Role, "%s booted with its config", m.Name)
	}
	require.Equal(t, endpoint, machines[0].Address, "cp-0 boots on the endpoint address")
	names, err := ProvidersInState(state)
	require.NoError(t, err)
	require.Equal(t, []string{"emulated"}, names)

	// The next apply renders with the address instead of the placeholder:
	// nothing changes, the reserved address and cp-0 stay.
	write(input(endpoint, 2))
	tofu.Run(t, dir, "plan", "-detailed-exitcode", "-input=false", "-no-color")

	write(input(endpoint, 3))
	out = tofu.Run(t, dir, "apply", "-auto-approve", "-input=false", "-no-color")
	require.Contains(t, string(out), "Apply complete! Resources: 1 added, 0 changed, 0 destroyed.")
	state = tofu.Run(t, dir, "state", "pull")
	machines, err = ProjectState(state)
	require.NoError(t, err)
	require.Len(t, machines, 4)
	if *update {
		require.NoError(t, os.WriteFile(filepath.Join("testdata", "state_emulated_module.json"), scrubState(t, state), 0o644))
	}

	// Destroy as the runner does: the providers and module calls in the
	// state, no groups.
	mods, err := ModulesInState(state)
	require.NoError(t, err)
	require.Equal(t, []ModuleUse{{Group: "cp", Provider: "emulated"}, {Group: "workers", Provider: "emulated"}}, mods)
	write(GenerateInput{Tenant: tn, Providers: providers, StateModules: mods})
	out = tofu.Run(t, dir, "apply", "-destroy", "-auto-approve", "-input=false", "-no-color")
	require.Contains(t, string(out), "Apply complete! Resources: 0 added, 0 changed, 5 destroyed.")
	require.Empty(t, em.List())
	require.Empty(t, em.ListAddresses())
	names, err = ProvidersInState(tofu.Run(t, dir, "state", "pull"))
	require.NoError(t, err)
	require.Empty(t, names)
}

// emulatedInput is a tenant of one control plane and workers on the
// emulated provider, with configs rendered for cpAddress.
func emulatedInput(t *testing.T, tn *domain.Tenant, bundle *secrets.Bundle, providers map[string]*domain.Provider, cpAddress string, workers int) GenerateInput {
	in := GenerateInput{Tenant: tn, Providers: providers, PlaceholderEndpoint: cpAddress == EndpointPlaceholder}
	for _, g := range []struct {
		name, role string
		count      int
	}{{"cp", domain.RoleControlPlane, 1}, {"workers", domain.RoleWorker, workers}} {
		ng := &domain.NodeGroup{Metadata: domain.ObjectMeta{Name: g.name, Tenant: tn.Metadata.Name},
			Spec: domain.NodeGroupSpec{Role: g.role, Count: g.count, Provider: "emulated"}}
		gi := GroupInput{NodeGroup: ng}
		for i := range g.count {
			cfg, err := talos.Render(talos.RenderInput{Tenant: tn, NodeGroup: ng, ControlPlaneAddress: cpAddress, Bundle: bundle})
			require.NoError(t, err)
			gi.Machines = append(gi.Machines, MachineInput{Name: fmt.Sprintf("%s-%d", g.name, i), Config: cfg})
		}
		in.Groups = append(in.Groups, gi)
	}
	return in
}

// TestEmulatedStatesMoveIntoTheModule: a tenant built by the generator of
// before the emulated type was a module (testdata/pre_module_emulated.tf.json
// is its output for this input) is planned with today's configuration:
// every machine and the endpoint address move into the module calls, none
// is created, replaced or destroyed.
func TestEmulatedStatesMoveIntoTheModule(t *testing.T) {
	tofuBin, mirror := tofutest.Tools(t)
	mirror = tofutest.WithProvider(t, mirror, "registry.opentofu.org/rezuscloud/emulated", "0.1.0", "./cmd/terraform-provider-emulated")
	tofu := tofutest.NewRunnerWith(t, tofuBin, mirror)
	em, url := startTestEmulator(t)
	tofu.Env = []string{"EMULATOR_TOKEN=" + em.APIToken()} // a Provider of before: the endpoint in spec.config
	tn := genTenant("demo", "")
	bundle, err := talos.NewBundle(tn.Spec.TalosVersion, time.Now())
	require.NoError(t, err)
	providers := map[string]*domain.Provider{"emulated": genProvider("emulated", domain.ProviderEmulated, `{"endpoint":"`+url+`"}`)}

	dir := t.TempDir()
	old, err := os.ReadFile(filepath.Join("testdata", "pre_module_emulated.tf.json"))
	require.NoError(t, err)
	old = bytes.ReplaceAll(old, []byte("http://127.0.0.1:8089"), []byte(url))
	files := mustGenerate(t, emulatedInput(t, tn, bundle, providers, EndpointPlaceholder, 2))
	require.NoError(t, os.WriteFile(filepath.Join(dir, MainFileName), old, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, VarsFileName), files.Vars, 0o600))
	tofu.Run(t, dir, "init", "-input=false", "-no-color")
	out := tofu.Run(t, dir, "apply", "-auto-approve", "-input=false", "-no-color")
	require.Contains(t, string(out), "Resources: 4 added")
	endpoint, ok, err := StateEndpoint(tofu.Run(t, dir, "state", "pull"))
	require.NoError(t, err)
	require.True(t, ok)
	nodes := em.List()
	require.Len(t, nodes, 3)

	writeFiles(t, dir, mustGenerate(t, emulatedInput(t, tn, bundle, providers, endpoint, 2)))
	tofu.Run(t, dir, "init", "-input=false", "-no-color")
	tofu.Run(t, dir, "plan", "-input=false", "-lock=false", "-no-color", "-out=plan.bin")
	var plan struct {
		ResourceChanges []struct {
			Address         string `json:"address"`
			PreviousAddress string `json:"previous_address"`
			Change          struct {
				Actions []string `json:"actions"`
			} `json:"change"`
		} `json:"resource_changes"`
	}
	require.NoError(t, json.Unmarshal(tofu.Run(t, dir, "show", "-json", "plan.bin"), &plan))
	moved := map[string]string{}
	for _, c := range plan.ResourceChanges {
		require.Equal(t, []string{"no-op"}, c.Change.Actions, c.Address)
		moved[c.PreviousAddress] = c.Address
	}
	require.Equal(t, map[string]string{
		`emulated_address.endpoint`:                `module.ng_cp__emulated.emulated_address.endpoint[0]`,
		`emulated_machine.ng_cp["cp-0"]`:           `module.ng_cp__emulated.emulated_machine.machine["cp-0"]`,
		`emulated_machine.ng_workers["workers-0"]`: `module.ng_workers__emulated.emulated_machine.machine["workers-0"]`,
		`emulated_machine.ng_workers["workers-1"]`: `module.ng_workers__emulated.emulated_machine.machine["workers-1"]`,
	}, moved)
	out = tofu.Run(t, dir, "apply", "-auto-approve", "-input=false", "-no-color", "plan.bin")
	require.Contains(t, string(out), "0 added, 0 changed, 0 destroyed")
	machines, err := ProjectState(tofu.Run(t, dir, "state", "pull"))
	require.NoError(t, err)
	require.Len(t, machines, 3, "projected from the module's output now")
	require.Equal(t, nodes, em.List(), "the same machines, untouched")
}

// scrubState replaces the machine configs (they hold the tenant's PKI) in a
// real state, so it can be kept as a fixture.
func scrubState(t *testing.T, state []byte) []byte {
	var st map[string]any
	require.NoError(t, json.Unmarshal(state, &st))
	for _, r := range st["resources"].([]any) {
		for _, inst := range r.(map[string]any)["instances"].([]any) {
			attrs := inst.(map[string]any)["attributes"].(map[string]any)
			if _, ok := attrs["user_data"]; ok {
				attrs["user_data"] = "(a machine config, scrubbed)"
			}
		}
	}
	out, err := json.MarshalIndent(st, "", "  ")
	require.NoError(t, err)
	return append(out, '\n')
}

func startTestEmulator(t *testing.T) (*emulator.Emulator, string) {
	t.Helper()
	em, err := emulator.New(emulator.Config{
		Addressing:        emulator.AddressingLoopback,
		InstallDelay:      20 * time.Millisecond,
		RebootDelay:       20 * time.Millisecond,
		UpgradeDelay:      10 * time.Millisecond,
		ServiceStartDelay: 10 * time.Millisecond,
		Logf:              t.Logf,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- em.Run(ctx) }()
	select {
	case <-em.Ready():
	case err := <-done:
		t.Fatalf("emulator ended: %v", err)
	}
	srv := httptest.NewServer(em.Handler())
	t.Cleanup(func() {
		srv.Close()
		cancel()
		require.NoError(t, <-done)
	})
	return em, srv.URL
}
