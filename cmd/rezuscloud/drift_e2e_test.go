//go:build e2e

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// driftWithin bounds the wait for a drift check's result. It is a liveness
// bound, not a speed claim: a check is a tofu init and plan plus a read of
// every machine, and with the CI's suites beside it on 2 cores (four e2e
// servers, the browser and README suites) one took over a minute.
const driftWithin = 3 * time.Minute

// tenantDrift is a tenant's drift status and Drifted condition as the API
// answers them.
type tenantDrift struct {
	Summary   string     `json:"summary"`
	CheckedAt *time.Time `json:"checkedAt"`
	Add       int        `json:"add"`
	Resources []struct {
		Address, Action string
	} `json:"resources"`
	Machines []struct {
		Name, Reason string
	} `json:"machines"`
	Correction string `json:"correction"`
	Error      string `json:"error"`
	// Condition is the Drifted condition.
	Status, Reason, Message string
}

func (p *proc) drift(tenant string) tenantDrift {
	var t struct {
		Status struct {
			Drift      tenantDrift `json:"drift"`
			Conditions []struct {
				Type, Status, Reason, Message string
			} `json:"conditions"`
		} `json:"status"`
	}
	require.NoError(p.t, json.Unmarshal(p.raw("/api/v1/tenants/"+tenant), &t))
	d := t.Status.Drift
	for _, c := range t.Status.Conditions {
		if c.Type == "Drifted" {
			d.Status, d.Reason, d.Message = c.Status, c.Reason, c.Message
		}
	}
	return d
}

// deleteEmulatedNode deletes a node on the emulator's HTTP API, as someone
// deleting a server in a cloud console would.
func (p *proc) deleteEmulatedNode(node string) {
	p.t.Helper()
	resp, err := http.DefaultClient.Do(p.emulatorRequest(http.MethodDelete, "/v1/nodes/"+node, nil))
	require.NoError(p.t, err)
	resp.Body.Close()
	require.Equal(p.t, http.StatusNoContent, resp.StatusCode)
}

// reconfigureWithTalosctl applies to a machine, with the real talosctl and
// the tenant's talosconfig, its own config plus a node label: a change made
// behind RezusCloud's back through the Talos API.
func reconfigureWithTalosctl(t *testing.T, p *proc, tenant string, m machine) {
	t.Helper()
	dir := t.TempDir()
	tc := filepath.Join(dir, "talosconfig")
	require.NoError(t, os.WriteFile(tc, p.raw("/api/v1/tenants/"+tenant+"/talosconfig"), 0o600))
	patch, err := configpatcher.LoadPatch([]byte("machine:\n  nodeLabels:\n    changed-by: talosctl\n"))
	require.NoError(t, err)
	out, err := configpatcher.Apply(configpatcher.WithBytes(p.raw("/api/v1/tenants/"+tenant+"/machines/"+m.Metadata.Name+"/config?includeSecrets=true")), []configpatcher.Patch{patch})
	require.NoError(t, err)
	b, err := out.Bytes()
	require.NoError(t, err)
	file := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(file, b, 0o600))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	host := m.Spec.Address
	if h, _, ok := strings.Cut(host, ":"); ok {
		host = h
	}
	cmd := exec.CommandContext(ctx, tofutest.Talosctl(t), "--talosconfig", tc, "--endpoints", m.Spec.Address, "--nodes", host,
		"apply-config", "--file", file, "--mode", "auto")
	got, err := cmd.CombinedOutput()
	require.NoError(t, err, string(got))
}

// TestDriftIsFoundAndCorrected: two tenants checked every 10 s, one that
// reports drift and one that corrects it. Behind RezusCloud's back a
// worker's emulated server is deleted and a control plane is re-configured
// with the real talosctl. The reporting tenant says Drifted, "1 to add"
// with the worker's resources and the control plane's config differing,
// and nothing is changed; the correcting one rebuilds the worker with an
// apply of trigger drift and has the declared config applied again.
func TestDriftIsFoundAndCorrected(t *testing.T) {
	t.Parallel()
	p := startInfraServer(t, t.TempDir(), "--resync", "1s", "--drift-min-interval", "10s", "--drift-interval", "0", "--emulator-kube", "off")
	for _, tn := range []struct{ name, action string }{{"seen", "report"}, {"mend", "correct"}} {
		code, body := p.do("POST", "/api/v1/tenants", `{"metadata":{"name":"`+tn.name+`"},"spec":{"driftCheck":{"interval":"10s","action":"`+tn.action+`"}}}`)
		require.Equal(t, http.StatusCreated, code, body)
		for _, g := range []string{
			`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`,
			`{"metadata":{"name":"workers"},"spec":{"role":"worker","count":1,"provider":"emulated"}}`,
		} {
			code, body = p.do("POST", "/api/v1/tenants/"+tn.name+"/nodegroups", g)
			require.Equal(t, http.StatusCreated, code, body)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, tn := range []string{"seen", "mend"} {
				t.Logf("%s: %s", tn, p.raw("/api/v1/tenants/"+tn))
			}
		}
	})
	for _, tn := range []string{"seen", "mend"} {
		p.settled(tn, 2)
		p.waitConfigs(tn, tn+" configured")
		p.eventually(driftWithin, tn+" checked and in sync", func() bool {
			d := p.drift(tn)
			return d.Reason == "InSync" && d.Status == "False"
		})
	}
	byName := func(tenant string) map[string]machine {
		out := map[string]machine{}
		for _, m := range p.machines(tenant) {
			out[m.Metadata.Name] = m
		}
		return out
	}

	// Report: found, listed, left alone.
	seen := byName("seen")
	applies := len(p.applies("seen"))
	p.deleteEmulatedNode(seen["workers-0"].Spec.Hostname)
	reconfigureWithTalosctl(t, p, "seen", seen["cp-0"])
	var d tenantDrift
	p.eventually(driftWithin, "seen drifted: a server to add and cp-0's config", func() bool {
		// A check whose tofu refresh began before the delete, and that read
		// the configs after talosctl's, sees the config only: wait for a
		// check that began after both changes.
		d = p.drift("seen")
		return d.Status == "True" && len(d.Machines) == 1 && d.Add == 1
	})
	require.Equal(t, "Drifted", d.Reason)
	require.Equal(t, "1 to add, 0 to change, 0 to destroy; cp-0 config differs", d.Summary)
	require.Equal(t, 1, d.Add)
	require.Len(t, d.Resources, 1)
	require.Equal(t, "create", d.Resources[0].Action)
	require.Contains(t, d.Resources[0].Address, "workers-0")
	require.Equal(t, "cp-0", d.Machines[0].Name)
	require.Empty(t, d.Correction)
	checked := *d.CheckedAt
	p.eventually(driftWithin, "seen checked again", func() bool { return p.drift("seen").CheckedAt.After(checked) })
	require.Len(t, p.applies("seen"), applies, "report changes nothing: no apply")
	require.NotEqual(t, p.machineConfigs("seen")["cp-0"].hash, p.nodeConfigHashes("seen")["cp-0"], "cp-0 still runs talosctl's config")
	for _, n := range p.emulatorNodes() {
		require.NotEqual(t, seen["workers-0"].Spec.Hostname, n["name"], "the deleted server stays deleted")
	}

	// Correct: rebuilt by an apply of trigger drift, config applied again.
	mend := byName("mend")
	p.deleteEmulatedNode(mend["workers-0"].Spec.Hostname)
	p.eventually(2*time.Minute, "mend's worker rebuilt by a drift apply", func() bool {
		for _, a := range p.applies("mend") {
			if a.Spec.Trigger == "drift" && a.Status.Phase == "Succeeded" {
				d = p.drift("mend")
				return d.Reason == "Applied" && strings.Contains(d.Message, "corrected the drift found (1 to add")
			}
		}
		return false
	})
	p.waitConfigs("mend", "the rebuilt worker configured")
	reconfigureWithTalosctl(t, p, "mend", mend["cp-0"])
	p.eventually(driftWithin, "mend's cp-0 config drift found", func() bool {
		d = p.drift("mend")
		return len(d.Machines) == 1 && d.Machines[0].Name == "cp-0"
	})
	p.waitConfigs("mend", "cp-0 back on its declared config")
	p.eventually(driftWithin, "mend in sync again", func() bool {
		d = p.drift("mend")
		return d.Status == "False" && d.Reason == "InSync"
	})
}

// impactOf sends a write as a dry run and returns its impact by machine,
// checking that nothing was stored.
func (p *proc) impactOf(method, path, body string) (string, map[string]map[string]any) {
	p.t.Helper()
	var before []byte
	if method != http.MethodPost {
		before = p.raw(path)
	}
	req, err := http.NewRequest(method, p.url+path+"?dryRun=All", strings.NewReader(body))
	require.NoError(p.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	if method == http.MethodPatch {
		req.Header.Set("Content-Type", "application/merge-patch+json")
	}
	resp, err := p.client.Do(req)
	require.NoError(p.t, err)
	defer resp.Body.Close()
	var out struct {
		Impact struct {
			Summary  string           `json:"summary"`
			Machines []map[string]any `json:"machines"`
			Plan     *struct {
				Summary   string `json:"summary"`
				Resources []struct {
					Address, Action string
				} `json:"resources"`
			} `json:"plan"`
			PlanError string `json:"planError"`
		} `json:"impact"`
		ImpactError string `json:"impactError"`
	}
	require.NoError(p.t, json.NewDecoder(resp.Body).Decode(&out))
	require.Less(p.t, resp.StatusCode, 300)
	require.Empty(p.t, out.ImpactError)
	if before != nil {
		require.JSONEq(p.t, string(before), string(p.raw(path)), "a dry run stores nothing")
	}
	by := map[string]map[string]any{}
	for _, m := range out.Impact.Machines {
		by[m["machine"].(string)] = m
	}
	require.Empty(p.t, out.Impact.PlanError)
	if pl := out.Impact.Plan; pl != nil {
		// tofu's plan, as a pseudo-machine entry: "plan" → summary and resources.
		res := []string{}
		for _, r := range pl.Resources {
			res = append(res, r.Action+" "+r.Address)
		}
		by["plan"] = map[string]any{"summary": pl.Summary, "resources": res}
	}
	return out.Impact.Summary, by
}

// TestImpactBeforeChange: dry runs of writes to a running cluster (1 control
// plane, 2 workers on emulated nodes) say what each would do, with Talos's
// own answer to a dry-run apply: a node label on the workers changes their
// configs in place and leaves the control plane alone; a new install disk is
// taken in place but used only at the next install; a kernel sysctl
// reboots (drained first); a lower count destroys the highest worker.
func TestImpactBeforeChange(t *testing.T) {
	t.Parallel()
	p := startInfraServer(t, t.TempDir(), "--emulator-kube", "off")
	createCluster(t, p, "imp", 2)
	p.settled("imp", 3)
	p.waitConfigs("imp", "imp configured")

	sum, by := p.impactOf(http.MethodPatch, "/api/v1/tenants/imp/nodegroups/workers", `{"spec":{"labels":{"tier":"web"}}}`)
	require.Equal(t, "0 rebooted (drained first), 2 reconfigured in place, 0 created, 0 destroyed, 1 unchanged", sum)
	for _, w := range []string{"workers-0", "workers-1"} {
		require.Equal(t, "reconfigure", by[w]["action"], w)
		require.Equal(t, true, by[w]["configChanges"], w)
		require.Equal(t, false, by[w]["reboot"], w)
	}
	require.Equal(t, "none", by["cp-0"]["action"])

	_, by = p.impactOf(http.MethodPost, "/api/v1/tenants/imp/configpatches",
		configPatchFor("disk", "machine:\n  install:\n    disk: /dev/vdb\n", "nodeGroup", "workers"))
	require.Equal(t, "reconfigure", by["workers-0"]["action"])
	require.Contains(t, by["workers-0"]["details"], "machine.install changes: Talos uses it at the next install or upgrade")
	require.Equal(t, "none", by["cp-0"]["action"])

	sum, by = p.impactOf(http.MethodPost, "/api/v1/tenants/imp/configpatches",
		configPatchFor("sysctl", "machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n", "nodeGroup", "workers"))
	require.Equal(t, "2 rebooted (drained first), 0 reconfigured in place, 0 created, 0 destroyed, 1 unchanged", sum)
	require.Equal(t, true, by["workers-1"]["drain"])

	sum, by = p.impactOf(http.MethodPatch, "/api/v1/tenants/imp/nodegroups/workers", `{"spec":{"count":1}}`)
	require.Equal(t, "0 rebooted (drained first), 0 reconfigured in place, 0 created, 1 destroyed, 2 unchanged", sum)
	require.Equal(t, "destroy", by["workers-1"]["action"])
	require.Equal(t, "none", by["workers-0"]["action"])
	// tofu's own plan of the change names the resources that go.
	require.Regexp(t, `^0 to add, 0 to change, [1-9]\d* to destroy$`, by["plan"]["summary"])
	for _, r := range by["plan"]["resources"].([]string) {
		require.True(t, strings.HasPrefix(r, "delete "), r)
		require.Contains(t, r, "workers-1", "only workers-1's resources go")
	}
	// The label change plans nothing: tofu leaves configs to the config controller.
	_, by = p.impactOf(http.MethodPatch, "/api/v1/tenants/imp/nodegroups/workers", `{"spec":{"labels":{"tier":"api"}}}`)
	require.Equal(t, "0 to add, 0 to change, 0 to destroy", by["plan"]["summary"])
	require.Len(t, p.machines("imp"), 3, "nothing was destroyed")
}

func configPatchFor(name, patch, kind, target string) string {
	spec, _ := json.Marshal(map[string]any{"metadata": map[string]any{"name": name},
		"spec": map[string]any{"patch": patch, "target": map[string]any{"kind": kind, "name": target}}})
	return string(spec)
}
