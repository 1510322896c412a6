package handlers_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestVersionsAProviderDoesNotRunAreRefused: a Provider declaring
// spec.versions has a tenant, node group or Upgrade write that would take
// its machines to another version refused with 422, the cause on the
// field, naming the provider and the versions it runs; listed versions,
// Providers without versions, and writes that change no version pass. No
// machine exists: the check does not wait for one.
func TestVersionsAProviderDoesNotRunAreRefused(t *testing.T) {
	s := newStack(t)
	s.mustCreate("/api/v1/providers", `{"metadata":{"name":"emu"},"spec":{"type":"emulated","config":{"endpoint":"http://127.0.0.1:8089"},
		"versions":{"kubernetes":["1.36.1","v1.35.4"],"talos":["v1.13.0","v1.12.0"]}}}`)
	s.mustCreate("/api/v1/providers", `{"metadata":{"name":"any"},"spec":{"type":"emulated","config":{"endpoint":"http://127.0.0.1:8089"}}}`)
	s.mustCreate("/api/v1/tenants", map[string]any{"metadata": map[string]any{"name": "acme"},
		"spec": map[string]any{"talosVersion": "v1.13.0", "kubernetesVersion": "v1.35.4"}})
	s.mustCreate("/api/v1/tenants/acme/nodegroups", map[string]any{"metadata": map[string]any{"name": "cp"},
		"spec": map[string]any{"role": "controlplane", "count": 1, "provider": "emu"}})
	s.mustCreate("/api/v1/tenants/acme/nodegroups", map[string]any{"metadata": map[string]any{"name": "workers"},
		"spec": map[string]any{"role": "worker", "count": 1, "provider": "any"}})
	s.mustCreate("/api/v1/tenants/acme/nodegroups", map[string]any{"metadata": map[string]any{"name": "pinned"},
		"spec": map[string]any{"role": "worker", "count": 1, "provider": "emu", "talosVersion": "v1.12.0"}})
	// A tenant at a Kubernetes version emu does not run, built on "any".
	s.mustCreate("/api/v1/tenants", map[string]any{"metadata": map[string]any{"name": "old"},
		"spec": map[string]any{"kubernetesVersion": "v1.34.2"}})
	s.mustCreate("/api/v1/tenants/old/nodegroups", map[string]any{"metadata": map[string]any{"name": "cp"},
		"spec": map[string]any{"role": "controlplane", "count": 1, "provider": "any"}})

	acmeVersion := s.getObject(t, "/api/v1/tenants/acme").Metadata.ResourceVersion

	refused := []struct {
		name, method, path string
		body               any
		fields             []string
		msgs               []string
	}{
		{"tenant Kubernetes", http.MethodPatch, "/api/v1/tenants/acme", `{"spec":{"kubernetesVersion":"v1.35.5"}}`,
			[]string{"spec.kubernetesVersion"}, []string{`node groups cp, pinned: provider "emu" runs Kubernetes v1.35.4, v1.36.1 only, not v1.35.5`}},
		{"tenant Talos, only the groups that take the tenant's", http.MethodPatch, "/api/v1/tenants/acme", `{"spec":{"talosVersion":"v1.13.1"}}`,
			[]string{"spec.talosVersion"}, []string{`node group cp: provider "emu" runs Talos v1.12.0, v1.13.0 only, not v1.13.1`}},
		{"tenant PUT with both", http.MethodPut, "/api/v1/tenants/acme", map[string]any{"metadata": map[string]any{"name": "acme", "resourceVersion": acmeVersion},
			"spec": map[string]any{"talosVersion": "v1.13.1", "kubernetesVersion": "v1.36.0"}},
			[]string{"spec.kubernetesVersion", "spec.talosVersion"}, []string{"not v1.36.0", "not v1.13.1"}},
		{"node group with its own Talos", http.MethodPost, "/api/v1/tenants/acme/nodegroups", map[string]any{"metadata": map[string]any{"name": "gpu"},
			"spec": map[string]any{"role": "worker", "count": 1, "provider": "emu", "talosVersion": "v1.12.5"}},
			[]string{"spec.talosVersion"}, []string{`provider "emu" runs Talos v1.12.0, v1.13.0 only, not v1.12.5`}},
		{"node group changing its Talos", http.MethodPatch, "/api/v1/tenants/acme/nodegroups/pinned", `{"spec":{"talosVersion":"v1.12.1"}}`,
			[]string{"spec.talosVersion"}, []string{"not v1.12.1"}},
		{"node group on a Provider that does not run the tenant's Kubernetes", http.MethodPost, "/api/v1/tenants/old/nodegroups",
			map[string]any{"metadata": map[string]any{"name": "workers"}, "spec": map[string]any{"role": "worker", "count": 1, "provider": "emu"}},
			[]string{"spec.provider"}, []string{`tenant old runs Kubernetes v1.34.2: provider "emu" runs Kubernetes v1.35.4, v1.36.1 only, not v1.34.2`}},
		{"node group moving to such a Provider", http.MethodPatch, "/api/v1/tenants/old/nodegroups/cp", `{"spec":{"provider":"emu"}}`,
			[]string{"spec.provider"}, []string{"tenant old runs Kubernetes v1.34.2"}},
		{"Kubernetes upgrade", http.MethodPost, "/api/v1/tenants/acme/upgrades", upgradeBody("k8s", map[string]any{"kubernetesVersion": "v1.35.5"}),
			[]string{"spec.kubernetesVersion"}, []string{`node groups cp, pinned: provider "emu" runs Kubernetes v1.35.4, v1.36.1 only, not v1.35.5`}},
		{"Talos upgrade of the groups it covers", http.MethodPost, "/api/v1/tenants/acme/upgrades",
			upgradeBody("talos", map[string]any{"talosVersion": "v1.13.1", "nodeGroups": []string{"pinned", "workers"}}),
			[]string{"spec.talosVersion"}, []string{`node group pinned: provider "emu" runs Talos v1.12.0, v1.13.0 only, not v1.13.1`}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(tc.method, tc.path, tc.body)
			require.Equal(t, http.StatusUnprocessableEntity, r.Code, string(r.Body))
			st := r.status(t)
			require.Equal(t, domain.ReasonInvalid, st.Reason)
			require.ElementsMatch(t, tc.fields, causeFieldsOf(st))
			for _, c := range st.Details.Causes {
				require.Equal(t, domain.CauseNotSupported, c.Type, c.Field)
			}
			for _, m := range tc.msgs {
				require.Contains(t, st.Message, m)
			}
		})
	}

	for _, ok := range []struct{ method, path string }{
		// Writes that change no version, on a tenant whose Kubernetes emu
		// does not run and a group on emu.
		{http.MethodPatch, "/api/v1/tenants/old"},
		{http.MethodPatch, "/api/v1/tenants/acme/nodegroups/pinned"},
	} {
		r := s.do(ok.method, ok.path, `{"metadata":{"labels":{"tier":"gold"}}}`)
		require.Equal(t, http.StatusOK, r.Code, "%s: %s", ok.path, r.Body)
	}
	for _, ok := range []struct{ path, patch string }{
		// Listed versions, and a Talos version only a group on "any" takes.
		{"/api/v1/tenants/acme", `{"spec":{"kubernetesVersion":"1.36.1"}}`},
		{"/api/v1/tenants/acme/nodegroups/workers", `{"spec":{"talosVersion":"v1.13.7"}}`},
		{"/api/v1/tenants/acme/nodegroups/pinned", `{"spec":{"talosVersion":"v1.13.0"}}`},
		{"/api/v1/tenants/old", `{"spec":{"kubernetesVersion":"v1.35.1"}}`},
	} {
		r := s.do(http.MethodPatch, ok.path, ok.patch)
		require.Equal(t, http.StatusOK, r.Code, "%s %s: %s", ok.path, ok.patch, r.Body)
	}
	s.mustCreate("/api/v1/tenants/acme/upgrades", upgradeBody("talos", map[string]any{"talosVersion": "v1.13.1", "nodeGroups": []string{"workers"}}))
	s.mustCreate("/api/v1/tenants/acme/nodegroups", map[string]any{"metadata": map[string]any{"name": "gpu"},
		"spec": map[string]any{"role": "worker", "count": 1, "provider": "emu"}})
}
