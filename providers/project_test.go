package providers

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func readState(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

func TestProjectState(t *testing.T) {
	for _, tc := range []struct {
		file      string
		want      []ObservedMachine
		providers []string
		endpoint  string
	}{
		{
			// From a real run (TestGeneratedEmulatedApply -update).
			file: "state_emulated.json",
			want: []ObservedMachine{
				{Name: "cp-0", NodeGroup: "cp", Address: "127.0.1.1", ProviderID: "emulated://demo-cp-0", Shape: "emulated", Hostname: "demo-cp-0"},
				{Name: "workers-0", NodeGroup: "workers", Address: "127.0.1.2", ProviderID: "emulated://demo-workers-0", Shape: "emulated", Hostname: "demo-workers-0"},
				{Name: "workers-1", NodeGroup: "workers", Address: "127.0.1.3", ProviderID: "emulated://demo-workers-1", Shape: "emulated", Hostname: "demo-workers-1"},
				{Name: "workers-2", NodeGroup: "workers", Address: "127.0.1.4", ProviderID: "emulated://demo-workers-2", Shape: "emulated", Hostname: "demo-workers-2"},
			},
			providers: []string{"emulated"},
			endpoint:  "127.0.1.1",
		},
		{
			// The emulated type as a module (TestGeneratedEmulatedApply
			// -update): the machines are the module's output.
			file: "state_emulated_module.json",
			want: []ObservedMachine{
				{Name: "cp-0", NodeGroup: "cp", Address: "127.0.76.222", ProviderID: "emulated://demo-cp-0", Shape: "emulated", Hostname: "demo-cp-0"},
				{Name: "workers-0", NodeGroup: "workers", Address: "127.0.76.224", ProviderID: "emulated://demo-workers-0", Shape: "emulated", Hostname: "demo-workers-0"},
				{Name: "workers-1", NodeGroup: "workers", Address: "127.0.76.223", ProviderID: "emulated://demo-workers-1", Shape: "emulated", Hostname: "demo-workers-1"},
				{Name: "workers-2", NodeGroup: "workers", Address: "127.0.76.225", ProviderID: "emulated://demo-workers-2", Shape: "emulated", Hostname: "demo-workers-2"},
			},
			providers: []string{"emulated"},
			endpoint:  "127.0.76.222",
		},
		{
			file: "state_openstack.json",
			want: []ObservedMachine{
				{Name: "cp-0", NodeGroup: "cp", Address: "10.0.0.11", ProviderID: "a1b2c3d4-0001-4000-8000-000000000001", Shape: "m1.large", Hostname: "stack-cp-0"},
				{Name: "cp-1", NodeGroup: "cp", Address: "10.0.0.12", ProviderID: "a1b2c3d4-0001-4000-8000-000000000002", Shape: "m1.large", Hostname: "stack-cp-1"},
				{Name: "cp-2", NodeGroup: "cp", Address: "10.0.0.13", ProviderID: "a1b2c3d4-0001-4000-8000-000000000003", Shape: "m1.large", Hostname: "stack-cp-2"},
				{Name: "workers-0", NodeGroup: "workers", Address: "10.0.0.21", ProviderID: "a1b2c3d4-0002-4000-8000-000000000001", Shape: "m1.xlarge", Hostname: "stack-workers-0"},
				{Name: "workers-1", NodeGroup: "workers", Address: "10.0.0.22", ProviderID: "a1b2c3d4-0002-4000-8000-000000000002", Shape: "m1.xlarge", Hostname: "stack-workers-1"},
			},
			providers: []string{"os"},
			endpoint:  "10.0.0.11",
		},
		{
			file: "state_oci.json",
			want: []ObservedMachine{
				// No public IP: the private one.
				{Name: "cp-0", NodeGroup: "cp", Address: "10.0.1.11", ProviderID: "ocid1.instance.oc1.eu-frankfurt-1.aaaainstance1", Shape: "VM.Standard.E5.Flex", Hostname: "oracle-cp-0"},
				{Name: "workers-0", NodeGroup: "workers", Address: "130.61.1.21", ProviderID: "ocid1.instance.oc1.eu-frankfurt-1.aaaainstance2", Shape: "VM.Standard.A1.Flex", Hostname: "oracle-workers-0"},
				{Name: "workers-1", NodeGroup: "workers", Address: "130.61.1.22", ProviderID: "ocid1.instance.oc1.eu-frankfurt-1.aaaainstance3", Shape: "VM.Standard.A1.Flex", Hostname: "oracle-workers-1"},
			},
			providers: []string{"oci"},
			endpoint:  "10.0.1.50",
		},
	} {
		t.Run(tc.file, func(t *testing.T) {
			state := readState(t, tc.file)
			got, err := ProjectState(state)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)

			names, err := ProvidersInState(state)
			require.NoError(t, err)
			require.Equal(t, tc.providers, names)

			ep, ok, err := StateEndpoint(state)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, tc.endpoint, ep)
		})
	}
}

// stateOf wraps resources (JSON) in a v4 state.
func stateOf(resources ...string) []byte {
	return []byte(`{"version":4,"terraform_version":"1.10.10","serial":1,"lineage":"x","outputs":{},"resources":[` + strings.Join(resources, ",") + `]}`)
}

const emuProv = `"provider":"provider[\"registry.opentofu.org/rezuscloud/emulated\"].p_emulated"`

func TestProjectStateCases(t *testing.T) {
	t.Run("no state is no machines", func(t *testing.T) {
		for _, s := range []string{"", "\n"} {
			got, err := ProjectState([]byte(s))
			require.NoError(t, err)
			require.Empty(t, got)
			names, err := ProvidersInState([]byte(s))
			require.NoError(t, err)
			require.Empty(t, names)
			_, ok, err := StateEndpoint([]byte(s))
			require.NoError(t, err)
			require.False(t, ok)
		}
	})

	t.Run("deposed instances are left out, tainted ones kept", func(t *testing.T) {
		got, err := ProjectState(stateOf(`{"mode":"managed","type":"emulated_machine","name":"ng_big_workers",` + emuProv + `,"instances":[
			{"index_key":"big-workers-0","status":"tainted","attributes":{"address":"127.0.0.5","provider_id":"emulated://a","hostname":"a"}},
			{"index_key":"big-workers-0","deposed":"00000001","attributes":{"address":"127.0.0.4","provider_id":"emulated://old","hostname":"a"}}]}`))
		require.NoError(t, err)
		require.Equal(t, []ObservedMachine{{Name: "big-workers-0", NodeGroup: "big-workers", Address: "127.0.0.5", ProviderID: "emulated://a", Shape: "emulated", Hostname: "a"}}, got)
	})

	t.Run("only node-group resources of machine types", func(t *testing.T) {
		got, err := ProjectState(stateOf(
			`{"mode":"managed","type":"emulated_address","name":"endpoint",`+emuProv+`,"instances":[{"attributes":{"address":"127.0.0.9"}}]}`,
			`{"mode":"managed","type":"emulated_machine","name":"other",`+emuProv+`,"instances":[{"index_key":"x","attributes":{}}]}`,
			`{"module":"module.m","mode":"managed","type":"emulated_machine","name":"ng_cp",`+emuProv+`,"instances":[{"index_key":"cp-0","attributes":{}}]}`,
			`{"mode":"data","type":"emulated_machine","name":"ng_cp",`+emuProv+`,"instances":[{"index_key":"cp-0","attributes":{}}]}`,
			`{"mode":"managed","type":"emulated_machine","name":"ng_cp",`+emuProv+`,"instances":[{"index_key":"cp-0","attributes":{"address":null}}]}`,
		))
		require.NoError(t, err)
		require.Equal(t, []ObservedMachine{{Name: "cp-0", NodeGroup: "cp", Shape: "emulated"}}, got)
	})

	t.Run("address preference", func(t *testing.T) {
		got, err := ProjectState(stateOf(`{"mode":"managed","type":"openstack_compute_instance_v2","name":"ng_w","provider":"provider[\"registry.opentofu.org/terraform-provider-openstack/openstack\"].p_os","instances":[
			{"index_key":"w-0","attributes":{"access_ip_v4":"","access_ip_v6":"2001:db8::5","id":"i","flavor_name":"f","name":"n"}}]}`))
		require.NoError(t, err)
		require.Equal(t, "2001:db8::5", got[0].Address)
	})

	for _, tc := range []struct {
		name, state, want string
	}{
		{"not JSON", `{`, "the state is not JSON"},
		{"encrypted", `{"serial":1,"lineage":"x","meta":{"key_provider.pbkdf2.k":"e30="},"encrypted_data":"AAAA","encryption_version":"v0"}`, "the state is encrypted"},
		{"old format", `{"version":3,"resources":[]}`, "state format version 3 is not supported"},
		{"no format", `{"resources":[]}`, "state format version none is not supported"},
		{"counted, not for_each", string(stateOf(`{"mode":"managed","type":"emulated_machine","name":"ng_cp",` + emuProv + `,"instances":[{"index_key":0,"attributes":{}}]}`)),
			"an instance's index key is 0, want a machine name"},
		{"one machine twice", string(stateOf(
			`{"mode":"managed","type":"emulated_machine","name":"ng_cp",`+emuProv+`,"instances":[{"index_key":"cp-0","attributes":{}}]}`,
			`{"mode":"managed","type":"openstack_compute_instance_v2","name":"ng_cp","provider":"provider[\"registry.opentofu.org/terraform-provider-openstack/openstack\"].p_os","instances":[{"index_key":"cp-0","attributes":{}}]}`)),
			"machine cp-0 is both emulated_machine.ng_cp and openstack_compute_instance_v2.ng_cp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ProjectState([]byte(tc.state))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestProvidersInState(t *testing.T) {
	got, err := ProvidersInState(stateOf(
		`{"mode":"managed","type":"emulated_machine","name":"ng_cp","provider":"provider[\"registry.opentofu.org/rezuscloud/emulated\"].p_emu_2","instances":[{"index_key":"cp-0","attributes":{}}]}`,
		`{"mode":"data","type":"openstack_networking_network_v2","name":"ng_w","provider":"provider[\"registry.opentofu.org/terraform-provider-openstack/openstack\"].p_1cloud","instances":[{"attributes":{}}]}`,
		`{"mode":"managed","type":"emulated_machine","name":"ng_w","provider":"provider[\"registry.opentofu.org/rezuscloud/emulated\"].p_emu_2","instances":[{"index_key":"w-0","attributes":{}}]}`,
		// A resource left with no instances needs no provider.
		`{"mode":"managed","type":"emulated_machine","name":"ng_gone","provider":"provider[\"registry.opentofu.org/rezuscloud/emulated\"].p_gone","instances":[]}`,
	))
	require.NoError(t, err)
	require.Equal(t, []string{"1cloud", "emu-2"}, got)

	for _, tc := range []struct{ provider, want string }{
		{`provider[\"registry.opentofu.org/rezuscloud/emulated\"]`, "has no alias"},
		{`provider[\"registry.opentofu.org/rezuscloud/emulated\"].emulated`, `provider alias "emulated" is not one RezusCloud writes`},
		{`module.x.provider[\"registry.opentofu.org/rezuscloud/emulated\"].p_a`, "is not of the form provider["},
		{`provider[\"registry.opentofu.org/rezuscloud/emulated`, "is not of the form provider["},
	} {
		_, err := ProvidersInState(stateOf(`{"mode":"managed","type":"emulated_machine","name":"ng_cp","provider":"` + tc.provider + `","instances":[{"index_key":"cp-0","attributes":{}}]}`))
		require.ErrorContains(t, err, tc.want, tc.provider)
	}
}

func TestStateEndpoint(t *testing.T) {
	_, ok, err := StateEndpoint(stateOf())
	require.NoError(t, err)
	require.False(t, ok)
	_, ok, err = StateEndpoint([]byte(`{"version":4,"outputs":{"control_plane_endpoint_address":{"value":null,"type":"string"}},"resources":[]}`))
	require.NoError(t, err)
	require.False(t, ok)
	_, _, err = StateEndpoint([]byte(`{"version":4,"outputs":{"control_plane_endpoint_address":{"value":["a"],"type":["list","string"]}},"resources":[]}`))
	require.ErrorContains(t, err, "want a string")
}
