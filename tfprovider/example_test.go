//go:build e2e

package tfprovider

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// TestExampleFleet applies examples/terraform against a real server
// building on the emulator with the real tofu: three tenants from one
// module, each ready before tofu is done (wait_for), their machines read
// back through a data source, and a rollout that moves them all; after it,
// the plan is empty (the rollout owns the Talos version), and a
// talosconfig data source issues a working credential.
func TestExampleFleet(t *testing.T) {
	tofu, mirror := tofutest.Tools(t)
	s := startServer(t, "--with-emulator", "--emulator-kube", "off", "--tofu", tofu, "--provider-mirror", mirror,
		"--apply-debounce", "200ms", "--rollout-interval", "1s")
	w := newWorkspace(t, s)
	root, err := tofutest.RepoRoot()
	require.NoError(t, err)
	require.NoError(t, os.CopyFS(w.dir, os.DirFS(filepath.Join(root, "examples", "terraform"))))
	out, code := w.run("get") // the modules; dev_overrides serves the provider without init
	require.Equal(t, 0, code, out)

	w.apply()
	out, code = w.run("output", "-json", "machines")
	require.Equal(t, 0, code, out)
	var machines map[string]map[string]string
	require.NoError(t, json.Unmarshal([]byte(out), &machines))
	require.Len(t, machines, 3)
	require.Len(t, machines["alpha"], 3, "a control plane and two workers")
	require.Len(t, machines["beta"], 2)
	for tenant, ms := range machines {
		for name, addr := range ms {
			require.NotEmpty(t, addr, "%s/%s has its address when the node groups are Ready", tenant, name)
		}
	}

	// The rollout moves every tenant, one first.
	deadline := time.Now().Add(10 * time.Minute)
	for {
		code, ro := s.api(t, http.MethodGet, "/api/v1/rollouts/talos-v1-13-1", "")
		require.Equal(t, http.StatusOK, code)
		phase, _ := ro["status"].(map[string]any)["phase"].(string)
		if phase == "Succeeded" {
			break
		}
		require.NotContains(t, []string{"Halted", "Aborted"}, phase, "%v", ro["status"])
		require.True(t, time.Now().Before(deadline), "the rollout did not finish: %v", ro["status"])
		time.Sleep(time.Second) // polling the server's progress; the rollout's own waits take seconds
	}
	for _, tenant := range []string{"alpha", "beta", "gamma"} {
		_, tn := s.api(t, http.MethodGet, "/api/v1/tenants/"+tenant, "")
		require.Equal(t, "v1.13.1", tn["spec"].(map[string]any)["talosVersion"], tenant)
	}
	w.planEmpty("after the rollout wrote the new version into every tenant (ignore_changes)")

	// A talosconfig for the caller, from a data source.
	require.NoError(t, os.WriteFile(filepath.Join(w.dir, "creds.tf"), []byte(`
data "rezuscloud_talosconfig" "alpha" {
  tenant = "alpha"
}
data "rezuscloud_tenant" "alpha" {
  tenant = "alpha"
}
output "talosconfig" {
  value     = data.rezuscloud_talosconfig.alpha.content
  sensitive = true
}
output "talos_role" {
  value = data.rezuscloud_talosconfig.alpha.role
}
output "alpha_reconciled" {
  value = data.rezuscloud_tenant.alpha.reconciled
}
`), 0o600))
	w.apply()
	out, _ = w.run("output", "-raw", "talosconfig")
	require.Contains(t, out, "context: alpha")
	require.Contains(t, out, "crt:")
	out, _ = w.run("output", "-raw", "talos_role")
	require.Equal(t, "os:admin", out, "the admin token's Talos role")
	out, _ = w.run("output", "-raw", "alpha_reconciled")
	require.Equal(t, "true", out)

	out, code = w.run("destroy", "-auto-approve", "-input=false")
	require.Equal(t, 0, code, out)
	for _, tenant := range []string{"alpha", "beta", "gamma"} {
		code, _ := s.api(t, http.MethodGet, "/api/v1/tenants/"+tenant, "")
		require.Equal(t, http.StatusNotFound, code, "%s is gone, its machines destroyed first", tenant)
	}
}
