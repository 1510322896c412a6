package domain_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestProviderSpecVersions(t *testing.T) {
	many := make([]string, domain.MaxProviderVersions+1)
	for i := range many {
		many[i] = fmt.Sprintf(`"v1.%d.0"`, i)
	}
	runSpecCases(t, "Provider", []specCase{
		{name: "canonical: a leading v, oldest first, no duplicates",
			spec: `{"type":"emulated","versions":{"kubernetes":["1.36.1","v1.35.4","v1.9.0","1.35.4"],"talos":["v1.13.0"]}}`,
			want: `{"type":"emulated","versions":{"kubernetes":["v1.9.0","v1.35.4","v1.36.1"],"talos":["v1.13.0"]}}`},
		{name: "pre-releases sort before their release",
			spec: `{"type":"oci","versions":{"talos":["v1.14.0","v1.14.0-alpha.1"]}}`,
			want: `{"type":"oci","versions":{"talos":["v1.14.0-alpha.1","v1.14.0"]}}`},
		{name: "empty lists restrict nothing and are dropped", spec: `{"type":"metal","versions":{"kubernetes":[],"talos":[]}}`, want: `{"type":"metal"}`},
		{name: "empty versions dropped", spec: `{"type":"metal","versions":{}}`, want: `{"type":"metal"}`},
		{name: "as many as allowed", spec: `{"type":"metal","versions":{"kubernetes":[` + strings.Join(many[:domain.MaxProviderVersions], ",") + `]}}`},
		{name: "too many", spec: `{"type":"metal","versions":{"kubernetes":[` + strings.Join(many, ",") + `]}}`, fields: []string{"spec.versions.kubernetes"}},
		{name: "not a semantic version, indexed as written",
			spec:   `{"type":"metal","versions":{"kubernetes":["v1.36.1","1.35"],"talos":["latest","v1.13.0"]}}`,
			fields: []string{"spec.versions.kubernetes[1]", "spec.versions.talos[0]"}},
		{name: "a version that is not a string", spec: `{"type":"metal","versions":{"kubernetes":[1.35]}}`, fields: []string{"spec.versions.kubernetes[0]"}},
		{name: "unknown key", spec: `{"type":"metal","versions":{"etcd":["v3.6.16"]}}`, fields: []string{"spec.versions.etcd"}},
	})
}

func TestProviderVersionProblems(t *testing.T) {
	runs := &domain.ProviderVersions{Kubernetes: []string{"v1.35.4", "v1.36.1"}, Talos: []string{"v1.13.0"}}
	tests := []struct {
		name        string
		versions    *domain.ProviderVersions
		kube, talos string
		wantKube    string
		wantTalos   string
	}{
		{name: "listed", versions: runs, kube: "v1.36.1", talos: "v1.13.0"},
		{name: "listed, written without v", versions: runs, kube: "1.35.4", talos: "1.13.0"},
		{name: "unlisted", versions: runs, kube: "v1.35.5", talos: "v1.13.1",
			wantKube:  `provider "emulated" runs Kubernetes v1.35.4, v1.36.1 only, not v1.35.5`,
			wantTalos: `provider "emulated" runs Talos v1.13.0 only, not v1.13.1`},
		{name: "no versions declared", versions: nil, kube: "v9.9.9", talos: "v9.9.9"},
		{name: "only Kubernetes declared", versions: &domain.ProviderVersions{Kubernetes: []string{"v1.35.4"}}, kube: "v1.35.4", talos: "v0.1.0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.wantKube, tc.versions.KubernetesProblem("emulated", tc.kube))
			require.Equal(t, tc.wantTalos, tc.versions.TalosProblem("emulated", tc.talos))
		})
	}
}
