package providers

import (
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// examples/providers/hcloud is a module provider for Hetzner Cloud on
// hetznercloud/hcloud, which `go tool task tools` builds into the mirror. No
// Hetzner API is reachable from the tests, so the module is checked (the
// write-time checks, `tofu validate`, and plans of the configurations
// RezusCloud generates around it, which need no API) but never applied.
const (
	hcloudExampleDir = "../examples/providers/hcloud"
	hcloudSource     = "registry.opentofu.org/hetznercloud/hcloud"
	hcloudVersion    = "1.52.0"
)

// hcloudExample is the Provider `rezusctl create provider hetzner --type
// module --from-dir examples/providers/hcloud` makes: the directory's module
// files, with the snapshot id and a server type in spec.config.
func hcloudExample(t *testing.T) *domain.Provider {
	t.Helper()
	files := tofutest.ModuleFiles(t, hcloudExampleDir)
	require.Contains(t, files, "main.tf")
	iscsi := (&domain.Schematic{Extensions: []string{"siderolabs/iscsi-tools"}}).ID()
	p := genProvider("hetzner", domain.ProviderModule, `{"image":"123456789","server_type":"cx32","allowed_cidrs":["203.0.113.0/24","2001:db8::/32"],`+
		`"images_by_schematic":{"`+iscsi+`":"555"}}`)
	p.Spec.CredentialsRef = &domain.SecretRef{Name: "hcloud-token"}
	p.Spec.Module = &domain.ModuleSource{Files: files}
	return p
}

// hcloudTools returns the tofu tools, failing unless the mirror holds the
// hcloud provider the example pins.
func hcloudTools(t *testing.T) (tofu, mirror string) {
	t.Helper()
	tofu, mirror = tofutest.Tools(t)
	tofutest.RequireProvider(t, mirror, hcloudSource, hcloudVersion)
	return tofu, mirror
}

// TestExampleHcloudChecks runs the checks a Provider's module gets when it
// is written, against the tools mirror, as the server does.
func TestExampleHcloudChecks(t *testing.T) {
	_, mirror := hcloudTools(t)
	p := hcloudExample(t)
	require.Empty(t, p.Spec.Validate("spec"))
	checker, err := NewModuleChecker(mirror, false)
	require.NoError(t, err)
	info, causes := checker.Check(&p.Spec)
	require.Empty(t, causes)
	require.Equal(t, []string{ModuleVarEndpoint, ModuleVarMachines, ModuleVarNodeGroup, ModuleVarProviderConfig, ModuleVarRole, ModuleVarSchematicID, ModuleVarTenant}, info.Inputs)
	require.True(t, info.Endpoint, "it makes the endpoint of a tenant that declares none")
	require.Equal(t, map[string]string{"hcloud": hcloudSource}, info.Providers)
	require.Equal(t, map[string]bool{"image": false, "images_by_schematic": true, "server_type": true, "location": true, "network_zone": true,
		"network_ip_range": true, "load_balancer_type": true, "allowed_cidrs": true}, info.Own)

	// The image has no default: a Provider without it is refused when written.
	p.Spec.Config = json.RawMessage(`{"server_type":"cx32"}`)
	_, causes = checker.Check(&p.Spec)
	require.Len(t, causes, 1)
	require.Equal(t, domain.CauseRequired, causes[0].Type)
	require.Contains(t, causes[0].Message, `variable "image" has no default`)
}

// TestExampleHcloudValidate runs `tofu init` and `tofu validate` on the
// example directory as it is, against the hcloud provider's schema (the
// server's module validator on the Provider is the apply worker's
// TestExamplesPassTheModuleValidator).
func TestExampleHcloudValidate(t *testing.T) {
	bin, mirror := hcloudTools(t)
	tofu := tofutest.NewRunnerWith(t, bin, mirror)
	dir := t.TempDir() // init writes .terraform and a lock file: not into the repository
	for name, text := range hcloudExample(t).Spec.Module.Files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	tofu.Run(t, dir, "init", "-input=false", "-no-color")
	var res struct {
		Valid        bool `json:"valid"`
		ErrorCount   int  `json:"error_count"`
		WarningCount int  `json:"warning_count"`
	}
	out := tofu.Run(t, dir, "validate", "-json", "-no-color")
	require.NoError(t, json.Unmarshal(out, &res), "%s", out)
	require.True(t, res.Valid, "%s", out)
	require.Zero(t, res.ErrorCount, "%s", out)
	require.Zero(t, res.WarningCount, "%s", out)
}

// TestExampleHcloudPlan plans the configurations RezusCloud generates around
// the example (planning creates asks the Hetzner API nothing; the provider's
// endpoint is pointed at a closed port all the same): the load balancer is
// the endpoint the placeholder in the configs is replaced with, with no
// cycle through the machines; a worker group makes none; providerConfig
// chooses a group's server type; a tenant that declares an endpoint gets no
// load balancer; and the call of a group that is gone holds nothing.
func TestExampleHcloudPlan(t *testing.T) {
	bin, mirror := hcloudTools(t)
	tofu := tofutest.NewRunnerWith(t, bin, mirror)
	tofu.Env = []string{
		"HCLOUD_TOKEN=" + strings.Repeat("0", 64),
		"HCLOUD_ENDPOINT=http://127.0.0.1:9/v1",
	}
	providers := map[string]*domain.Provider{"hetzner": hcloudExample(t)}

	type change struct {
		Actions      []string       `json:"actions"`
		After        map[string]any `json:"after"`
		AfterUnknown map[string]any `json:"after_unknown"`
	}
	plan := func(t *testing.T, in GenerateInput) map[string]change {
		t.Helper()
		dir := writeGenerated(t, in)
		tofu.Run(t, dir, "init", "-input=false", "-no-color")
		tofu.Run(t, dir, "plan", "-input=false", "-lock=false", "-no-color", "-out=plan.bin")
		var p struct {
			ResourceChanges []struct {
				Address string `json:"address"`
				Change  change `json:"change"`
			} `json:"resource_changes"`
		}
		out := tofu.Run(t, dir, "show", "-json", "plan.bin")
		require.NoError(t, json.Unmarshal(out, &p))
		got := map[string]change{}
		for _, c := range p.ResourceChanges {
			require.Equal(t, []string{"create"}, c.Change.Actions, c.Address)
			got[c.Address] = c.Change
		}
		return got
	}
	keys := func(m map[string]change) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		return out
	}

	t.Run("placeholder endpoint", func(t *testing.T) {
		tn := genTenant("demo", "")
		// The tenant's schematic is the groups': images_by_schematic maps it
		// to a snapshot, which a group's own providerConfig.image overrides.
		tn.Spec.Schematic = &domain.Schematic{Extensions: []string{"siderolabs/iscsi-tools"}}
		iscsi := tn.Spec.Schematic.ID()
		got := plan(t, GenerateInput{Tenant: tn, PlaceholderEndpoint: true, Providers: providers, Groups: []GroupInput{
			genGroup(tn, "cp", domain.RoleControlPlane, "hetzner", 2, ""),
			genGroup(tn, "workers", domain.RoleWorker, "hetzner", 1, `{"serverType":"cax21","image":"987654321"}`),
		}})
		cp, workers := "module.ng_cp__hetzner.", "module.ng_workers__hetzner."
		require.ElementsMatch(t, []string{
			cp + "hcloud_network.group[0]", cp + "hcloud_network_subnet.group[0]", cp + "hcloud_firewall.group[0]",
			cp + `hcloud_server.machine["cp-0"]`, cp + `hcloud_server.machine["cp-1"]`,
			cp + "hcloud_load_balancer.endpoint[0]", cp + "hcloud_load_balancer_network.endpoint[0]",
			cp + `hcloud_load_balancer_service.endpoint["kubernetes"]`, cp + `hcloud_load_balancer_service.endpoint["talos"]`,
			cp + `hcloud_load_balancer_target.control_plane["cp-0"]`, cp + `hcloud_load_balancer_target.control_plane["cp-1"]`,
			workers + "hcloud_network.group[0]", workers + "hcloud_network_subnet.group[0]", workers + "hcloud_firewall.group[0]",
			workers + `hcloud_server.machine["workers-0"]`,
		}, keys(got))

		lb := got[cp+"hcloud_load_balancer.endpoint[0]"]
		require.Equal(t, "demo-cp", lb.After["name"])
		require.Equal(t, "lb11", lb.After["load_balancer_type"])
		require.Equal(t, "fsn1", lb.After["location"])
		for _, name := range []string{"cp-0", "cp-1", "workers-0"} {
			group := strings.TrimSuffix(name, name[strings.LastIndex(name, "-"):])
			s := got["module.ng_"+group+`__hetzner.hcloud_server.machine["`+name+`"]`]
			require.Equal(t, "demo-"+name, s.After["name"])
			require.Equal(t, true, s.AfterUnknown["user_data"], "%s: its config waits for the load balancer's address", name)
			require.Equal(t, map[string]any{"rezuscloud.io/tenant": "demo", "rezuscloud.io/node-group": group, "rezuscloud.io/role": map[string]string{"cp": "controlplane", "workers": "worker"}[group],
				"rezuscloud.io/schematic": iscsi[:63]}, s.After["labels"])
		}
		require.Equal(t, "cx32", got[cp+`hcloud_server.machine["cp-0"]`].After["server_type"], "spec.config.server_type")
		require.Equal(t, "555", got[cp+`hcloud_server.machine["cp-0"]`].After["image"], "the snapshot of the group's schematic")
		require.Equal(t, "cax21", got[workers+`hcloud_server.machine["workers-0"]`].After["server_type"], "providerConfig.serverType")
		require.Equal(t, "987654321", got[workers+`hcloud_server.machine["workers-0"]`].After["image"], "providerConfig.image")
		require.Equal(t, "eu-central", got[cp+"hcloud_network_subnet.group[0]"].After["network_zone"])
		require.Equal(t, "10.0.1.0/24", got[cp+"hcloud_network_subnet.group[0]"].After["ip_range"])

		fw := got[workers+"hcloud_firewall.group[0]"]
		require.Equal(t, []any{map[string]any{"label_selector": "rezuscloud.io/tenant=demo"}}, fw.After["apply_to"])
		rules := map[string]string{}
		for i, r := range fw.After["rule"].([]any) {
			r := r.(map[string]any)
			desc := r["description"].(string)
			rules[desc] = r["protocol"].(string) + "/" + r["port"].(string)
			if strings.HasPrefix(desc, "the group's servers") {
				require.Equal(t, true, fw.AfterUnknown["rule"].([]any)[i].(map[string]any)["source_ips"], "%s: the servers' addresses, known once they are built", desc)
			} else {
				require.ElementsMatch(t, []any{"203.0.113.0/24", "2001:db8::/32"}, r["source_ips"], "%s: spec.config.allowed_cidrs", desc)
			}
		}
		require.Equal(t, map[string]string{"kubernetes API": "tcp/6443", "talos API": "tcp/50000",
			"the group's servers, tcp": "tcp/any", "the group's servers, udp": "udp/any", "the group's servers, icmp": "icmp/"}, rules)
	})

	t.Run("declared endpoint", func(t *testing.T) {
		tn := genTenant("declared", "https://k8s.example.com:6443")
		cp := genGroup(tn, "cp", domain.RoleControlPlane, "hetzner", 1, "")
		got := plan(t, GenerateInput{Tenant: tn, Providers: providers, Groups: []GroupInput{cp}})
		require.ElementsMatch(t, []string{
			"module.ng_cp__hetzner.hcloud_network.group[0]", "module.ng_cp__hetzner.hcloud_network_subnet.group[0]",
			"module.ng_cp__hetzner.hcloud_firewall.group[0]", `module.ng_cp__hetzner.hcloud_server.machine["cp-0"]`,
		}, keys(got), "no load balancer")
		// The provider plans (and keeps) a hash of the user data: the config as rendered.
		sum := sha1.Sum(cp.Machines[0].Config)
		require.Contains(t, string(cp.Machines[0].Config), "https://k8s.example.com:6443")
		require.Equal(t, base64.StdEncoding.EncodeToString(sum[:]), got[`module.ng_cp__hetzner.hcloud_server.machine["cp-0"]`].After["user_data"])
	})

	t.Run("groups that are gone", func(t *testing.T) {
		tn := genTenant("demo", "")
		got := plan(t, GenerateInput{Tenant: tn, Providers: providers,
			StateModules: []ModuleUse{{Group: "cp", Provider: "hetzner"}, {Group: "workers", Provider: "hetzner"}}})
		require.Empty(t, got, "called with no machines and no role, the module holds nothing")
	})
}
