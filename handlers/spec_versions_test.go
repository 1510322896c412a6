package handlers_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// versionStack is a tenant "acme" declared at Talos v1.12.0 whose configs
// carry Kubernetes k8s (status.kubernetesVersion, as the first apply sets
// it; the spec declares it too), with groups cp and workers (neither
// overrides the Talos version) and machines cp-1 and w-1 observed on v1.12.0.
func versionStack(t *testing.T, k8s string) *stack {
	s := upgradeStack(t)
	r := s.do(http.MethodPut, "/api/v1/tenants/acme/status", map[string]any{
		"metadata": map[string]any{"resourceVersion": s.getObject(t, "/api/v1/tenants/acme").Metadata.ResourceVersion},
		"status":   map[string]any{"kubernetesVersion": k8s}})
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	r = s.do(http.MethodPatch, "/api/v1/tenants/acme", `{"spec":{"kubernetesVersion":"`+k8s+`"}}`)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	return s
}

// TestSpecVersionChangesARunWouldRefuse: a tenant or node group write whose
// talosVersion or kubernetesVersion the run it starts would refuse answers
// 422 with the cause on the field, naming the machines and the rule; the
// versions a run takes are stored.
func TestSpecVersionChangesARunWouldRefuse(t *testing.T) {
	s := versionStack(t, "v1.35.0")
	refused := []struct {
		name, path, patch string
		fields            []string
		msgs              []string
	}{
		{"tenant Talos minor downgrade", "/api/v1/tenants/acme", `{"spec":{"talosVersion":"v1.11.9"}}`,
			[]string{"spec.talosVersion"}, []string{"machines cp-1, w-1 run v1.12.0: v1.12.0 to v1.11.9 is a downgrade across a minor version"}},
		{"tenant Talos minor skip", "/api/v1/tenants/acme", `{"spec":{"talosVersion":"v1.14.0"}}`,
			[]string{"spec.talosVersion"}, []string{"v1.12.0 to v1.14.0 skips a minor version"}},
		{"Kubernetes minor skip", "/api/v1/tenants/acme", `{"spec":{"kubernetesVersion":"v1.37.0"}}`,
			[]string{"spec.kubernetesVersion"}, []string{"the machines' configs carry Kubernetes v1.35.0: Kubernetes v1.35.0 to v1.37.0 skips a minor version; upgrade to v1.36.x first"}},
		{"Kubernetes downgrade", "/api/v1/tenants/acme", `{"spec":{"kubernetesVersion":"v1.34.9"}}`,
			[]string{"spec.kubernetesVersion"}, []string{"v1.35.0 to v1.34.9 is a downgrade"}},
		{"Kubernetes the machines' Talos does not run", "/api/v1/tenants/acme", `{"spec":{"kubernetesVersion":"v1.36.0"}}`,
			[]string{"spec.kubernetesVersion"}, []string{"machines cp-1, w-1 run Talos v1.12.0: version of Kubernetes 1.36.0 is too new to be used with Talos 1.12.0"}},
		{"both refused, both reported", "/api/v1/tenants/acme", `{"spec":{"talosVersion":"v1.14.0","kubernetesVersion":"v1.33.0"}}`,
			[]string{"spec.talosVersion", "spec.kubernetesVersion"}, []string{"skips a minor version", "is a downgrade"}},
		{"node group Talos minor skip", "/api/v1/tenants/acme/nodegroups/workers", `{"spec":{"talosVersion":"v1.14.1"}}`,
			[]string{"spec.talosVersion"}, []string{"machines w-1 run v1.12.0: v1.12.0 to v1.14.1 skips a minor version"}},
		{"node group Talos minor downgrade", "/api/v1/tenants/acme/nodegroups/cp", `{"spec":{"talosVersion":"v1.11.0"}}`,
			[]string{"spec.talosVersion"}, []string{"machines cp-1 run v1.12.0: v1.12.0 to v1.11.0 is a downgrade"}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(http.MethodPatch, tc.path, tc.patch)
			require.Equal(t, http.StatusUnprocessableEntity, r.Code, string(r.Body))
			st := r.status(t)
			require.Equal(t, domain.ReasonInvalid, st.Reason)
			require.Equal(t, tc.fields, causeFieldsOf(st))
			for _, m := range tc.msgs {
				require.Contains(t, st.Message, m)
			}
		})
	}
	// A Talos version that does not run the Kubernetes version the configs
	// carry: Talos 1.13 runs Kubernetes 1.31 at the oldest.
	old := versionStack(t, "v1.30.5")
	r := old.do(http.MethodPut, "/api/v1/tenants/acme", map[string]any{"metadata": map[string]any{"name": "acme", "resourceVersion": old.getObject(t, "/api/v1/tenants/acme").Metadata.ResourceVersion},
		"spec": map[string]any{"talosVersion": "v1.13.0", "kubernetesVersion": "v1.30.5"}})
	require.Equal(t, http.StatusUnprocessableEntity, r.Code, string(r.Body))
	require.Contains(t, r.status(t).Message, "machines cp-1, w-1 run v1.12.0: version of Kubernetes 1.30.5 is too old to be used with Talos 1.13.0")

	// What a run takes is stored: a Talos and a Kubernetes change together
	// (the Talos run goes first, so Kubernetes is checked against its target).
	for _, ok := range []struct{ path, patch string }{
		{"/api/v1/tenants/acme", `{"spec":{"talosVersion":"v1.13.0","kubernetesVersion":"v1.36.0"}}`},
		{"/api/v1/tenants/acme/nodegroups/workers", `{"spec":{"talosVersion":"v1.12.3"}}`},
		{"/api/v1/tenants/acme", `{"metadata":{"labels":{"tier":"gold"}}}`},
	} {
		r := s.do(http.MethodPatch, ok.path, ok.patch)
		require.Equal(t, http.StatusOK, r.Code, "%s %s: %s", ok.path, ok.patch, r.Body)
	}

	// A tenant without machines takes any valid version.
	s.mustCreate("/api/v1/tenants", map[string]any{"metadata": map[string]any{"name": "empty"}, "spec": map[string]any{"talosVersion": "v1.12.0"}})
	r = s.do(http.MethodPatch, "/api/v1/tenants/empty", `{"spec":{"talosVersion":"v1.10.0","kubernetesVersion":"v1.40.0"}}`)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
}

func (s *stack) getObject(t *testing.T, path string) *domain.Object {
	t.Helper()
	r := s.do(http.MethodGet, path, nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	return r.object(t)
}
