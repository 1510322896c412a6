//go:build e2e

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// setFaults replaces an emulator node's faults through the emulator's HTTP
// API. After a restart the emulator listens on a new port, which the server
// registers in the emulated Provider shortly after it starts: retry until
// the registered endpoint answers.
func (p *proc) setFaults(node, faults string) {
	p.t.Helper()
	p.eventually(time.Minute, "faults of "+node+" set", func() bool {
		resp, err := http.DefaultClient.Do(p.emulatorRequest(http.MethodPut, "/v1/nodes/"+node+"/faults", strings.NewReader(faults)))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// TestKubernetesUpgradeSurvivesKillNine changes the Kubernetes version of a
// 3+2 cluster built by tofu, kills the server while the run waits on a worker
// (the workers report unhealthy services until the restart, so the run is
// caught mid-way), and checks after a restart: the run Succeeds, every
// emulated node runs the target's kubelet, each machine took its new config
// exactly once (its MachineConfigApplied events), and the control planes were
// done one at a time before any worker started.
func TestKubernetesUpgradeSurvivesKillNine(t *testing.T) {
	t.Parallel()
	const from, to = "v1.35.2", "v1.36.0"
	dir := t.TempDir()
	p := startInfraServer(t, dir)
	code, body := p.do("POST", "/api/v1/tenants", `{"metadata":{"name":"kube"},"spec":{"kubernetesVersion":"`+from+`"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	for _, g := range []string{
		`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":3,"provider":"emulated"}}`,
		`{"metadata":{"name":"workers"},"spec":{"role":"worker","count":2,"provider":"emulated","updateStrategy":{"maxParallelism":2}}}`,
	} {
		code, body = p.do("POST", "/api/v1/tenants/kube/nodegroups", g)
		require.Equal(t, http.StatusCreated, code, body)
	}
	p.settled("kube", 5)
	p.eventually(2*time.Minute, "the cluster is healthy", func() bool {
		code, h := p.do("GET", "/api/v1/tenants/kube/health?refresh=true", "")
		return code == http.StatusOK && h["state"] == "Ready"
	})
	_, tn := p.do("GET", "/api/v1/tenants/kube", "")
	require.Equal(t, from, tn["status"].(map[string]any)["kubernetesVersion"], "the first apply records what the configs carry")
	var workers []string
	for _, n := range p.emulatorNodes() {
		require.Equal(t, from, n["kubernetesVersion"], n["name"])
		if n["role"] == "worker" {
			workers = append(workers, n["name"].(string))
			p.setFaults(n["name"].(string), `{"unhealthy":true}`)
		}
	}
	require.Len(t, workers, 2)

	// A skip is refused at the API, the next minor is taken.
	require.Equal(t, http.StatusUnprocessableEntity, p.mergePatch("/api/v1/tenants/kube", `{"spec":{"kubernetesVersion":"v1.37.0"}}`))
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/kube", `{"spec":{"kubernetesVersion":"`+to+`"}}`))
	p.eventually(2*time.Minute, "the control planes done and the workers under way", func() bool {
		us := p.upgrades("kube")
		if len(us) != 1 {
			return false
		}
		done, verifying := 0, 0
		for _, m := range us[0].Status.Machines {
			switch m.Phase {
			case "Done":
				done++
			case "Verifying":
				verifying++
			}
		}
		return done == 3 && verifying >= 1
	})
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.done

	p2 := startInfraServer(t, dir)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("upgrades: %s", p2.raw("/api/v1/tenants/kube/upgrades"))
			t.Logf("emulator nodes: %v", p2.emulatorNodes())
		}
	})
	for _, w := range workers {
		p2.setFaults(w, `{}`)
	}
	p2.eventually(3*time.Minute, "the upgrade finished", func() bool {
		us := p2.upgrades("kube")
		return len(us) == 1 && (us[0].Status.Phase == "Succeeded" || us[0].Status.Phase == "Failed")
	})
	run := p2.upgrades("kube")[0]
	require.Equal(t, "Succeeded", run.Status.Phase, run.Status.Reason)
	require.True(t, strings.HasPrefix(run.Metadata.Name, "kubernetes-"), run.Metadata.Name)
	for _, n := range p2.emulatorNodes() {
		require.Equal(t, to, n["kubernetesVersion"], n["name"])
	}
	_, tn = p2.do("GET", "/api/v1/tenants/kube", "")
	require.Equal(t, to, tn["status"].(map[string]any)["kubernetesVersion"])

	// Each machine took its new config once: one MachineConfigApplied event
	// in its whole history (day 0 set no hash through the API here, or set
	// it before the run; both are before the run's first).
	var events struct {
		Items []struct {
			Type   string `json:"type"`
			Time   time.Time
			Object struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			} `json:"object"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal(p2.raw("/api/v1/events?kind=Machine&tenant=kube&since=0&limit=10000"), &events))
	var hist struct {
		Items []struct {
			Time   time.Time  `json:"time"`
			Object upgradeRun `json:"object"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal(p2.raw("/api/v1/events?kind=Upgrade&tenant=kube&name="+run.Metadata.Name+"&since=0&limit=10000"), &hist))
	require.NotEmpty(t, hist.Items)
	started := hist.Items[0].Time
	applied := map[string]int{}
	for _, ev := range events.Items {
		if ev.Type == "MachineConfigApplied" && !ev.Time.Before(started) {
			applied[ev.Object.Metadata.Name]++
		}
	}
	require.Len(t, applied, 5, "every machine took a config during the run: %v", applied)
	for name, n := range applied {
		require.Equal(t, 1, n, "machine %s took its config %d times", name, n)
	}

	// Control planes one at a time, all done before any worker started.
	roles := map[string]string{}
	for _, m := range p2.machines("kube") {
		roles[m.Metadata.Name] = m.Spec.Role
	}
	cpsDone := 0
	for i, ev := range hist.Items {
		busyCPs := 0
		for _, m := range ev.Object.Status.Machines {
			busy := m.Phase == "Upgrading" || m.Phase == "Verifying"
			if roles[m.Name] == "controlplane" && busy {
				busyCPs++
			}
			if roles[m.Name] == "worker" && m.Phase != "Pending" {
				require.Equal(t, 3, cpsDone, "event %d: worker %s is %s before every control plane was done", i, m.Name, m.Phase)
			}
		}
		require.LessOrEqual(t, busyCPs, 1, fmt.Sprintf("event %d: control planes at once", i))
		cpsDone = 0
		for _, m := range ev.Object.Status.Machines {
			if roles[m.Name] == "controlplane" && m.Phase == "Done" {
				cpsDone++
			}
		}
	}
	p2.settled("kube", 5)
}
