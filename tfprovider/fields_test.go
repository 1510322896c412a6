package tfprovider

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

func decode(t *testing.T, s string) any {
	t.Helper()
	var v any
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	require.NoError(t, d.Decode(&v))
	return v
}

// TestJSONCovers: the server's sub-object equals the configuration's when
// it holds everything the configuration says; what it adds is its defaults.
func TestJSONCovers(t *testing.T) {
	for _, tc := range []struct {
		name, have, want string
		covers           bool
	}{
		{"equal", `{"a":1}`, `{"a":1}`, true},
		{"a default added", `{"a":1,"tz":"UTC"}`, `{"a":1}`, true},
		{"a default added inside a list", `[{"a":1,"tz":"UTC"}]`, `[{"a":1}]`, true},
		{"a value changed", `{"a":2}`, `{"a":1}`, false},
		{"a key gone", `{}`, `{"a":1}`, false},
		{"a list longer", `[1,2]`, `[1]`, false},
		{"numbers by value", `{"keep":7}`, `{"keep":7}`, true},
		{"a string is not a number", `{"keep":"7"}`, `{"keep":7}`, false},
		{"null wants null", `{"a":null}`, `{"a":null}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.covers, jsonCovers(decode(t, tc.have), decode(t, tc.want)))
		})
	}
}

// TestFromAPIKeepsEqualValues: a value equal in the field's sense to the
// plan's or state's keeps it, so the next plan is empty.
func TestFromAPIKeepsEqualValues(t *testing.T) {
	version := field{attr: "talos_version", canon: canonVersion}
	require.Equal(t, types.StringValue("1.13.0"), version.fromAPI("v1.13.0", true, types.StringValue("1.13.0")))
	require.Equal(t, types.StringValue("v1.13.1"), version.fromAPI("v1.13.1", true, types.StringValue("1.13.0")), "a change is a change")
	require.Equal(t, types.StringValue("v1.13.0"), version.fromAPI("v1.13.0", true, types.StringUnknown()))

	expires := field{attr: "expires_at", canon: canonTime}
	require.Equal(t, types.StringValue("2027-01-01T01:00:00+01:00"), expires.fromAPI("2027-01-01T00:00:00Z", true, types.StringValue("2027-01-01T01:00:00+01:00")))

	js := field{attr: "maintenance", kind: fJSON}
	cfg := types.StringValue(`{"windows":[{"start":"02:00"}]}`)
	require.Equal(t, cfg, js.fromAPI(decode(t, `{"windows":[{"start":"02:00","timeZone":"UTC"}]}`), true, cfg))
	require.Equal(t, types.StringValue(`{"windows":[{"start":"03:00"}]}`), js.fromAPI(decode(t, `{"windows":[{"start":"03:00"}]}`), true, cfg))

	labels := field{attr: "labels", kind: fStringMap}
	require.Equal(t, types.MapNull(types.StringType), labels.fromAPI(nil, false, types.MapNull(types.StringType)), "none stays null")
	empty := types.MapValueMust(types.StringType, map[string]attr.Value{})
	require.Equal(t, empty, labels.fromAPI(nil, false, empty), "an empty map stays empty")

	password := field{attr: "password", writeOnly: true}
	require.Equal(t, types.StringValue("secret"), password.fromAPI(nil, false, types.StringValue("secret")), "never read back")
}

// TestAPIFieldsLandOnAttributes: a Status cause's field path finds the
// attribute it falls in.
func TestAPIFieldsLandOnAttributes(t *testing.T) {
	r := &objectResource{kind: tenantKind}
	for apiPath, attr := range map[string]string{
		"spec.network.podSubnets[1]":        "pod_subnets",
		"spec.talosVersion":                 "talos_version",
		"metadata.labels.env":               "labels",
		"spec.maintenance.windows[0].start": "maintenance",
	} {
		f, ok := r.fieldOf(apiPath)
		require.True(t, ok, apiPath)
		require.Equal(t, attr, f.attr, apiPath)
	}
	_, ok := r.fieldOf("spec.unknown")
	require.False(t, ok)
	f, ok := (&objectResource{kind: nodeGroupKind}).fieldOf("spec.count")
	require.True(t, ok)
	require.Equal(t, "machines", f.attr, "count is a reserved word")
}

// TestToolsPinTheVersion: hack/tools.sh lays the provider out in the mirror
// under this version.
func TestToolsPinTheVersion(t *testing.T) {
	root, err := tofutest.RepoRoot()
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(root, "hack", "tools.sh"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^REZUSCLOUD_PROVIDER_VERSION=(\S+)`).FindSubmatch(b)
	require.NotNil(t, m, "hack/tools.sh sets REZUSCLOUD_PROVIDER_VERSION")
	require.Equal(t, Version, string(m[1]))
}

// TestKubeconfigWithClientCertificate: the server's kubeconfig (rezusctl's
// exec plugin as its user) becomes one that holds the credential.
func TestKubeconfigWithClientCertificate(t *testing.T) {
	in := []byte(`apiVersion: v1
kind: Config
clusters:
- name: acme
  cluster: {server: "https://10.0.0.1:6443", certificate-authority-data: Q0E=}
users:
- name: alice@acme
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1, command: rezusctl, args: [credential, kubernetes, --tenant, acme]}
contexts:
- name: acme
  context: {cluster: acme, user: alice@acme}
current-context: acme
`)
	out, err := withClientCertificate(in, []byte("-----BEGIN CERTIFICATE-----\n"), []byte("-----BEGIN EC PRIVATE KEY-----\n"))
	require.NoError(t, err)
	require.NotContains(t, out, "exec:")
	require.Contains(t, out, "client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==")
	require.Contains(t, out, "client-key-data: LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0tCg==")
	require.Contains(t, out, "server: https://10.0.0.1:6443")
	require.Contains(t, out, "current-context: acme")

	_, err = withClientCertificate([]byte("users: []\n"), nil, nil)
	require.ErrorContains(t, err, "no user")
}

// TestLoadContext: a rezusctl context by name, from $REZUSCONFIG or the
// default path under HOME.
func TestLoadContext(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config")
	require.NoError(t, os.WriteFile(cfg, []byte(`current-context: lab
contexts:
- name: lab
  server: https://10.0.0.5:8443
  token: rzt_ci_secret
  certificateAuthority: /etc/rezus/ca.pem
- name: dev
  server: http://127.0.0.1:8080
  insecureSkipTLSVerify: true
`), 0o600))
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	c, err := loadContext(env(map[string]string{"REZUSCONFIG": cfg}), "lab")
	require.NoError(t, err)
	require.Equal(t, rezusctlContext{Name: "lab", Server: "https://10.0.0.5:8443", Token: "rzt_ci_secret", CertificateAuthority: "/etc/rezus/ca.pem"}, *c)

	require.NoError(t, os.MkdirAll(filepath.Join(dir, ".config", "rezus"), 0o700))
	require.NoError(t, os.Rename(cfg, filepath.Join(dir, ".config", "rezus", "config")))
	c, err = loadContext(env(map[string]string{"HOME": dir}), "dev")
	require.NoError(t, err)
	require.True(t, c.InsecureSkipTLSVerify)

	_, err = loadContext(env(map[string]string{"HOME": dir}), "prod")
	require.ErrorContains(t, err, `no context "prod"`)
	_, err = loadContext(env(map[string]string{}), "lab")
	require.ErrorContains(t, err, "REZUSCONFIG or HOME")
}
