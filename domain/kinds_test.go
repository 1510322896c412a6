package domain_test

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// specCase is one spec given to a kind's normaliser and what must come out.
type specCase struct {
	name string
	spec string
	// fields is the exact multiset of cause fields; nil means the spec is valid.
	fields []string
	// want, when set, is the canonical spec expected (compared as JSON).
	want string
}

func causeFields(causes []domain.Cause) []string {
	if len(causes) == 0 {
		return nil
	}
	out := make([]string, 0, len(causes))
	for _, c := range causes {
		out = append(out, c.Field)
	}
	sort.Strings(out)
	return out
}

func runSpecCases(t *testing.T, kindName string, cases []specCase) {
	t.Helper()
	kind := domain.MustKind(kindName)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, causes := kind.NormalizeSpec(json.RawMessage(tc.spec))
			if tc.fields != nil {
				require.Equal(t, sorted(tc.fields), causeFields(causes), "causes: %+v", causes)
				require.Nil(t, out)
				for _, c := range causes {
					require.NotEmpty(t, c.Message, "cause %+v", c)
					require.NotEmpty(t, c.Type, "cause %+v", c)
					require.True(t, c.Field == "spec" || strings.HasPrefix(c.Field, "spec."), "cause %+v is not rooted at spec", c)
				}
				return
			}
			require.Empty(t, causes)
			require.NotNil(t, out)
			if tc.want != "" {
				require.JSONEq(t, tc.want, string(out))
			}
			// The canonical form is a fixed point of the normaliser, so that
			// an unchanged object written back is recognised as unchanged.
			again, causes := kind.NormalizeSpec(out)
			require.Empty(t, causes)
			require.Equal(t, string(out), string(again))
		})
	}
}

func TestTenantSpec(t *testing.T) {
	runSpecCases(t, "Tenant", []specCase{
		{name: "empty spec gets defaults", spec: `{}`, want: tenantDefaultSpec},
		{name: "null spec gets defaults", spec: `null`, want: tenantDefaultSpec},
		{name: "versions get a leading v", spec: `{"talosVersion":"1.13.0","kubernetesVersion":"1.35.4"}`, want: tenantDefaultSpec},
		{name: "pre-release version", spec: `{"talosVersion":"v1.14.0-alpha.1"}`},
		{name: "bad talos version", spec: `{"talosVersion":"1.13"}`, fields: []string{"spec.talosVersion"}},
		{name: "talos version with four parts", spec: `{"talosVersion":"v1.13.0.1"}`, fields: []string{"spec.talosVersion"}},
		{name: "bad kubernetes version", spec: `{"kubernetesVersion":"latest"}`, fields: []string{"spec.kubernetesVersion"}},
		{name: "leading zero", spec: `{"kubernetesVersion":"v1.036.0"}`, fields: []string{"spec.kubernetesVersion"}},
		{name: "endpoint with port", spec: `{"controlPlane":{"endpoint":"https://10.0.0.10:6443"}}`},
		{name: "endpoint with a trailing slash", spec: `{"controlPlane":{"endpoint":"https://api.example.com:6443/"}}`},
		{name: "endpoint not https", spec: `{"controlPlane":{"endpoint":"http://10.0.0.10:6443"}}`, fields: []string{"spec.controlPlane.endpoint"}},
		{name: "endpoint with a path", spec: `{"controlPlane":{"endpoint":"https://api.example.com/k8s"}}`, fields: []string{"spec.controlPlane.endpoint"}},
		{name: "endpoint without host", spec: `{"controlPlane":{"endpoint":"https://:6443"}}`, fields: []string{"spec.controlPlane.endpoint"}},
		{name: "endpoint not a URL", spec: `{"controlPlane":{"endpoint":"10.0.0.10:6443"}}`, fields: []string{"spec.controlPlane.endpoint"}},
		{name: "bad CIDR", spec: `{"network":{"podSubnets":["10.244.0.0/33"]}}`, fields: []string{"spec.network.podSubnets[0]"}},
		{name: "CIDR that is not one", spec: `{"network":{"serviceSubnets":["ten-dot-something"]}}`, fields: []string{"spec.network.serviceSubnets[0]"}},
		{name: "non-network CIDR", spec: `{"network":{"podSubnets":["10.244.0.1/16"]}}`, fields: []string{"spec.network.podSubnets[0]"}},
		{name: "two IPv4 pod subnets", spec: `{"network":{"podSubnets":["10.244.0.0/16","10.245.0.0/16"]}}`, fields: []string{"spec.network.podSubnets[1]"}},
		{name: "two IPv6 service subnets", spec: `{"network":{"serviceSubnets":["fd00:10:96::/112","fd00:10:97::/112"]}}`, fields: []string{"spec.network.serviceSubnets[1]"}},
		{
			name: "dual stack",
			spec: `{"network":{"podSubnets":["10.244.0.0/16","fd00:10:244::/56"],"serviceSubnets":["10.96.0.0/12","fd00:10:96::/112"]}}`,
		},
		{name: "pod subnet overlaps the default service subnet", spec: `{"network":{"podSubnets":["10.96.0.0/16"]}}`, fields: []string{"spec.network.serviceSubnets[0]"}},
		{
			name:   "service subnet inside the pod subnet",
			spec:   `{"network":{"podSubnets":["10.0.0.0/8"],"serviceSubnets":["10.96.0.0/12"]}}`,
			fields: []string{"spec.network.serviceSubnets[0]"},
		},
		{
			name:   "IPv6 overlap only",
			spec:   `{"network":{"podSubnets":["10.244.0.0/16","fd00::/8"],"serviceSubnets":["10.96.0.0/12","fd00:10:96::/112"]}}`,
			fields: []string{"spec.network.serviceSubnets[1]"},
		},
		{name: "custom dnsDomain", spec: `{"network":{"dnsDomain":"k8s.internal"}}`},
		{name: "upper-case dnsDomain", spec: `{"network":{"dnsDomain":"Cluster.Local"}}`, fields: []string{"spec.network.dnsDomain"}},
		{name: "dnsDomain with an empty label", spec: `{"network":{"dnsDomain":"cluster..local"}}`, fields: []string{"spec.network.dnsDomain"}},
		{name: "dnsDomain with underscore", spec: `{"network":{"dnsDomain":"cluster_local"}}`, fields: []string{"spec.network.dnsDomain"}},
		{
			name: "several errors at once are all reported",
			spec: `{"talosVersion":"x","kubernetesVersion":"y","controlPlane":{"endpoint":"ftp://h"},` +
				`"network":{"podSubnets":["10.244.0.1/16","nope"],"serviceSubnets":["10.96.0.0/12","10.97.0.0/16"],"dnsDomain":"-bad-"}}`,
			fields: []string{
				"spec.controlPlane.endpoint", "spec.kubernetesVersion", "spec.network.dnsDomain",
				"spec.network.podSubnets[0]", "spec.network.podSubnets[1]", "spec.network.serviceSubnets[1]", "spec.talosVersion",
			},
		},
		{name: "unknown field", spec: `{"talosVersion":"v1.13.0","workers":3}`, fields: []string{"spec.workers"}},
		{name: "wrong type", spec: `{"network":{"podSubnets":"10.244.0.0/16"}}`, fields: []string{"spec.network.podSubnets"}},
		{name: "spec not an object", spec: `[]`, fields: []string{"spec"}},
	})
}

func TestNodeGroupSpec(t *testing.T) {
	taint := func(s string) string {
		return `{"role":"worker","count":1,"provider":"emu","taints":[` + s + `]}`
	}
	runSpecCases(t, "NodeGroup", []specCase{
		{name: "worker", spec: workerSpec, want: `{"role":"worker","count":3,"provider":"emu","updateStrategy":{"maxParallelism":1}}`},
		{name: "empty worker group", spec: `{"role":"worker","count":0,"provider":"emu"}`},
		{name: "largest group", spec: `{"role":"worker","count":1000,"provider":"emu"}`},
		{name: "role missing", spec: `{"count":1,"provider":"emu"}`, fields: []string{"spec.role"}},
		{name: "role unknown", spec: `{"role":"master","count":1,"provider":"emu"}`, fields: []string{"spec.role"}},
		{name: "count -1", spec: `{"role":"worker","count":-1,"provider":"emu"}`, fields: []string{"spec.count"}},
		{name: "count 1001", spec: `{"role":"worker","count":1001,"provider":"emu"}`, fields: []string{"spec.count"}},
		{name: "control plane of 3", spec: `{"role":"controlplane","count":3,"provider":"emu"}`},
		{name: "control plane of 0", spec: `{"role":"controlplane","count":0,"provider":"emu"}`, fields: []string{"spec.count"}},
		{name: "control plane of 2", spec: `{"role":"controlplane","count":2,"provider":"emu"}`, fields: []string{"spec.count"}},
		{name: "control plane of -1 is reported once", spec: `{"role":"controlplane","count":-1,"provider":"emu"}`, fields: []string{"spec.count"}},
		{name: "provider missing", spec: `{"role":"worker","count":1}`, fields: []string{"spec.provider"}},
		{name: "provider invalid", spec: `{"role":"worker","count":1,"provider":"My_Cloud"}`, fields: []string{"spec.provider"}},
		{
			name: "providerConfig object",
			spec: `{"role":"worker","count":1,"provider":"emu","providerConfig":{"shape":"VM.Standard.E4.Flex","ocpus":2}}`,
			want: `{"role":"worker","count":1,"provider":"emu","providerConfig":{"ocpus":2,"shape":"VM.Standard.E4.Flex"},"updateStrategy":{"maxParallelism":1}}`,
		},
		{name: "providerConfig null", spec: `{"role":"worker","count":1,"provider":"emu","providerConfig":null}`},
		{name: "providerConfig array", spec: `{"role":"worker","count":1,"provider":"emu","providerConfig":[1]}`, fields: []string{"spec.providerConfig"}},
		{name: "providerConfig string", spec: `{"role":"worker","count":1,"provider":"emu","providerConfig":"shape=large"}`, fields: []string{"spec.providerConfig"}},
		{name: "providerConfig number", spec: `{"role":"worker","count":1,"provider":"emu","providerConfig":7}`, fields: []string{"spec.providerConfig"}},
		{name: "taint", spec: taint(`{"key":"dedicated","value":"gpu","effect":"NoSchedule"}`)},
		{name: "taint with a prefixed key and no value", spec: taint(`{"key":"node.rezuscloud.io/spot","effect":"PreferNoSchedule"}`)},
		{name: "taint effect bad", spec: taint(`{"key":"dedicated","effect":"Sometimes"}`), fields: []string{"spec.taints[0].effect"}},
		{name: "taint effect missing", spec: taint(`{"key":"dedicated"}`), fields: []string{"spec.taints[0].effect"}},
		{name: "taint key missing", spec: taint(`{"value":"x","effect":"NoExecute"}`), fields: []string{"spec.taints[0].key"}},
		{name: "taint key invalid", spec: taint(`{"key":"bad key","effect":"NoExecute"}`), fields: []string{"spec.taints[0].key"}},
		{
			name:   "taint value invalid is reported at the value",
			spec:   taint(`{"key":"dedicated","value":"not a label value!","effect":"NoExecute"}`),
			fields: []string{"spec.taints[0].value"},
		},
		{
			name:   "second taint bad",
			spec:   taint(`{"key":"a","effect":"NoSchedule"},{"key":"","effect":"Never"}`),
			fields: []string{"spec.taints[1].effect", "spec.taints[1].key"},
		},
		{
			name: "maxParallelism 0 means the default",
			spec: `{"role":"worker","count":4,"provider":"emu","updateStrategy":{"maxParallelism":0}}`,
			want: `{"role":"worker","count":4,"provider":"emu","updateStrategy":{"maxParallelism":1}}`,
		},
		{name: "maxParallelism 5 for workers", spec: `{"role":"worker","count":10,"provider":"emu","updateStrategy":{"maxParallelism":5}}`},
		{
			name:   "maxParallelism negative",
			spec:   `{"role":"worker","count":4,"provider":"emu","updateStrategy":{"maxParallelism":-1}}`,
			fields: []string{"spec.updateStrategy.maxParallelism"},
		},
		{
			name:   "maxParallelism 1001",
			spec:   `{"role":"worker","count":4,"provider":"emu","updateStrategy":{"maxParallelism":1001}}`,
			fields: []string{"spec.updateStrategy.maxParallelism"},
		},
		{
			name:   "maxParallelism above 1 for a control plane",
			spec:   `{"role":"controlplane","count":3,"provider":"emu","updateStrategy":{"maxParallelism":2}}`,
			fields: []string{"spec.updateStrategy.maxParallelism"},
		},
		{name: "drain settings", spec: `{"role":"worker","count":1,"provider":"emu","updateStrategy":{"maxParallelism":1},"drain":false,"drainTimeout":"90s"}`},
		{name: "drainTimeout 0 waits forever", spec: `{"role":"worker","count":1,"provider":"emu","updateStrategy":{"maxParallelism":1},"drainTimeout":"0"}`},
		{
			name:   "drainTimeout not a duration",
			spec:   `{"role":"worker","count":1,"provider":"emu","drainTimeout":"ten minutes"}`,
			fields: []string{"spec.drainTimeout"},
		},
		{
			name:   "drainTimeout negative or too long",
			spec:   `{"role":"worker","count":1,"provider":"emu","drainTimeout":"25h"}`,
			fields: []string{"spec.drainTimeout"},
		},
		{name: "node labels", spec: `{"role":"worker","count":1,"provider":"emu","labels":{"node.kubernetes.io/pool":"web","tier":""}}`},
		{
			name:   "bad node labels",
			spec:   `{"role":"worker","count":1,"provider":"emu","labels":{"bad key!":"x","tier":"-web-"}}`,
			fields: []string{"spec.labels[bad key!]", "spec.labels[tier]"},
		},
		{
			name: "talos version override is canonicalised",
			spec: `{"role":"worker","count":1,"provider":"emu","talosVersion":"1.12.0"}`,
			want: `{"role":"worker","count":1,"provider":"emu","talosVersion":"v1.12.0","updateStrategy":{"maxParallelism":1}}`,
		},
		{name: "bad talos version override", spec: `{"role":"worker","count":1,"provider":"emu","talosVersion":"1.12"}`, fields: []string{"spec.talosVersion"}},
		{
			name:   "several errors at once",
			spec:   `{"role":"controlplane","count":4,"provider":"","updateStrategy":{"maxParallelism":3},"taints":[{"effect":"x"}]}`,
			fields: []string{"spec.count", "spec.provider", "spec.taints[0].effect", "spec.taints[0].key", "spec.updateStrategy.maxParallelism"},
		},
		{name: "count as a string", spec: `{"role":"worker","count":"1","provider":"emu"}`, fields: []string{"spec.count"}},
		{name: "count as a fraction", spec: `{"role":"worker","count":1.5,"provider":"emu"}`, fields: []string{"spec.count"}},
		{name: "unknown field", spec: `{"role":"worker","count":1,"provider":"emu","replicas":1}`, fields: []string{"spec.replicas"}},
	})
}

func TestMachineSpec(t *testing.T) {
	runSpecCases(t, "Machine", []specCase{
		{name: "minimal", spec: `{"nodeGroup":"workers","role":"worker"}`, want: `{"nodeGroup":"workers","role":"worker"}`},
		{
			name: "everything",
			spec: `{"nodeGroup":"cp","role":"controlplane","address":"10.0.0.5","providerID":"oci://x","shape":"VM.Standard.E4.Flex","hostname":"cp-1.example.com"}`,
		},
		{name: "IPv6 address", spec: `{"nodeGroup":"workers","role":"worker","address":"fd00::5"}`},
		{name: "DNS name address", spec: `{"nodeGroup":"workers","role":"worker","address":"node-1.example.com"}`},
		{name: "bad address", spec: `{"nodeGroup":"workers","role":"worker","address":"not an address!"}`, fields: []string{"spec.address"}},
		{name: "address with underscore", spec: `{"nodeGroup":"workers","role":"worker","address":"node_1"}`, fields: []string{"spec.address"}},
		{name: "address with port", spec: `{"nodeGroup":"workers","role":"worker","address":"10.0.0.5:50000"}`, fields: []string{"spec.address"}},
		{name: "bad role", spec: `{"nodeGroup":"workers","role":"master"}`, fields: []string{"spec.role"}},
		{name: "role missing", spec: `{"nodeGroup":"workers"}`, fields: []string{"spec.role"}},
		{name: "missing nodeGroup", spec: `{"role":"worker"}`, fields: []string{"spec.nodeGroup"}},
		{name: "bad nodeGroup", spec: `{"nodeGroup":"Workers","role":"worker"}`, fields: []string{"spec.nodeGroup"}},
		{name: "bad hostname", spec: `{"nodeGroup":"workers","role":"worker","hostname":"Node_1"}`, fields: []string{"spec.hostname"}},
		{
			name:   "providerID too long",
			spec:   `{"nodeGroup":"workers","role":"worker","providerID":"` + strings.Repeat("x", 1025) + `"}`,
			fields: []string{"spec.providerID"},
		},
		{name: "all wrong", spec: `{"address":"???"}`, fields: []string{"spec.address", "spec.nodeGroup", "spec.role"}},
		{name: "unknown field", spec: `{"nodeGroup":"workers","role":"worker","ip":"10.0.0.5"}`, fields: []string{"spec.ip"}},
	})
}

func TestConfigPatchSpec(t *testing.T) {
	const yamlPatch = "machine:\n  install:\n    disk: /dev/sda\n"
	p := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	withPatch := func(extra string) string {
		if extra != "" {
			extra = "," + extra
		}
		return `{"patch":` + p(yamlPatch) + extra + `}`
	}
	json6902 := func(ops string) string { return `{"format":"json6902","patch":` + p(ops) + `}` }
	runSpecCases(t, "ConfigPatch", []specCase{
		{
			name: "defaults: enabled, strategic, all machines",
			spec: withPatch(""),
			want: `{"target":{"kind":"all"},"patch":` + p(yamlPatch) + `,"format":"strategic","enabled":true,"weight":0}`,
		},
		{
			name: "disabled stays disabled",
			spec: withPatch(`"enabled":false`),
			want: `{"target":{"kind":"all"},"patch":` + p(yamlPatch) + `,"format":"strategic","enabled":false,"weight":0}`,
		},
		{name: "target role", spec: withPatch(`"target":{"kind":"role","name":"controlplane"}`)},
		{name: "target node group", spec: withPatch(`"target":{"kind":"nodeGroup","name":"workers"}`)},
		{name: "target machine", spec: withPatch(`"target":{"kind":"machine","name":"m-1"}`)},
		{name: "target kind unknown", spec: withPatch(`"target":{"kind":"pod","name":"x"}`), fields: []string{"spec.target.kind"}},
		{name: "target kind is case-sensitive", spec: withPatch(`"target":{"kind":"NodeGroup","name":"x"}`), fields: []string{"spec.target.kind"}},
		{name: "name forbidden for all", spec: withPatch(`"target":{"kind":"all","name":"x"}`), fields: []string{"spec.target.name"}},
		{name: "role name required", spec: withPatch(`"target":{"kind":"role"}`), fields: []string{"spec.target.name"}},
		{name: "role name unknown", spec: withPatch(`"target":{"kind":"role","name":"master"}`), fields: []string{"spec.target.name"}},
		{name: "node group name required", spec: withPatch(`"target":{"kind":"nodeGroup"}`), fields: []string{"spec.target.name"}},
		{name: "machine name invalid", spec: withPatch(`"target":{"kind":"machine","name":"M_1"}`), fields: []string{"spec.target.name"}},
		{name: "patch missing", spec: `{}`, fields: []string{"spec.patch"}},
		{name: "patch blank", spec: `{"patch":" \n\t "}`, fields: []string{"spec.patch"}},
		{name: "patch as large as allowed", spec: `{"patch":` + p("#"+strings.Repeat("x", domain.MaxPatchBytes-1)) + `}`},
		{name: "patch too large", spec: `{"patch":` + p("#"+strings.Repeat("x", domain.MaxPatchBytes)) + `}`, fields: []string{"spec.patch"}},
		{name: "json6902", spec: json6902(`[{"op":"add","path":"/machine/network/hostname","value":"n1"},{"op":"move","from":"/a","path":"/b"}]`)},
		{name: "json6902 in YAML form is checked later", spec: json6902("- op: frob\n  path: nowhere\n")},
		{name: "json6902 bad op", spec: json6902(`[{"op":"frob","path":"/a"}]`), fields: []string{"spec.patch[0].op"}},
		{name: "json6902 bad path", spec: json6902(`[{"op":"add","path":"/a","value":1},{"op":"remove","path":"a"}]`), fields: []string{"spec.patch[1].path"}},
		{name: "json6902 move without from", spec: json6902(`[{"op":"move","path":"/a"}]`), fields: []string{"spec.patch[0].from"}},
		{name: "json6902 several bad ops", spec: json6902(`[{"op":"","path":""},{"op":"copy","from":"x","path":"y"}]`),
			fields: []string{"spec.patch[0].op", "spec.patch[0].path", "spec.patch[1].from", "spec.patch[1].path"}},
		{name: "json6902 malformed", spec: json6902(`[{"op":`), fields: []string{"spec.patch"}},
		{name: "json6902 not objects", spec: json6902(`[1,2]`), fields: []string{"spec.patch"}},
		{name: "weight 1000", spec: withPatch(`"weight":1000`)},
		{name: "weight -1", spec: withPatch(`"weight":-1`), fields: []string{"spec.weight"}},
		{name: "weight 1001", spec: withPatch(`"weight":1001`), fields: []string{"spec.weight"}},
		{name: "format unknown", spec: withPatch(`"format":"yaml"`), fields: []string{"spec.format"}},
		{
			name:   "several errors at once",
			spec:   `{"target":{"kind":"all","name":"x"},"format":"merge","patch":"","weight":5000}`,
			fields: []string{"spec.format", "spec.patch", "spec.target.name", "spec.weight"},
		},
		{name: "enabled as a string", spec: withPatch(`"enabled":"yes"`), fields: []string{"spec.enabled"}},
		{name: "unknown field", spec: withPatch(`"priority":1`), fields: []string{"spec.priority"}},
	})
}

func TestProviderSpec(t *testing.T) {
	runSpecCases(t, "Provider", []specCase{
		{name: "emulated", spec: `{"type":"emulated"}`, want: `{"type":"emulated"}`},
		{name: "metal", spec: `{"type":"metal"}`},
		{name: "oci with config and credentials", spec: `{"type":"oci","config":{"region":"eu-frankfurt-1"},"credentialsRef":{"name":"oci-creds"}}`},
		{name: "openstack", spec: `{"type":"openstack","config":{}}`},
		{name: "type unknown", spec: `{"type":"aws"}`, fields: []string{"spec.type"}},
		{name: "type is case-sensitive", spec: `{"type":"OCI"}`, fields: []string{"spec.type"}},
		{name: "type missing", spec: `{}`, fields: []string{"spec.type"}},
		{name: "config array", spec: `{"type":"oci","config":["region"]}`, fields: []string{"spec.config"}},
		{name: "config string", spec: `{"type":"oci","config":"region=x"}`, fields: []string{"spec.config"}},
		{name: "config boolean", spec: `{"type":"oci","config":true}`, fields: []string{"spec.config"}},
		{name: "credentialsRef bad name", spec: `{"type":"oci","credentialsRef":{"name":"OCI_Creds"}}`, fields: []string{"spec.credentialsRef.name"}},
		{name: "credentialsRef without name", spec: `{"type":"oci","credentialsRef":{}}`, fields: []string{"spec.credentialsRef.name"}},
		{name: "credentials inline are unknown", spec: `{"type":"oci","credentials":{"key":"secret"}}`, fields: []string{"spec.credentials"}},
		{name: "several errors", spec: `{"type":"gcp","config":1,"credentialsRef":{"name":"a.b"}}`, fields: []string{"spec.config", "spec.credentialsRef.name", "spec.type"}},
	})
}

func TestCanonicalSpecIsDeterministic(t *testing.T) {
	tests := []struct {
		name string
		kind string
		a, b string
		want string
	}{
		{
			name: "providerConfig key order",
			kind: "NodeGroup",
			a:    `{"role":"worker","count":1,"provider":"emu","providerConfig":{"b":1,"a":2}}`,
			b:    `{"role":"worker","count":1,"provider":"emu","providerConfig":{"a":2,"b":1}}`,
			want: `{"role":"worker","count":1,"provider":"emu","providerConfig":{"a":2,"b":1},"updateStrategy":{"maxParallelism":1}}`,
		},
		{
			name: "nested providerConfig, whitespace and big numbers",
			kind: "NodeGroup",
			a:    `{"role":"worker","count":1,"provider":"emu","providerConfig":{"z":{"y":[3,{"q":1,"p":2}],"x":12345678901234567890},"a":1.50}}`,
			b: `{ "providerConfig" : { "a" : 1.50, "z" : { "x" : 12345678901234567890, "y" : [ 3, { "p" : 2, "q" : 1 } ] } },
			     "provider":"emu", "count":1, "role":"worker" }`,
			want: `{"role":"worker","count":1,"provider":"emu","providerConfig":{"a":1.50,"z":{"x":12345678901234567890,"y":[3,{"p":2,"q":1}]}},"updateStrategy":{"maxParallelism":1}}`,
		},
		{
			name: "provider config key order",
			kind: "Provider",
			a:    `{"type":"oci","config":{"tenancy":"t","region":"r"}}`,
			b:    `{"config":{"region":"r","tenancy":"t"},"type":"oci"}`,
			want: `{"type":"oci","config":{"region":"r","tenancy":"t"}}`,
		},
		{
			name: "tenant field order and defaults",
			kind: "Tenant",
			a:    `{"network":{"dnsDomain":"cluster.local","podSubnets":["10.244.0.0/16"]},"talosVersion":"v1.13.0"}`,
			b:    `{"talosVersion":"1.13.0","kubernetesVersion":"v1.35.4"}`,
			want: tenantDefaultSpec,
		},
		{
			name: "node labels order",
			kind: "NodeGroup",
			a:    `{"role":"worker","count":1,"provider":"emu","labels":{"b":"1","a":"2"}}`,
			b:    `{"labels":{"a":"2","b":"1"},"role":"worker","count":1,"provider":"emu"}`,
			want: `{"role":"worker","count":1,"provider":"emu","labels":{"a":"2","b":"1"},"updateStrategy":{"maxParallelism":1}}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kind := domain.MustKind(tc.kind)
			x, causes := kind.NormalizeSpec(json.RawMessage(tc.a))
			require.Empty(t, causes)
			y, causes := kind.NormalizeSpec(json.RawMessage(tc.b))
			require.Empty(t, causes)
			require.Equal(t, string(x), string(y), "equal specs must normalise to identical bytes")
			require.Equal(t, tc.want, string(x))
			for range 5 {
				z, _ := kind.NormalizeSpec(json.RawMessage(tc.a))
				require.Equal(t, string(x), string(z))
			}
		})
	}
}

// The initial status is stored as is; it must already be in the canonical form
// the status normaliser produces, or a controller writing the same status back
// makes a spurious change.
func TestInitialStatusIsCanonical(t *testing.T) {
	for _, k := range domain.Kinds() {
		if k.InitialStatus == nil {
			continue
		}
		t.Run(k.Kind, func(t *testing.T) {
			initial := k.InitialStatus()
			out, causes := k.NormalizeStatus(initial)
			require.Empty(t, causes)
			require.Equal(t, string(out), string(initial))
		})
	}
}

func TestKindRegistry(t *testing.T) {
	tests := []struct {
		kind, plural, subject string
		tenantScoped          bool
		hasInitialStatus      bool
	}{
		{"Tenant", "tenants", "tenant", false, true},
		{"Provider", "providers", "provider", false, false},
		{"NodeGroup", "nodegroups", "nodegroup", true, false},
		{"Machine", "machines", "machine", true, true},
		{"ConfigPatch", "configpatches", "configpatch", true, false},
		{"Apply", "applies", "apply", true, true},
		{"Upgrade", "upgrades", "upgrade", true, true},
		{"EtcdBackup", "etcdbackups", "etcdbackup", true, true},
		{"Restore", "restores", "restore", true, true},
	}
	for _, tc := range tests {
		t.Run(tc.kind, func(t *testing.T) {
			for _, name := range []string{tc.kind, tc.plural, tc.subject} {
				k, ok := domain.LookupKind(name)
				require.True(t, ok, name)
				require.Equal(t, tc.kind, k.Kind)
			}
			k := domain.MustKind(tc.kind)
			require.Equal(t, tc.plural, k.Plural)
			require.Equal(t, tc.subject, k.Subject)
			require.Equal(t, tc.tenantScoped, k.TenantScoped)
			require.NotNil(t, k.NormalizeSpec)
			require.NotNil(t, k.NormalizeStatus)
			require.Equal(t, tc.hasInitialStatus, k.InitialStatus != nil)
		})
	}
	_, ok := domain.LookupKind("widgets")
	require.False(t, ok)
}
