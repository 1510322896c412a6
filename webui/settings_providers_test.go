package webui

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestProvidersCreateAndDelete(t *testing.T) {
	s := newUIStack(t)
	b := s.signIn("boss", "admin")
	page := b.get("/ui/settings/providers")
	require.Equal(t, http.StatusOK, page.Code, page.Body)
	require.Contains(t, page.Body, "No providers yet.")
	require.Contains(t, page.Body, `data-testid="provider-create"`)

	for _, tc := range []struct {
		name  string
		form  url.Values
		field string
	}{
		{"config not JSON", url.Values{"metadata.name": {"oci"}, "spec.type": {"oci"}, "spec.config": {`{"region":`}}, "spec.config"},
		{"config not an object", url.Values{"metadata.name": {"oci"}, "spec.type": {"oci"}, "spec.config": {`["eu"]`}}, "spec.config"},
		{"unknown type", url.Values{"metadata.name": {"oci"}, "spec.type": {"aws"}, "spec.config": {`{}`}}, "spec.type"},
		{"bad name", url.Values{"metadata.name": {"OCI"}, "spec.type": {"oci"}}, "metadata.name"},
		{"bad credentials name", url.Values{"metadata.name": {"oci"}, "spec.type": {"oci"}, "spec.credentialsRef": {"Not_A_Name"}}, "spec.credentialsRef"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := b.hx(http.MethodPost, "/ui/settings/providers", tc.form)
			require.GreaterOrEqual(t, p.Code, 400, p.Body)
			require.Less(t, p.Code, 500, p.Body)
			require.Contains(t, p.Body, `data-field-error="`+tc.field+`"`, p.Body)
			require.Contains(t, p.Body, `data-testid="provider-create"`)
		})
	}
	code, _ := s.apiRaw(http.MethodGet, "/providers/oci", nil)
	require.Equal(t, http.StatusNotFound, code)

	p := b.hx(http.MethodPost, "/ui/settings/providers", url.Values{"metadata.name": {"oci"}, "spec.type": {"oci"},
		"spec.config": {`{"region": "eu-frankfurt-1", "compartmentID": "ocid1.compartment.oc1..c"}`}, "spec.credentialsRef": {"oci-prod"}})
	require.Equal(t, http.StatusCreated, p.Code, p.Body)
	require.Contains(t, p.Body, "Provider oci was created")
	require.Contains(t, p.Body, `id="provider-rows" hx-swap-oob="innerHTML"`)
	require.Contains(t, p.Body, `data-provider="oci"`)
	require.Contains(t, p.Body, "oci-prod not stored")
	var prov domain.Provider
	s.apiCall(http.MethodGet, "/providers/oci", nil, &prov)
	require.Equal(t, "oci", prov.Spec.Type)
	require.JSONEq(t, `{"region":"eu-frankfurt-1","compartmentID":"ocid1.compartment.oc1..c"}`, string(prov.Spec.Config))

	list := b.get("/ui/settings/providers")
	require.Contains(t, list.Body, `region=&#34;eu-frankfurt-1&#34;`)
	require.Contains(t, list.Body, `hx-confirm="Delete provider oci?"`)

	del := b.hx(http.MethodDelete, "/ui/settings/providers/oci", nil)
	require.Equal(t, http.StatusOK, del.Code, del.Body)
	require.NotContains(t, del.Body, `data-provider="oci"`)
	code, _ = s.apiRaw(http.MethodGet, "/providers/oci", nil)
	require.Equal(t, http.StatusNotFound, code)
}

func TestProvidersCredentials(t *testing.T) {
	s := newUIStack(t)
	s.create("/providers", map[string]any{"apiVersion": "rezuscloud.io/v1", "kind": "Provider",
		"metadata": map[string]any{"name": "os"}, "spec": map[string]any{"type": "openstack", "config": map[string]any{"authURL": "https://keystone.example.com:5000/v3"}, "credentialsRef": map[string]any{"name": "os-creds"}}})
	b := s.signIn("boss", "admin")
	page := b.get("/ui/settings/providers")
	require.Contains(t, page.Body, "os-creds not stored")

	bad := b.hx(http.MethodPut, "/ui/settings/credentials", url.Values{"metadata.name": {"os-creds"}, "data": {"TF_VAR_x=1\nOS_PASSWORD=s3cret-value"}})
	require.Equal(t, http.StatusUnprocessableEntity, bad.Code, bad.Body)
	require.Contains(t, bad.Body, `data-field-error="data"`)
	require.NotContains(t, bad.Body, "s3cret-value", "values are never sent back")
	notLines := b.hx(http.MethodPut, "/ui/settings/credentials", url.Values{"metadata.name": {"os-creds"}, "data": {"no equals sign"}})
	require.Equal(t, http.StatusUnprocessableEntity, notLines.Code, notLines.Body)
	require.Contains(t, notLines.Body, `data-field-error="data"`)

	ok := b.hx(http.MethodPut, "/ui/settings/credentials", url.Values{"metadata.name": {"os-creds"}, "data": {"OS_USERNAME=admin\n# comment\n\nOS_PASSWORD=s3cret-value"}})
	require.Equal(t, http.StatusOK, ok.Code, ok.Body)
	require.Contains(t, ok.Body, "Credentials os-creds were stored")
	require.Contains(t, ok.Body, "OS_PASSWORD, OS_USERNAME")
	require.NotContains(t, ok.Body, "s3cret-value")

	page = b.get("/ui/settings/providers")
	require.Contains(t, page.Body, "OS_PASSWORD, OS_USERNAME")
	require.NotContains(t, page.Body, "s3cret-value")
}

func TestParseEnvLines(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]string
		err  bool
	}{
		{"", map[string]string{}, false},
		{"A=1\r\nB = two=2\n", map[string]string{"A": "1", "B": " two=2"}, false},
		{"# only a comment\n\n", map[string]string{}, false},
		{"=1", nil, true},
		{"A", nil, true},
	} {
		got, err := parseEnvLines(tc.in)
		if tc.err {
			require.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}

// TestProviderSummaryShowsVersions: the versions a Provider runs are in
// its one-line summary; none are shown when it declares none.
func TestProviderSummaryShowsVersions(t *testing.T) {
	tests := []struct {
		name string
		spec domain.ProviderSpec
		want string
	}{
		{"none", domain.ProviderSpec{Type: domain.ProviderMetal}, "no settings"},
		{"Kubernetes", domain.ProviderSpec{Type: domain.ProviderEmulated, CredentialsRef: &domain.SecretRef{Name: "emulated"},
			Versions: &domain.ProviderVersions{Kubernetes: []string{"v1.35.4", "v1.36.1"}}},
			"credentials: emulated, Kubernetes v1.35.4 or v1.36.1 only"},
		{"both", domain.ProviderSpec{Type: domain.ProviderMetal, Versions: &domain.ProviderVersions{Kubernetes: []string{"v1.36.1"}, Talos: []string{"v1.13.0"}}},
			"Kubernetes v1.36.1 only, Talos v1.13.0 only"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, providerSummary(domain.Provider{Spec: tc.spec}))
		})
	}
}
