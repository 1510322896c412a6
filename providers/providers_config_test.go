package providers

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestProviderConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name, typ, config string
		// want are "field: message" of every cause, in order.
		want []string
	}{
		{"emulated: not a URL", domain.ProviderEmulated, `{"endpoint":"127.0.0.1:8089"}`,
			[]string{`spec.config.endpoint: "127.0.0.1:8089" must be an http URL of the emulator's API, e.g. http://127.0.0.1:8089`}},
		{"emulated: unknown field", domain.ProviderEmulated, `{"endpoint":"http://x","region":"a"}`, []string{`spec.config.region: unknown field`}},
		{"emulated: wrong type", domain.ProviderEmulated, `{"endpoint":8089}`, []string{"spec.config.endpoint: must be string, got number"}},
		{"openstack: authURL required", domain.ProviderOpenStack, `{"region":"r"}`, []string{"spec.config.authURL: required"}},
		{"openstack: bad values", domain.ProviderOpenStack, `{"authURL":"keystone","endpointType":"private","allowedCIDRs":["10.0.0.0/8","10.0.0.1/8","everyone"]}`, []string{
			`spec.config.authURL: "keystone" must be the http(s) URL of Keystone, e.g. https://keystone.example.com:5000/v3`,
			`spec.config.endpointType: "private" must be one of public, internal, admin`,
			`spec.config.allowedCIDRs[1]: duplicate "10.0.0.1/8"`,
			`spec.config.allowedCIDRs[2]: "everyone" must be a CIDR, e.g. 203.0.113.0/24`,
		}},
		{"openstack: a secret in the config", domain.ProviderOpenStack, `{"authURL":"https://k","password":"hunter2"}`,
			[]string{`spec.config.password: unknown field`}},
		{"oci: required", domain.ProviderOCI, `{}`, []string{"spec.config.region: required", "spec.config.compartmentID: required"}},
		{"oci: bad values", domain.ProviderOCI, `{"region":"r","compartmentID":"ocid1.vcn.oc1..x","auth":"Password"}`, []string{
			`spec.config.compartmentID: "ocid1.vcn.oc1..x" must be an OCID (ocid1.compartment|tenancy.…)`,
			`spec.config.auth: "Password" must be one of ApiKey, InstancePrincipal, SecurityToken, ResourcePrincipal`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			typ, ok := LookupProviderType(tc.typ)
			require.True(t, ok)
			_, causes := typ.gen.decodeConfig(json.RawMessage(tc.config))
			require.Equal(t, tc.want, causeStrings(causes))

			// Through Generate: an Invalid error on the Provider naming the fields.
			_, err := Generate(GenerateInput{Tenant: genTenant("demo", ""), Providers: map[string]*domain.Provider{"p": genProvider("p", tc.typ, tc.config)}})
			require.True(t, domain.IsInvalid(err), "%v", err)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

func TestNodeGroupProviderConfigValidation(t *testing.T) {
	const (
		osOK  = `"flavor":"m1","image":"talos","network":"net"`
		ociOK = `"shape":"VM.Standard.E5.Flex","imageID":"ocid1.image.oc1..i","subnetID":"ocid1.subnet.oc1..s","availabilityDomains":["AD-1"]`
	)
	for _, tc := range []struct {
		name, typ, config string
		want              []string
	}{
		{"emulated: takes nothing", domain.ProviderEmulated, `{"flavor":"m1"}`, []string{`spec.providerConfig.flavor: unknown field`}},
		{"emulated: install keys are the renderer's", domain.ProviderEmulated, `{"installDisk":"/dev/vda","installImage":"ghcr.io/siderolabs/installer:v1.13.0"}`, nil},
		{"emulated: not an object", domain.ProviderEmulated, `[]`, []string{"spec.providerConfig: must be object, got array"}},
		{"openstack: required", domain.ProviderOpenStack, `{}`, []string{
			"spec.providerConfig.flavor: required", "spec.providerConfig.image: required", "spec.providerConfig.network: required"}},
		{"openstack: fine", domain.ProviderOpenStack, `{` + osOK + `,"availabilityZones":["a","b"],"securityGroups":["x"],"keyPair":"k","configDrive":true,"installDisk":"/dev/vda"}`, nil},
		{"openstack: bad lists", domain.ProviderOpenStack, `{` + osOK + `,"availabilityZones":["a","","a"],"securityGroups":[""],"subnetID":"private-subnet"}`, []string{
			`spec.providerConfig.subnetID: "private-subnet" must be a subnet id (a UUID)`,
			"spec.providerConfig.securityGroups[0]: must not be empty",
			"spec.providerConfig.availabilityZones[1]: must not be empty",
			`spec.providerConfig.availabilityZones[2]: duplicate "a"`,
		}},
		{"openstack: typo", domain.ProviderOpenStack, `{` + osOK + `,"availabilityZone":"a"}`, []string{`spec.providerConfig.availabilityZone: unknown field`}},
		{"openstack: wrong type", domain.ProviderOpenStack, `{` + osOK + `,"availabilityZones":"a"}`, []string{"spec.providerConfig.availabilityZones: must be array, got string"}},
		{"oci: required", domain.ProviderOCI, `{}`, []string{
			"spec.providerConfig.shape: required", "spec.providerConfig.imageID: required", "spec.providerConfig.subnetID: required",
			`spec.providerConfig.availabilityDomains: required: at least one availability domain, e.g. ["Uocm:PHX-AD-1"]`}},
		{"oci: fine", domain.ProviderOCI, `{` + ociOK + `,"ocpus":1.5,"memoryGBs":12,"assignPublicIP":true,"bootVolumeSizeGBs":60,"nsgIDs":["ocid1.networksecuritygroup.oc1..n"]}`, nil},
		{"oci: bad values", domain.ProviderOCI, `{"shape":"s","imageID":"talos","subnetID":"ocid1.vcn.oc1..v","availabilityDomains":["AD-1"],"ocpus":-1,"memoryGBs":-2,"bootVolumeSizeGBs":10,"nsgIDs":["sg"]}`, []string{
			`spec.providerConfig.imageID: "talos" must be an OCID (ocid1.image.…)`,
			`spec.providerConfig.subnetID: "ocid1.vcn.oc1..v" must be an OCID (ocid1.subnet.…)`,
			"spec.providerConfig.ocpus: must not be negative",
			"spec.providerConfig.memoryGBs: must not be negative",
			"spec.providerConfig.bootVolumeSizeGBs: must be between 50 and 32768, got 10",
			`spec.providerConfig.nsgIDs[0]: "sg" must be an OCID (ocid1.networksecuritygroup.…)`,
		}},
		{"oci: wrong type", domain.ProviderOCI, `{` + ociOK + `,"assignPublicIP":"yes"}`, []string{"spec.providerConfig.assignPublicIP: must be boolean, got string"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			typ, ok := LookupProviderType(tc.typ)
			require.True(t, ok)
			_, causes := typ.gen.decodeGroupConfig(json.RawMessage(tc.config))
			require.Equal(t, tc.want, causeStrings(causes))

			tn := genTenant("demo", "")
			cfg := map[string]string{domain.ProviderEmulated: cfgEmulated, domain.ProviderOpenStack: cfgOpenStack, domain.ProviderOCI: cfgOCI}[tc.typ]
			in := GenerateInput{Tenant: tn, PlaceholderEndpoint: true,
				Providers: map[string]*domain.Provider{"p": genProvider("p", tc.typ, cfg)},
				Groups:    []GroupInput{genGroup(tn, "cp", domain.RoleControlPlane, "p", 1, tc.config)}}
			_, err := Generate(in)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.True(t, domain.IsInvalid(err), "%v", err)
			require.ErrorContains(t, err, `nodegroup "cp" is invalid: `+tc.want[0])
		})
	}
}

func causeStrings(causes []domain.Cause) []string {
	var out []string
	for _, c := range causes {
		out = append(out, c.Field+": "+c.Message)
	}
	return out
}

func TestProviderTypes(t *testing.T) {
	require.Equal(t, []string{domain.ProviderEmulated, domain.ProviderModule, domain.ProviderOCI, domain.ProviderOpenStack}, TofuTypeNames())
	_, ok := tofuType(domain.ProviderMetal)
	require.False(t, ok)
	for _, name := range TofuTypeNames() {
		if name == domain.ProviderModule {
			continue // its module's output says where the machines are
		}
		typ, _ := LookupProviderType(name)
		require.Equal(t, name, typ.Type)
		m := typ.Machines
		require.NotEmpty(t, m.ResourceType)
		require.Truef(t, len(m.ResourceType) > len(typ.LocalName) && m.ResourceType[:len(typ.LocalName)+1] == typ.LocalName+"_", "%s belongs to %s", m.ResourceType, typ.LocalName)
		require.NotEmpty(t, m.AddressAttrs)
		require.NotEmpty(t, m.ProviderIDAttr)
		require.NotEmpty(t, m.HostnameAttr)
		require.True(t, (m.ShapeAttr == "") != (m.Shape == ""), "%s: a shape attribute or a constant shape", name)
		require.Regexp(t, `^\d+\.\d+\.\d+$`, typ.Version, "%s: an exact version", name)
	}
	oci, _ := LookupProviderType(domain.ProviderOCI)
	require.Contains(t, oci.CredentialEnv, "OCI_PRIVATE_KEY")
	os, _ := LookupProviderType(domain.ProviderOpenStack)
	require.Contains(t, os.CredentialEnv, "OS_APPLICATION_CREDENTIAL_SECRET")
}
