package providers

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestValidateProviderSpec: the write-time check answers what the generator
// would refuse at apply time, field by field.
func TestValidateProviderSpec(t *testing.T) {
	for _, tc := range []struct {
		name, typ, config string
		want              []string
	}{
		{"emulated fine", domain.ProviderEmulated, `{"endpoint":"http://127.0.0.1:8089"}`, nil},
		{"emulated: endpoint required", domain.ProviderEmulated, `{}`, []string{"spec.config.endpoint: required unless spec.credentialsRef names credentials that hold EMULATOR_ENDPOINT"}},
		{"openstack: a secret in the config", domain.ProviderOpenStack, `{"authURL":"https://k","password":"x"}`, []string{"spec.config.password: unknown field"}},
		{"oci: required", domain.ProviderOCI, `{}`, []string{"spec.config.region: required", "spec.config.compartmentID: required"}},
		{"metal: no settings", domain.ProviderMetal, ``, nil},
		{"metal: empty object", domain.ProviderMetal, `{}`, nil},
		{"metal: takes nothing", domain.ProviderMetal, `{"endpoint":"x"}`, []string{"spec.config.endpoint: unknown field"}},
		{"unknown type is domain's", "vsphere", `{"x":1}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ValidateProviderSpec(&domain.ProviderSpec{Type: tc.typ, Config: json.RawMessage(tc.config)})
			require.Equal(t, tc.want, causeStrings(got))
			if typ, ok := tofuType(tc.typ); ok {
				// The same causes as the generator's.
				_, gen := decodeSpecConfig(typ, &domain.ProviderSpec{Type: tc.typ, Config: json.RawMessage(tc.config)})
				require.Equal(t, causeStrings(gen), causeStrings(got))
			}
		})
	}
	t.Run("emulated: the endpoint in the credentials", func(t *testing.T) {
		// serve --with-emulator's registration: EMULATOR_ENDPOINT and the
		// token sealed, nothing about the emulator in what every role reads.
		for _, config := range []string{``, `{}`} {
			require.Empty(t, ValidateProviderSpec(&domain.ProviderSpec{Type: domain.ProviderEmulated, Config: json.RawMessage(config),
				CredentialsRef: &domain.SecretRef{Name: "emulated"}}))
		}
	})
}

func TestValidateGroupConfig(t *testing.T) {
	for _, tc := range []struct {
		name, typ, config string
		count             int
		want              []string
	}{
		{"emulated fine", domain.ProviderEmulated, `{"installDisk":"/dev/vda"}`, 1, nil},
		{"emulated: a flavor", domain.ProviderEmulated, `{"flavor":"m1"}`, 1, []string{"spec.providerConfig.flavor: unknown field"}},
		{"openstack: required", domain.ProviderOpenStack, `{"image":"talos","network":"net"}`, 1, []string{"spec.providerConfig.flavor: required"}},
		{"metal: listed", domain.ProviderMetal, `{"machines":[{"address":"10.0.0.1"}]}`, 1, nil},
		{"metal: listed count differs", domain.ProviderMetal, `{"machines":[{"address":"10.0.0.1"}]}`, 3,
			[]string{"spec.providerConfig.machines: lists 1 machines but spec.count is 3"}},
		{"metal: bad address", domain.ProviderMetal, `{"machines":[{"address":"not an address"}]}`, 1,
			[]string{`spec.providerConfig.machines[0].address: "not an address" is neither an IP address nor a DNS name`}},
		{"metal: both", domain.ProviderMetal, `{"machines":[{"address":"10.0.0.1"}],"selector":"a=b"}`, 1,
			[]string{"spec.providerConfig: give machines or selector, not both"}},
		{"metal: selector, machines registered later", domain.ProviderMetal, `{"selector":"rack=r1"}`, 3, nil},
		{"metal: bad selector", domain.ProviderMetal, `{"selector":"rack in (r1"}`, 3, []string{"spec.providerConfig.selector"}},
		{"metal: neither", domain.ProviderMetal, `{}`, 1,
			[]string{"spec.providerConfig: a metal node group lists its machines (machines: [{address: ...}]) or selects registered ones (selector: ...)"}},
		{"metal: unknown field", domain.ProviderMetal, `{"flavor":"x"}`, 0, []string{"spec.providerConfig.flavor: unknown field"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &domain.Provider{Spec: domain.ProviderSpec{Type: tc.typ}}
			got := causeStrings(ValidateGroupConfig(p, &domain.NodeGroupSpec{Role: domain.RoleWorker, Count: tc.count, ProviderConfig: json.RawMessage(tc.config)}))
			if len(tc.want) == 1 && tc.want[0] == "spec.providerConfig.selector" {
				require.Len(t, got, 1)
				require.Contains(t, got[0], tc.want[0]+": ")
				return
			}
			require.Equal(t, tc.want, got)
		})
	}
	require.Nil(t, ValidateGroupConfig(nil, &domain.NodeGroupSpec{}), "a missing provider is the caller's cause")
}
