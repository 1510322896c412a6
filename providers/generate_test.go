package providers

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// genTenant is a tenant named name; endpoint may be "".
func genTenant(name, endpoint string) *domain.Tenant {
	t := &domain.Tenant{APIVersion: domain.APIVersion, Kind: domain.TenantKind.Kind,
		Metadata: domain.ObjectMeta{Name: name}}
	t.Spec.ControlPlane.Endpoint = endpoint
	t.Spec.Default()
	return t
}

func genProvider(name, typ, config string) *domain.Provider {
	return &domain.Provider{APIVersion: domain.APIVersion, Kind: domain.ProviderKind.Kind,
		Metadata: domain.ObjectMeta{Name: name},
		Spec:     domain.ProviderSpec{Type: typ, Config: json.RawMessage(config)}}
}

// genGroup is a node group with count machines whose configs are small
// stand-ins for rendered configs, carrying the endpoint host like real ones.
func genGroup(tenant *domain.Tenant, name, role, provider string, count int, providerConfig string) GroupInput {
	ng := &domain.NodeGroup{APIVersion: domain.APIVersion, Kind: domain.NodeGroupKind.Kind,
		Metadata: domain.ObjectMeta{Name: name, Tenant: tenant.Metadata.Name},
		Spec:     domain.NodeGroupSpec{Role: role, Count: count, Provider: provider}}
	if providerConfig != "" {
		ng.Spec.ProviderConfig = json.RawMessage(providerConfig)
	}
	endpoint := tenant.Spec.ControlPlane.Endpoint
	if endpoint == "" {
		endpoint = "https://" + EndpointPlaceholder + ":6443"
	}
	g := GroupInput{NodeGroup: ng}
	for i := range count {
		m := fmt.Sprintf("%s-%d", name, i)
		cfg := fmt.Sprintf("version: v1alpha1\nmachine:\n  type: %s\n  # %s, with a template-looking ${value}\ncluster:\n  controlPlane:\n    endpoint: %s\n", role, m, endpoint)
		g.Machines = append(g.Machines, MachineInput{Name: m, Config: []byte(cfg)})
	}
	return g
}

const (
	cfgEmulated  = `{"endpoint":"http://127.0.0.1:8089"}`
	cfgOpenStack = `{"authURL":"https://keystone.example.com:5000/v3","region":"RegionOne","projectName":"rezus","userDomainName":"Default","projectDomainName":"Default"}`
	cfgOCI       = `{"region":"eu-frankfurt-1","compartmentID":"ocid1.compartment.oc1..aaaaexample"}`
)

// generateCases are the golden-file cases, shared with the tofu validate test.
func generateCases() map[string]GenerateInput {
	cases := map[string]GenerateInput{}

	t := genTenant("demo", "")
	cases["emulated_placeholder"] = GenerateInput{Tenant: t, PlaceholderEndpoint: true,
		Providers: map[string]*domain.Provider{"emulated": genProvider("emulated", domain.ProviderEmulated, cfgEmulated)},
		Groups: []GroupInput{
			genGroup(t, "cp", domain.RoleControlPlane, "emulated", 1, ""),
			genGroup(t, "workers", domain.RoleWorker, "emulated", 2, `{"installDisk":"/dev/vda"}`),
		}}
	// The same tenant once the control plane has an address: no placeholder,
	// the reserved address stays.
	cases["emulated_addressed"] = GenerateInput{Tenant: t,
		Providers: map[string]*domain.Provider{"emulated": genProvider("emulated", domain.ProviderEmulated, cfgEmulated)},
		Groups: []GroupInput{
			genGroup(t, "cp", domain.RoleControlPlane, "emulated", 3, ""),
			genGroup(t, "workers", domain.RoleWorker, "emulated", 4, ""),
		}}
	te := genTenant("declared", "https://k8s.example.com:6443")
	cases["emulated_endpoint"] = GenerateInput{Tenant: te,
		Providers: map[string]*domain.Provider{
			"emulated": genProvider("emulated", domain.ProviderEmulated, cfgEmulated),
			"emu-2":    genProvider("emu-2", domain.ProviderEmulated, `{"endpoint":"http://127.0.0.2:8089"}`),
		},
		Groups: []GroupInput{
			genGroup(te, "cp", domain.RoleControlPlane, "emulated", 1, ""),
			genGroup(te, "gpu-workers", domain.RoleWorker, "emu-2", 2, ""),
			genGroup(te, "idle", domain.RoleWorker, "emu-2", 0, ""),
			genGroup(te, "workers", domain.RoleWorker, "emulated", 1, ""),
		}}

	to := genTenant("stack", "")
	cases["openstack_placeholder"] = GenerateInput{Tenant: to, PlaceholderEndpoint: true,
		Providers: map[string]*domain.Provider{"os": genProvider("os", domain.ProviderOpenStack, cfgOpenStack)},
		Groups: []GroupInput{
			genGroup(to, "cp", domain.RoleControlPlane, "os", 3, `{"flavor":"m1.large","image":"talos-v1.13.0","network":"private","availabilityZones":["az-1","az-2"]}`),
			genGroup(to, "workers", domain.RoleWorker, "os", 4, `{"flavor":"m1.xlarge","image":"talos-v1.13.0","network":"private","availabilityZones":["az-1","az-2","az-3"],"securityGroups":["monitoring","7e6c0e2a-35b1-4c53-9a5e-1b0b6c1fd7a1"]}`),
		}}
	tod := genTenant("stack-lb", "https://lb.example.com:6443")
	cases["openstack_endpoint"] = GenerateInput{Tenant: tod,
		Providers: map[string]*domain.Provider{"os-1": genProvider("os-1", domain.ProviderOpenStack,
			`{"authURL":"https://keystone.example.com:5000/v3","endpointType":"internal","insecure":true,"allowedCIDRs":["10.0.0.0/8","2001:db8::/32"]}`)},
		Groups: []GroupInput{
			genGroup(tod, "cp", domain.RoleControlPlane, "os-1", 1, `{"flavor":"m1.large","image":"3b1d4f0e-9a51-4f43-8f5e-5c1e2b6f7a10","network":"0f5b5f3e-2c1a-4d8e-9b7a-6e5d4c3b2a10","subnetID":"c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e5f","keyPair":"ops","configDrive":true}`),
		}}

	tc := genTenant("oracle", "")
	cases["oci_placeholder"] = GenerateInput{Tenant: tc, PlaceholderEndpoint: true,
		Providers: map[string]*domain.Provider{"oci": genProvider("oci", domain.ProviderOCI, cfgOCI)},
		Groups: []GroupInput{
			genGroup(tc, "cp", domain.RoleControlPlane, "oci", 3, `{"shape":"VM.Standard.E5.Flex","ocpus":2,"memoryGBs":8,"imageID":"ocid1.image.oc1.eu-frankfurt-1.aaaatalos","subnetID":"ocid1.subnet.oc1.eu-frankfurt-1.aaaaprivate","availabilityDomains":["Uocm:EU-FRANKFURT-1-AD-1","Uocm:EU-FRANKFURT-1-AD-2","Uocm:EU-FRANKFURT-1-AD-3"]}`),
			genGroup(tc, "workers", domain.RoleWorker, "oci", 2, `{"shape":"VM.Standard.A1.Flex","ocpus":4,"memoryGBs":24,"imageID":"ocid1.image.oc1.eu-frankfurt-1.aaaatalosarm","subnetID":"ocid1.subnet.oc1.eu-frankfurt-1.aaaaprivate","availabilityDomains":["Uocm:EU-FRANKFURT-1-AD-1","Uocm:EU-FRANKFURT-1-AD-2"],"bootVolumeSizeGBs":100,"nsgIDs":["ocid1.networksecuritygroup.oc1.eu-frankfurt-1.aaaamonitoring"]}`),
		}}
	tcd := genTenant("oracle-lb", "https://10.0.0.100:6443")
	cases["oci_endpoint"] = GenerateInput{Tenant: tcd,
		Providers: map[string]*domain.Provider{"oci": genProvider("oci", domain.ProviderOCI,
			`{"region":"us-ashburn-1","compartmentID":"ocid1.tenancy.oc1..aaaaroot","auth":"InstancePrincipal","allowedCIDRs":["10.0.0.0/16"]}`)},
		Groups: []GroupInput{
			genGroup(tcd, "cp", domain.RoleControlPlane, "oci", 1, `{"shape":"VM.Standard.E4.Flex","imageID":"ocid1.image.oc1.iad.aaaatalos","subnetID":"ocid1.subnet.oc1.iad.aaaapublic","availabilityDomains":["Uocm:US-ASHBURN-AD-1"],"assignPublicIP":true}`),
		}}
	tcp := genTenant("oracle-public", "")
	cases["oci_public_placeholder"] = GenerateInput{Tenant: tcp, PlaceholderEndpoint: true,
		Providers: map[string]*domain.Provider{"oci": genProvider("oci", domain.ProviderOCI, cfgOCI)},
		Groups: []GroupInput{
			genGroup(tcp, "cp", domain.RoleControlPlane, "oci", 1, `{"shape":"VM.Standard.E4.Flex","imageID":"ocid1.image.oc1.iad.aaaatalos","subnetID":"ocid1.subnet.oc1.iad.aaaapublic","availabilityDomains":["Uocm:US-ASHBURN-AD-1"],"assignPublicIP":true}`),
		}}

	// A control plane on the emulator and workers on OpenStack: the workers'
	// configs take the emulator's endpoint address.
	tm := genTenant("mixed", "")
	cases["mixed_placeholder"] = GenerateInput{Tenant: tm, PlaceholderEndpoint: true,
		Providers: map[string]*domain.Provider{
			"emulated": genProvider("emulated", domain.ProviderEmulated, cfgEmulated),
			"os":       genProvider("os", domain.ProviderOpenStack, cfgOpenStack),
		},
		Groups: []GroupInput{
			genGroup(tm, "cp", domain.RoleControlPlane, "emulated", 1, ""),
			genGroup(tm, "workers", domain.RoleWorker, "os", 2, `{"flavor":"m1.large","image":"talos","network":"private"}`),
		}}

	// A destroy: the providers in the state and no groups.
	cases["destroy"] = GenerateInput{Tenant: t,
		Providers: map[string]*domain.Provider{
			"emulated": genProvider("emulated", domain.ProviderEmulated, cfgEmulated),
			"os":       genProvider("os", domain.ProviderOpenStack, cfgOpenStack),
		}}
	return cases
}

func TestGenerateGolden(t *testing.T) {
	for name, in := range generateCases() {
		t.Run(name, func(t *testing.T) {
			files, err := Generate(in)
			require.NoError(t, err)
			golden(t, name+".tf.json.golden", files.Main)
			golden(t, name+".tfvars.json.golden", files.Vars)

			again, err := Generate(in)
			require.NoError(t, err)
			require.Equal(t, files, again, "the output must be deterministic")
		})
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./providers -run %s -update to create it", t.Name())
	require.Equal(t, string(want), string(got), "%s differs; run with -update if the change is meant", path)
}

// genDoc is a generated main.tf.json, decoded for assertions.
type genDoc map[string]any

func decodeMain(t *testing.T, f Files) genDoc {
	t.Helper()
	var d genDoc
	require.NoError(t, json.Unmarshal(f.Main, &d))
	return d
}

// at walks a path of object keys.
func (d genDoc) at(t *testing.T, path ...string) any {
	t.Helper()
	var cur any = map[string]any(d)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		require.True(t, ok, "%s is not an object", strings.Join(path, "."))
		cur, ok = m[p]
		require.True(t, ok, "no %s in the document", strings.Join(path, "."))
	}
	return cur
}

func (d genDoc) has(path ...string) bool {
	var cur any = map[string]any(d)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[p]; !ok {
			return false
		}
	}
	return true
}

func TestGenerateStructure(t *testing.T) {
	cases := generateCases()

	t.Run("configs only in sensitive variables", func(t *testing.T) {
		for name, in := range cases {
			files, err := Generate(in)
			require.NoError(t, err)
			for _, g := range in.Groups {
				for _, m := range g.Machines {
					require.NotContains(t, string(files.Main), "machine:\n", "%s: a config leaked into main", name)
					require.NotContains(t, string(files.Main), "# "+m.Name+",", "%s: a config leaked into main", name)
				}
			}
			var vars map[string]map[string]string
			require.NoError(t, json.Unmarshal(files.Vars, &vars))
			d := decodeMain(t, files)
			for _, g := range in.Groups {
				v := userDataVar(g.NodeGroup.Metadata.Name)
				if len(g.Machines) == 0 {
					require.NotContains(t, vars, v)
					continue
				}
				require.Equal(t, true, d.at(t, "variable", v, "sensitive"))
				require.Len(t, vars[v], len(g.Machines))
				for _, m := range g.Machines {
					require.Equal(t, string(m.Config), vars[v][m.Name], "%s: the config goes in verbatim", name)
				}
			}
		}
	})

	t.Run("one aliased provider block per provider, pinned", func(t *testing.T) {
		// The emulated type is a module: its provider block is the module's,
		// configured from the module's own variable, one call per group.
		d := decodeMain(t, mustGenerate(t, cases["emulated_endpoint"]))
		require.False(t, d.has("provider"), "a module configures its providers itself")
		require.Equal(t, "./modules/emu-2", d.at(t, "module", "ng_gpu-workers__emu-2", "source"))
		require.Equal(t, "http://127.0.0.2:8089", d.at(t, "module", "ng_gpu-workers__emu-2", "emulator"))
		require.Equal(t, map[string]any{}, d.at(t, "module", "ng_idle__emu-2", "machines"), "a group of 0 has a call with no machines")
		require.Equal(t, "${module.ng_gpu-workers__emu-2.machines}", d.at(t, "output", "rezus_machines_ng_gpu_workers", "value"))
		require.Equal(t, true, d.at(t, "output", "rezus_machines_ng_gpu_workers", "sensitive"))

		d = decodeMain(t, mustGenerate(t, cases["mixed_placeholder"]))
		require.Equal(t, map[string]any{"source": "terraform-provider-openstack/openstack", "version": "3.4.0"}, d.at(t, "terraform", "required_providers", "openstack"))
		d = decodeMain(t, mustGenerate(t, cases["oci_placeholder"]))
		require.Equal(t, map[string]any{"source": "oracle/oci", "version": ociVersion}, d.at(t, "terraform", "required_providers", "oci"))
	})

	t.Run("instances per group, for_each by machine name, user data ignored", func(t *testing.T) {
		for typ, c := range map[string]struct {
			name, res string
			ignored   []any
		}{
			"openstack": {"openstack_placeholder", "openstack_compute_instance_v2", []any{"user_data", "image_id", "image_name"}},
			"oci":       {"oci_placeholder", "oci_core_instance", []any{"metadata", "source_details"}},
		} {
			d := decodeMain(t, mustGenerate(t, cases[c.name]))
			fe := d.at(t, "resource", c.res, "ng_workers", "for_each").(map[string]any)
			require.Contains(t, fe, "workers-0", typ)
			require.Contains(t, fe, "workers-1", typ)
			require.Equal(t, c.ignored, d.at(t, "resource", c.res, "ng_workers", "lifecycle", "ignore_changes"), typ)
		}
	})

	t.Run("zones and availability domains round-robin", func(t *testing.T) {
		d := decodeMain(t, mustGenerate(t, cases["openstack_placeholder"]))
		fe := d.at(t, "resource", "openstack_compute_instance_v2", "ng_workers", "for_each").(map[string]any)
		var zones []string
		for i := range 4 {
			zones = append(zones, fe[fmt.Sprintf("workers-%d", i)].(map[string]any)["availability_zone"].(string))
		}
		require.Equal(t, []string{"az-1", "az-2", "az-3", "az-1"}, zones)
		d = decodeMain(t, mustGenerate(t, cases["oci_placeholder"]))
		fe = d.at(t, "resource", "oci_core_instance", "ng_cp", "for_each").(map[string]any)
		require.Equal(t, "Uocm:EU-FRANKFURT-1-AD-3", fe["cp-2"].(map[string]any)["availability_domain"])
	})

	t.Run("placeholder replaced with the endpoint address", func(t *testing.T) {
		d := decodeMain(t, mustGenerate(t, cases["emulated_placeholder"]))
		require.Equal(t, map[string]any{
			"config":   `${replace(var.user_data_workers["workers-0"], "rezus-endpoint.invalid", module.ng_cp__emulated.endpoint)}`,
			"hostname": "demo-workers-0",
		}, d.at(t, "module", "ng_workers__emulated", "machines", "workers-0"))
		require.Equal(t, "controlplane", d.at(t, "module", "ng_cp__emulated", "role"))
		require.Equal(t, "", d.at(t, "module", "ng_cp__emulated", "endpoint"))
		require.Equal(t, "${module.ng_cp__emulated.endpoint}", d.at(t, "output", EndpointOutput, "value"))
		require.Equal(t, []any{
			map[string]any{"from": "emulated_machine.ng_cp", "to": "module.ng_cp__emulated.emulated_machine.machine"},
			map[string]any{"from": "emulated_machine.ng_workers", "to": "module.ng_workers__emulated.emulated_machine.machine"},
			map[string]any{"from": "emulated_address.endpoint", "to": "module.ng_cp__emulated.emulated_address.endpoint[0]"},
		}, d.at(t, "moved"), "what runs made before the type was a module moves into it")

		d = decodeMain(t, mustGenerate(t, cases["emulated_addressed"]))
		require.Equal(t, "${var.user_data_workers[\"workers-0\"]}", d.at(t, "module", "ng_workers__emulated", "machines", "workers-0", "config"))
		require.Equal(t, "${module.ng_cp__emulated.endpoint}", d.at(t, "output", EndpointOutput, "value"), "the reserved address outlives the placeholder")

		d = decodeMain(t, mustGenerate(t, cases["emulated_endpoint"]))
		require.False(t, d.has("output", EndpointOutput))
		require.Equal(t, "https://k8s.example.com:6443", d.at(t, "module", "ng_cp__emulated", "endpoint"))

		d = decodeMain(t, mustGenerate(t, cases["openstack_placeholder"]))
		require.Equal(t, `${replace(var.user_data_cp[each.key], "rezus-endpoint.invalid", [for ip in openstack_networking_port_v2.ng_cp["cp-0"].all_fixed_ips : ip if !strcontains(ip, ":")][0])}`,
			d.at(t, "resource", "openstack_compute_instance_v2", "ng_cp", "user_data"))

		d = decodeMain(t, mustGenerate(t, cases["oci_placeholder"]))
		require.Equal(t, `${base64encode(replace(var.user_data_workers[each.key], "rezus-endpoint.invalid", [for ip in oci_network_load_balancer_network_load_balancer.endpoint.ip_addresses : ip.ip_address if !ip.is_public][0]))}`,
			d.at(t, "resource", "oci_core_instance", "ng_workers", "metadata", "user_data"))
		require.Len(t, d.at(t, "resource", "oci_network_load_balancer_backend", "endpoint", "for_each"), 9, "3 listeners x 3 control planes")

		d = decodeMain(t, mustGenerate(t, cases["mixed_placeholder"]))
		require.Equal(t, `${replace(var.user_data_workers[each.key], "rezus-endpoint.invalid", module.ng_cp__emulated.endpoint)}`,
			d.at(t, "resource", "openstack_compute_instance_v2", "ng_workers", "user_data"))
	})

	t.Run("user values are literal, never templates", func(t *testing.T) {
		tn := genTenant("lit", "")
		in := GenerateInput{Tenant: tn, PlaceholderEndpoint: true,
			Providers: map[string]*domain.Provider{"os": genProvider("os", domain.ProviderOpenStack, `{"authURL":"https://k/${var.x}","region":"%{ if true }x%{ endif }"}`)},
			Groups:    []GroupInput{genGroup(tn, "cp", domain.RoleControlPlane, "os", 1, `{"flavor":"${file(\"/etc/passwd\")}","image":"i","network":"n"}`)}}
		d := decodeMain(t, mustGenerate(t, in))
		require.Equal(t, `https://k/$${var.x}`, d.at(t, "provider", "openstack").([]any)[0].(map[string]any)["auth_url"])
		require.Equal(t, `%%{ if true }x%%{ endif }`, d.at(t, "provider", "openstack").([]any)[0].(map[string]any)["region"])
		require.Equal(t, `$${file("/etc/passwd")}`, d.at(t, "resource", "openstack_compute_instance_v2", "ng_cp", "flavor_name"))
	})
}

func mustGenerate(t *testing.T, in GenerateInput) Files {
	t.Helper()
	f, err := Generate(in)
	require.NoError(t, err)
	return f
}

func TestGenerateErrors(t *testing.T) {
	emu := map[string]*domain.Provider{"emulated": genProvider("emulated", domain.ProviderEmulated, cfgEmulated)}
	tn := genTenant("demo", "")
	withEndpoint := genTenant("demo", "https://10.0.0.1:6443")
	renamed := genGroup(tn, "cp", domain.RoleControlPlane, "emulated", 2, "")
	renamed.Machines[1].Name = "cp-7"
	long := genTenant(strings.Repeat("t", 55), "")
	longer := genTenant(strings.Repeat("u", 55), "")

	for _, tc := range []struct {
		name string
		in   GenerateInput
		want string
	}{
		{"placeholder without a control plane", GenerateInput{Tenant: tn, PlaceholderEndpoint: true, Providers: emu,
			Groups: []GroupInput{genGroup(tn, "workers", domain.RoleWorker, "emulated", 2, "")}},
			"no control-plane node group with machines"},
		{"placeholder with a declared endpoint", GenerateInput{Tenant: withEndpoint, PlaceholderEndpoint: true, Providers: emu,
			Groups: []GroupInput{genGroup(withEndpoint, "cp", domain.RoleControlPlane, "emulated", 1, "")}},
			"while the tenant declares spec.controlPlane.endpoint"},
		{"a group's provider missing", GenerateInput{Tenant: tn, Providers: emu,
			Groups: []GroupInput{genGroup(tn, "cp", domain.RoleControlPlane, "elsewhere", 1, "")}},
			`nodegroup "cp" is invalid: spec.provider: provider "elsewhere" not found`},
		{"metal is not built with tofu", GenerateInput{Tenant: tn,
			Providers: map[string]*domain.Provider{"rack": genProvider("rack", domain.ProviderMetal, "")}},
			`provider "rack" is invalid: spec.type: "metal" cannot be built with OpenTofu; supported: emulated, module, oci, openstack`},
		{"a bad provider config", GenerateInput{Tenant: tn,
			Providers: map[string]*domain.Provider{"emulated": genProvider("emulated", domain.ProviderEmulated, `{}`)}},
			`provider "emulated" is invalid: spec.config.endpoint: required`},
		{"machines out of order", GenerateInput{Tenant: tn, Providers: emu, Groups: []GroupInput{renamed}},
			`machine 1 is named "cp-7", want "cp-1"`},
		{"a name too long for the infrastructure", GenerateInput{Tenant: long, Providers: emu,
			Groups: []GroupInput{genGroup(long, "control-plane", domain.RoleControlPlane, "emulated", 1, "")}},
			"is longer than 63 characters"},
		{"an emulator address too long", GenerateInput{Tenant: longer, Providers: emu,
			Groups: []GroupInput{genGroup(longer, "cp", domain.RoleControlPlane, "emulated", 1, "")}},
			`the emulator address "` + longer.Metadata.Name + `-endpoint" is longer than 63 characters`},
		{"no tenant", GenerateInput{}, "no tenant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Generate(tc.in)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestProviderAlias(t *testing.T) {
	for _, name := range []string{"emulated", "os-1", "1cloud", "a-b-c"} {
		alias := ProviderAlias(name)
		require.Regexp(t, `^[a-z_][a-z0-9_]*$`, alias)
		back, ok := ProviderNameFromAlias(alias)
		require.True(t, ok)
		require.Equal(t, name, back)

		res := GroupResourceName(name)
		require.Regexp(t, `^[a-z_][a-z0-9_]*$`, res)
		g, ok := GroupFromResourceName(res)
		require.True(t, ok)
		require.Equal(t, name, g)
	}
	for _, bad := range []string{"", "p_", "emulated", "default"} {
		_, ok := ProviderNameFromAlias(bad)
		require.False(t, ok, bad)
	}
	_, ok := GroupFromResourceName("endpoint")
	require.False(t, ok)
}

// A group whose spec.members lists machines 0 and 2 (an autoscaler removed
// machine 1) is generated with exactly those; the order check follows the
// list (CI: every apply after the autoscaler removed workers-0 and
// workers-2 failed 'machine 0 is named "workers-1", want "workers-0"').
func TestGenerateAGroupsListedMachines(t *testing.T) {
	emu := map[string]*domain.Provider{"emulated": genProvider("emulated", domain.ProviderEmulated, cfgEmulated)}
	tn := genTenant("demo", "")
	cp := genGroup(tn, "cp", domain.RoleControlPlane, "emulated", 1, "")
	w := genGroup(tn, "w", domain.RoleWorker, "emulated", 3, "")
	w.NodeGroup.Spec.Count = 2
	w.NodeGroup.Spec.Members = &domain.Members{Indexes: []int{0, 2}, Next: 3}
	w.Machines = []MachineInput{w.Machines[0], w.Machines[2]}
	mustGenerate(t, GenerateInput{Tenant: tn, PlaceholderEndpoint: true, Providers: emu, Groups: []GroupInput{cp, w}})

	w.Machines = []MachineInput{w.Machines[1], w.Machines[0]}
	_, err := Generate(GenerateInput{Tenant: tn, PlaceholderEndpoint: true, Providers: emu, Groups: []GroupInput{cp, w}})
	require.ErrorContains(t, err, `machine 0 is named "w-2", want "w-0"`)
}
