//go:build e2e

package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// moduleProviderBody is a Provider of type module whose files are dir's.
// Its provider reads the emulator API's token from the credentials
// serve --with-emulator stores for its own Provider (EMULATOR_TOKEN).
func moduleProviderBody(t *testing.T, name, dir string, config map[string]any) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	files := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		files[e.Name()] = string(b)
	}
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"name": name},
		"spec": map[string]any{"type": "module", "config": config, "module": map[string]any{"files": files},
			"credentialsRef": map[string]any{"name": "emulated"}}})
	require.NoError(t, err)
	return string(b)
}

// providerCondition is a Provider's condition of type typ ("" status when absent).
func (p *proc) providerCondition(name, typ string) (status, reason, message string, gen, observed float64) {
	_, obj := p.do("GET", "/api/v1/providers/"+name, "")
	meta, _ := obj["metadata"].(map[string]any)
	gen, _ = meta["generation"].(float64)
	st, _ := obj["status"].(map[string]any)
	conds, _ := st["conditions"].([]any)
	for _, c := range conds {
		m := c.(map[string]any)
		if m["type"] == typ {
			observed, _ = m["observedGeneration"].(float64)
			s, _ := m["status"].(string)
			r, _ := m["reason"].(string)
			msg, _ := m["message"].(string)
			return s, r, msg, gen, observed
		}
	}
	return "", "", "", gen, 0
}

// TestModuleProviderBuildsScalesUpgradesAndDestroys: a Provider of type
// module (a user's HCL module on the emulated TF provider, variables and
// outputs per the contract) is validated with tofu, builds a 1+2 cluster
// whose machines answer with the tenant's PKI, scales to 1+3, upgrades
// Talos, and is destroyed with the tenant: the built-in provider's loop,
// with the machines read from the module's output.
func TestModuleProviderBuildsScalesUpgradesAndDestroys(t *testing.T) {
	t.Parallel()
	p := startInfraServer(t, t.TempDir())
	api, _ := p.emulatorAPI()
	code, body := p.do("POST", "/api/v1/providers", moduleProviderBody(t, "mod", filepath.Join("testdata", "module-emulated"), map[string]any{"api": api}))
	require.Equal(t, http.StatusCreated, code, body)
	p.eventually(2*time.Minute, "tofu validate of the module", func() bool {
		s, _, _, gen, observed := p.providerCondition("mod", "Validated")
		return s == "True" && gen == observed
	})

	code, body = p.do("POST", "/api/v1/tenants", `{"metadata":{"name":"mods"},"spec":{}}`)
	require.Equal(t, http.StatusCreated, code, body)
	code, body = p.do("POST", "/api/v1/tenants/mods/nodegroups", `{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"mod"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	code, body = p.do("POST", "/api/v1/tenants/mods/nodegroups", `{"metadata":{"name":"workers"},"spec":{"role":"worker","count":2,"provider":"mod","providerConfig":{"labels":{"pool":"a"}}}}`)
	require.Equal(t, http.StatusCreated, code, body)
	p.settled("mods", 3)

	as := p.applies("mods")
	require.Len(t, as, 1)
	require.Equal(t, "Succeeded", as[0].Status.Phase, as[0].Status.Error)
	logText := string(p.raw("/api/v1/tenants/mods/applies/" + as[0].Metadata.Name + "/log"))
	require.Contains(t, logText, "Apply complete")
	require.NotContains(t, logText, "-----BEGIN", "no key or certificate of the machine configs reaches the log")
	roles := map[string]int{}
	for _, m := range p.machines("mods") {
		require.NotEmpty(t, m.Spec.Address, m.Metadata.Name)
		require.Equal(t, "emulated://mods-"+m.Metadata.Name, m.Spec.ProviderID, "read from the module's machines output")
		roles[m.Spec.Role]++
		p.eventually(30*time.Second, "talos api of "+m.Metadata.Name, func() bool { return talosVersion(t, p, "mods", m.Spec.Address) == nil })
	}
	require.Equal(t, map[string]int{"controlplane": 1, "worker": 2}, roles)
	_, tenant := p.do("GET", "/api/v1/tenants/mods", "")
	endpoint, _ := tenant["status"].(map[string]any)["endpointAddress"].(string)
	require.NotEmpty(t, endpoint, "the module's endpoint output is the tenant's endpoint")
	for _, m := range p.machines("mods") {
		if m.Metadata.Name == "cp-0" {
			require.Equal(t, endpoint, m.Spec.Address, "cp-0 boots on the module's endpoint address")
		}
	}

	// Scale to 1+3: one more machine, nothing rebuilt.
	before := map[string]string{}
	for _, m := range p.machines("mods") {
		before[m.Metadata.Name] = m.Spec.Address
	}
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/mods/nodegroups/workers", `{"spec":{"count":3}}`))
	p.settled("mods", 4)
	for _, m := range p.machines("mods") {
		if a, ok := before[m.Metadata.Name]; ok {
			require.Equal(t, a, m.Spec.Address, "%s kept", m.Metadata.Name)
		}
	}
	require.Len(t, p.emulatorNodes(), 4)

	// Upgrade Talos: every machine of the module's groups, through the Talos API.
	p.eventually(2*time.Minute, "the cluster is healthy", func() bool {
		code, h := p.do("GET", "/api/v1/tenants/mods/health?refresh=true", "")
		return code == http.StatusOK && h["state"] == "Ready"
	})
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/mods", `{"spec":{"talosVersion":"v1.13.1"}}`))
	p.eventually(3*time.Minute, "the upgrade finished", func() bool {
		us := p.upgrades("mods")
		return len(us) == 1 && (us[0].Status.Phase == "Succeeded" || us[0].Status.Phase == "Failed")
	})
	run := p.upgrades("mods")[0]
	require.Equal(t, "Succeeded", run.Status.Phase, run.Status.Reason)
	for _, n := range p.emulatorNodes() {
		require.Equal(t, "v1.13.1", n["version"], n["name"])
	}

	// A change of the module that tofu refuses: Validated=False with the
	// diagnostic, and the next run fails naming the Provider.
	broken := moduleProviderBody(t, "mod", filepath.Join("testdata", "module-emulated"), map[string]any{"api": api})
	var obj map[string]any
	require.NoError(t, json.Unmarshal([]byte(broken), &obj))
	files := obj["spec"].(map[string]any)["module"].(map[string]any)["files"].(map[string]any)
	files["zone.tf"] = "locals {\n  zone = var.zone\n}\n"
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"module": map[string]any{"files": files}}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/providers/mod", string(patch)))
	p.eventually(2*time.Minute, "the broken module is Validated=False", func() bool {
		s, _, msg, gen, observed := p.providerCondition("mod", "Validated")
		return s == "False" && gen == observed && strings.Contains(msg, "zone.tf:2:10: Reference to undeclared input variable")
	})
	p.eventually(2*time.Minute, "a run of the tenant fails naming the Provider", func() bool {
		for _, a := range p.applies("mods") {
			if a.Status.Phase == "Failed" && strings.Contains(a.Status.Error, "provider mod: the module does not validate") {
				return true
			}
		}
		return false
	})
	require.Len(t, p.emulatorNodes(), 4, "nothing was touched")
	delete(files, "zone.tf")
	patch, err = json.Marshal(map[string]any{"spec": map[string]any{"module": map[string]any{"files": map[string]any{"zone.tf": nil}}}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/providers/mod", string(patch)))
	p.eventually(2*time.Minute, "the fixed module is Validated=True", func() bool {
		s, _, _, gen, observed := p.providerCondition("mod", "Validated")
		return s == "True" && gen == observed
	})

	// Deleting the tenant destroys what the module built.
	code, _ = p.do("DELETE", "/api/v1/tenants/mods", "")
	require.Equal(t, http.StatusAccepted, code)
	p.eventually(3*time.Minute, "tenant mods deleted", func() bool {
		code, _ := p.do("GET", "/api/v1/tenants/mods", "")
		return code == http.StatusNotFound
	})
	require.Empty(t, p.emulatorNodes(), "tofu destroy removed the emulated nodes")
}
