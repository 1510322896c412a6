//go:build e2e

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// machineConfig is what a Machine says about its config.
type machineConfig struct {
	hash     string // rezuscloud.io/config-hash
	upToDate bool
	// status, reason and message of its ConfigApplied condition.
	status, reason, message string
}

func (p *proc) machineConfigs(tenant string) map[string]machineConfig {
	var l struct {
		Items []struct {
			Metadata struct {
				Name        string            `json:"name"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Status struct {
				ConfigUpToDate *bool `json:"configUpToDate"`
				Conditions     []struct {
					Type, Status, Reason, Message string
				} `json:"conditions"`
			} `json:"status"`
		}
	}
	require.NoError(p.t, json.Unmarshal(p.raw("/api/v1/tenants/"+tenant+"/machines"), &l))
	out := map[string]machineConfig{}
	for _, m := range l.Items {
		require.NotNil(p.t, m.Status.ConfigUpToDate, "%s: status.configUpToDate is never absent", m.Metadata.Name)
		c := machineConfig{hash: m.Metadata.Annotations["rezuscloud.io/config-hash"], upToDate: *m.Status.ConfigUpToDate}
		for _, cond := range m.Status.Conditions {
			if cond.Type == "ConfigApplied" {
				c.status, c.reason, c.message = cond.Status, cond.Reason, cond.Message
			}
		}
		out[m.Metadata.Name] = c
	}
	return out
}

// nodeConfigHashes are the hashes of the configs the emulated nodes of a
// tenant hold (the emulator's own account), by machine name.
func (p *proc) nodeConfigHashes(tenant string) map[string]string {
	out := map[string]string{}
	for _, n := range p.emulatorNodes() {
		if name, ok := strings.CutPrefix(n["name"].(string), tenant+"-"); ok {
			h, _ := n["configHash"].(string)
			out[name] = h
		}
	}
	return out
}

// configsConverged says what keeps every machine of the tenant from holding
// its config ("" when none): the node's hash must be the machine's
// annotation, and its status must say it is up to date.
func (p *proc) configsConverged(tenant string) string {
	nodes := p.nodeConfigHashes(tenant)
	ms := p.machineConfigs(tenant)
	if len(ms) == 0 || len(nodes) != len(ms) {
		return fmt.Sprintf("%d machines, %d nodes", len(ms), len(nodes))
	}
	for name, m := range ms {
		switch {
		case m.hash == "" || nodes[name] != m.hash:
			return fmt.Sprintf("%s: node holds %.12s, annotation %.12s", name, nodes[name], m.hash)
		case !m.upToDate || m.status != "True":
			return fmt.Sprintf("%s: configUpToDate %v, ConfigApplied %s %s %s", name, m.upToDate, m.status, m.reason, m.message)
		}
	}
	return ""
}

func (p *proc) waitConfigs(tenant, what string) map[string]string {
	p.t.Helper()
	last := ""
	p.eventually(2*time.Minute, what+" (every node holds its machine's config)", func() bool {
		last = p.configsConverged(tenant)
		if last != "" {
			p.t.Logf("%s: %s", what, last)
		}
		return last == ""
	})
	return p.nodeConfigHashes(tenant)
}

// emulatorFault replaces a node's faults on the emulator's HTTP API.
func (p *proc) emulatorFault(node, faults string) {
	p.t.Helper()
	resp, err := http.DefaultClient.Do(p.emulatorRequest(http.MethodPut, "/v1/nodes/"+node+"/faults", bytes.NewReader([]byte(faults))))
	require.NoError(p.t, err)
	resp.Body.Close()
	require.Equal(p.t, http.StatusOK, resp.StatusCode)
}

func configPatch(name, patch string) string {
	spec, _ := json.Marshal(map[string]any{"metadata": map[string]any{"name": name}, "spec": map[string]any{"patch": patch, "target": map[string]any{"kind": "all"}}})
	return string(spec)
}

// TestConfigsReachRunningMachines: a cluster built by tofu (1 control plane,
// 2 workers) takes config changes through the Talos API — checked through
// the emulator's own account of the config bytes each node holds.
func TestConfigsReachRunningMachines(t *testing.T) {
	t.Parallel()
	p := startInfraServer(t, t.TempDir())
	createCluster(t, p, "cfg", 2)
	p.settled("cfg", 3)

	// Day 0: every machine holds the config it was built with, and its
	// annotation is that config's hash: no apply was needed.
	day0 := p.waitConfigs("cfg", "day 0")
	for name, m := range p.machineConfigs("cfg") {
		require.Equal(t, "Day0", m.reason, name)
	}

	// A patch for every machine reaches every node, in place.
	code, body := p.do("POST", "/api/v1/tenants/cfg/configpatches", configPatch("verbose-kubelet", "machine:\n  kubelet:\n    extraArgs:\n      v: \"2\"\n"))
	require.Equal(t, http.StatusCreated, code, body)
	p.eventually(2*time.Minute, "the patch reaches every node", func() bool {
		for name, h := range p.nodeConfigHashes("cfg") {
			if h == day0[name] {
				return false
			}
		}
		return true
	})
	patched := p.waitConfigs("cfg", "the patch")
	for name, m := range p.machineConfigs("cfg") {
		require.Equal(t, "AppliedInPlace", m.reason, name)
		require.Contains(t, m.message, "NO_REBOOT", name)
	}

	// Disabling it goes back to the day-0 configs.
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/cfg/configpatches/verbose-kubelet", `{"spec":{"enabled":false}}`))
	p.eventually(2*time.Minute, "the nodes are back on their day-0 configs", func() bool {
		h := p.nodeConfigHashes("cfg")
		for name := range day0 {
			if h[name] != day0[name] {
				return false
			}
		}
		return true
	})
	p.waitConfigs("cfg", "the patch disabled")
	require.NotEqual(t, patched["cp-0"], day0["cp-0"])

	// A node group's label reaches that group's machines only.
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/cfg/nodegroups/workers", `{"spec":{"labels":{"tier":"batch"}}}`))
	p.eventually(2*time.Minute, "the label reaches the workers", func() bool {
		h := p.nodeConfigHashes("cfg")
		return h["workers-0"] != day0["workers-0"] && h["workers-1"] != day0["workers-1"]
	})
	labelled := p.waitConfigs("cfg", "the label")
	require.Equal(t, day0["cp-0"], labelled["cp-0"], "the control plane's config did not change")

	// A worker that refuses its config says so; the others converge.
	p.emulatorFault("cfg-workers-1", `{"refuseApply":true}`)
	code, body = p.do("POST", "/api/v1/tenants/cfg/configpatches", configPatch("max-pods", "machine:\n  kubelet:\n    extraArgs:\n      max-pods: \"150\"\n"))
	require.Equal(t, http.StatusCreated, code, body)
	p.eventually(2*time.Minute, "workers-1 fails, the others converge", func() bool {
		h := p.nodeConfigHashes("cfg")
		ms := p.machineConfigs("cfg")
		w1 := ms["workers-1"]
		if w1.upToDate || w1.status != "False" || w1.reason != "ApplyFailed" || !strings.Contains(w1.message, "refusing ApplyConfiguration") {
			return false
		}
		if h["workers-1"] != labelled["workers-1"] || w1.hash != labelled["workers-1"] {
			return false
		}
		for _, name := range []string{"cp-0", "workers-0"} {
			if h[name] == labelled[name] || ms[name].hash != h[name] || !ms[name].upToDate {
				return false
			}
		}
		return true
	})

	// The fault lifted, it converges with no new spec change (the retry).
	p.emulatorFault("cfg-workers-1", `{}`)
	after := p.waitConfigs("cfg", "the fault lifted")
	require.NotEqual(t, labelled["workers-1"], after["workers-1"])

	// A machine added now boots with everything declared (patches, labels,
	// its hostname) as its day-0 config: it needs no apply.
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/cfg/nodegroups/workers", `{"spec":{"count":3}}`))
	p.settled("cfg", 4)
	p.waitConfigs("cfg", "after the scale-up")
	require.Equal(t, "Day0", p.machineConfigs("cfg")["workers-2"].reason)

	// Its event history is its config history: one MachineConfigApplied per
	// config that reached it (the patch, back, the label, the retried patch),
	// each followed by the status saying how, and the refusal in between.
	var hist struct {
		Items []struct {
			Type   string `json:"type"`
			Object struct {
				Metadata struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
				Status struct {
					Conditions []struct{ Type, Status, Reason string } `json:"conditions"`
				} `json:"status"`
			} `json:"object"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal(p.raw("/api/v1/events?kind=Machine&tenant=cfg&name=workers-1&since=0&limit=10000"), &hist))
	var applied []string
	reasons := map[string]bool{}
	for _, ev := range hist.Items {
		if ev.Type == "MachineConfigApplied" {
			applied = append(applied, ev.Object.Metadata.Annotations["rezuscloud.io/config-hash"])
		}
		for _, c := range ev.Object.Status.Conditions {
			if c.Type == "ConfigApplied" {
				reasons[c.Reason] = true
			}
		}
	}
	require.Equal(t, []string{patched["workers-1"], day0["workers-1"], labelled["workers-1"], after["workers-1"]}, applied)
	for _, r := range []string{"Day0", "Pending", "AppliedInPlace", "ApplyFailed"} {
		require.True(t, reasons[r], "workers-1's history has a ConfigApplied %s", r)
	}
}
