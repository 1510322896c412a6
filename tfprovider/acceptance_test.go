//go:build e2e

package tfprovider

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fleetConfig declares one of everything: v 1 the first values, v 2 a
// change of every resource; extra is more of the tenant's attributes.
func fleetConfig(v int, extra string) string {
	pick := func(a, b string) string {
		if v == 1 {
			return a
		}
		return b
	}
	return `
terraform {
  required_providers {
    rezuscloud = { source = "rezuscloud/rezuscloud" }
  }
}

resource "rezuscloud_provider" "emu" {
  name   = "emu"
  type   = "emulated"
  config = jsonencode({ endpoint = "` + pick("http://127.0.0.1:8089", "http://127.0.0.1:8090") + `" })
}

resource "rezuscloud_tenant" "acme" {
  name          = "acme"
  labels        = { env = "` + pick("prod", "production") + `" }
  talos_version = "1.13.0"
  maintenance   = jsonencode({ windows = [{ days = ["Sat"], start = "` + pick("02:00", "03:00") + `", duration = "4h" }] })
  ` + extra + `
}

resource "rezuscloud_node_group" "cp" {
  tenant         = rezuscloud_tenant.acme.name
  name           = "cp"
  role           = "controlplane"
  machines       = 1
  infrastructure = rezuscloud_provider.emu.name
  drain_timeout  = "` + pick("5m", "10m") + `"
}

resource "rezuscloud_node_group" "workers" {
  tenant         = rezuscloud_tenant.acme.name
  name           = "workers"
  role           = "worker"
  machines       = ` + pick("2", "3") + `
  infrastructure = rezuscloud_provider.emu.name
  node_labels    = { pool = "general" }
  taints         = jsonencode([{ key = "dedicated", value = "general", effect = "NoSchedule" }])
}

resource "rezuscloud_config_patch" "ntp" {
  tenant      = rezuscloud_tenant.acme.name
  name        = "ntp"
  target_kind = "all"
  patch       = "machine:\n  time:\n    servers: [` + pick("time.example.com", "ntp.example.com") + `]\n"
}

resource "rezuscloud_user" "ops" {
  name     = "ops"
  role     = "` + pick("view", "edit") + `"
  password = "a-long-password-for-ops"
}

resource "rezuscloud_group_binding" "sre" {
  name   = "sre"
  groups = ["sre"` + pick("", `, "oncall"`) + `]
  role   = "edit"
}

resource "rezuscloud_api_token" "ci" {
  name        = "ci"
  description = "` + pick("the CI's token", "the CI's token, renamed") + `"
}

resource "rezuscloud_rollout" "upgrade" {
  name            = "talos-1-13-1"
  change          = jsonencode({ talosVersion = "v1.13.1" })
  tenant_selector = "env=staging"
  soak            = "` + pick("10m", "20m") + `"
  paused          = true
}

output "token" {
  value     = rezuscloud_api_token.ci.token
  sensitive = true
}
`
}

// TestProviderAgainstTheRealServer: every resource is created, read back
// with an empty second plan, updated, imported and destroyed through the
// real tofu and the real server; a change made outside tofu shows as
// drift; the API's error lands on the attribute at fault.
func TestProviderAgainstTheRealServer(t *testing.T) {
	s := startServer(t)
	w := newWorkspace(t, s)

	// Create.
	w.write(fleetConfig(1, ""))
	w.apply()
	w.planEmpty("after the create (server defaults, a version without its v, JSON with defaults)")
	code, ng := s.api(t, http.MethodGet, "/api/v1/tenants/acme/nodegroups/workers", "")
	require.Equal(t, http.StatusOK, code)
	require.EqualValues(t, 2, ng["spec"].(map[string]any)["count"])
	code, tn := s.api(t, http.MethodGet, "/api/v1/tenants/acme", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "v1.13.0", tn["spec"].(map[string]any)["talosVersion"], "the server's form")
	token, _ := w.run("output", "-raw", "token")
	require.True(t, strings.HasPrefix(token, "rzt_ci_"), "the token's secret from its create: %q", token)

	// Update: every resource changes in place, the token keeps its secret.
	w.write(fleetConfig(2, `dns_domain = "acme.internal"`))
	out := w.apply()
	require.Contains(t, out, "0 added, 9 changed, 0 destroyed", "every resource changed in place")
	w.planEmpty("after the update")
	_, ng = s.api(t, http.MethodGet, "/api/v1/tenants/acme/nodegroups/workers", "")
	require.EqualValues(t, 3, ng["spec"].(map[string]any)["count"])
	_, pr := s.api(t, http.MethodGet, "/api/v1/providers/emu", "")
	require.Equal(t, "http://127.0.0.1:8090", pr["spec"].(map[string]any)["config"].(map[string]any)["endpoint"])
	again, _ := w.run("output", "-raw", "token")
	require.Equal(t, token, again, "a changed token keeps its secret")

	// A change made with rezusctl is drift: the plan puts it back.
	cli := filepath.Join(t.TempDir(), "rezusconfig")
	rezusctl(t, cli, "config", "set-context", "tf", "--server", s.url, "--token", s.token, "--current")
	ngFile := filepath.Join(t.TempDir(), "workers.yaml")
	require.NoError(t, os.WriteFile(ngFile, []byte(`apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata: {name: workers, tenant: acme}
spec:
  role: worker
  count: 5
  provider: emu
  labels: {pool: general}
  taints: [{key: dedicated, value: general, effect: NoSchedule}]
`), 0o600))
	rezusctl(t, cli, "apply", "-f", ngFile)
	plan := w.planChanges("a count changed with rezusctl")
	require.Contains(t, plan, "machines")
	require.Contains(t, plan, "5 -> 3")
	w.apply()
	w.planEmpty("after putting the drift back")

	// Import: a second workspace, configured by rezusctl's context,
	// adopts every object and plans nothing.
	imp := newWorkspace(t, s)
	imp.env = append(withoutProviderEnv(imp.env), "REZUSCONFIG="+cli)
	imports := `
import {
  to = rezuscloud_provider.emu
  id = "emu"
}
import {
  to = rezuscloud_tenant.acme
  id = "acme"
}
import {
  to = rezuscloud_node_group.cp
  id = "acme/cp"
}
import {
  to = rezuscloud_node_group.workers
  id = "acme/workers"
}
import {
  to = rezuscloud_config_patch.ntp
  id = "acme/ntp"
}
import {
  to = rezuscloud_group_binding.sre
  id = "sre"
}
import {
  to = rezuscloud_rollout.upgrade
  id = "talos-1-13-1"
}
import {
  to = rezuscloud_user.ops
  id = "ops"
}
import {
  to = rezuscloud_api_token.ci
  id = "ci"
}
`
	// In the server's forms (a version with its v, the window's default
	// time zone): a configuration in other forms plans one in-place
	// update after an import, which changes nothing on the server.
	cfg := strings.NewReplacer(`talos_version = "1.13.0"`, `talos_version = "v1.13.0"`,
		`duration = "4h" }`, `duration = "4h", timeZone = "UTC" }`).Replace(fleetConfig(2, `dns_domain = "acme.internal"`))
	// The user's password is never read back: an adopting configuration
	// leaves it out (or the next apply sets it); the token's secret
	// stays with the workspace that created it.
	cfg = strings.Replace(cfg, `  password = "a-long-password-for-ops"`+"\n", "", 1)
	cfg = cfg[:strings.Index(cfg, `output "token"`)]
	imp.write(cfg + imports + `
provider "rezuscloud" {
  context = "tf"
}
`)
	out, code = imp.run("apply", "-auto-approve", "-input=false")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "9 imported, 0 added, 0 changed, 0 destroyed", "import alone changes nothing")
	imp.planEmpty("after the import")
	out, code = imp.run("import", "rezuscloud_node_group.cp", "acme")
	require.NotEqual(t, 0, code)
	require.Contains(t, out, "want TENANT/NAME")

	// The API's refusal lands on the attribute at fault.
	w.write(fleetConfig(2, `dns_domain = "acme.internal"`) + `
resource "rezuscloud_node_group" "bad" {
  tenant         = rezuscloud_tenant.acme.name
  name           = "bad"
  role           = "chef"
  machines       = 1
  infrastructure = rezuscloud_provider.emu.name
}
`)
	out, code = w.run("apply", "-auto-approve", "-input=false")
	require.NotEqual(t, 0, code)
	require.Contains(t, out, `role           = "chef"`, "the diagnostic points at the attribute:\n%s", out)
	require.Contains(t, out, "spec.role")

	// Destroy: every object gone from the server (the tenant after its
	// finalizers).
	w.write(fleetConfig(2, `dns_domain = "acme.internal"`))
	out, code = w.run("destroy", "-auto-approve", "-input=false")
	require.Equal(t, 0, code, out)
	for _, p := range []string{"/api/v1/tenants/acme", "/api/v1/providers/emu", "/api/v1/users/ops", "/api/v1/groupbindings/sre",
		"/api/v1/apitokens/ci", "/api/v1/rollouts/talos-1-13-1"} {
		code, _ := s.api(t, http.MethodGet, p, "")
		require.Equal(t, http.StatusNotFound, code, p)
	}
}

// withoutProviderEnv drops the provider's settings from env.
func withoutProviderEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, EnvEndpoint+"=") && !strings.HasPrefix(kv, EnvToken+"=") {
			out = append(out, kv)
		}
	}
	return out
}
