//go:build e2e

package main

import (
	"encoding/json"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type upgradeRun struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Status struct {
		Phase    string `json:"phase"`
		Reason   string `json:"reason"`
		Machines []struct {
			Name, Phase, To, Message string
		} `json:"machines"`
	} `json:"status"`
}

func (p *proc) upgrades(tenant string) []upgradeRun {
	var l struct{ Items []upgradeRun }
	require.NoError(p.t, json.Unmarshal(p.raw("/api/v1/tenants/"+tenant+"/upgrades"), &l))
	return l.Items
}

// TestUpgradeSurvivesKillNine changes a tenant's Talos version, kills the
// server while the rolling upgrade is half done, and checks that after a
// restart the run finishes with every machine upgraded exactly once.
func TestUpgradeSurvivesKillNine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startInfraServer(t, dir)
	createCluster(t, p, "roll", 3)
	p.settled("roll", 4)
	// The saga refuses to start on machines it cannot reach: wait until the
	// cluster is healthy, as an operator would.
	p.eventually(2*time.Minute, "the cluster is healthy", func() bool {
		code, h := p.do("GET", "/api/v1/tenants/roll/health?refresh=true", "")
		return code == http.StatusOK && h["state"] == "Ready"
	})
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/roll", `{"spec":{"talosVersion":"v1.13.1"}}`))
	p.eventually(2*time.Minute, "half the machines upgraded", func() bool {
		us := p.upgrades("roll")
		if len(us) != 1 {
			return false
		}
		done := 0
		for _, m := range us[0].Status.Machines {
			if m.Phase == "Done" {
				done++
			}
		}
		return done >= 1 && done < 4
	})
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.done

	p2 := startInfraServer(t, dir)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("upgrades: %s", p2.raw("/api/v1/tenants/roll/upgrades"))
			t.Logf("emulator nodes: %v", p2.emulatorNodes())
		}
	})
	p2.eventually(3*time.Minute, "the upgrade finished", func() bool {
		us := p2.upgrades("roll")
		return len(us) == 1 && (us[0].Status.Phase == "Succeeded" || us[0].Status.Phase == "Failed")
	})
	run := p2.upgrades("roll")[0]
	require.Equal(t, "Succeeded", run.Status.Phase, run.Status.Reason)
	for _, n := range p2.emulatorNodes() {
		require.Equal(t, "v1.13.1", n["version"], n["name"])
	}
	// Each machine entered Upgrading once in the run's whole history.
	entered := upgradesEntered(t, p2, "roll", run.Metadata.Name)
	require.Len(t, entered, 4)
	for name, n := range entered {
		require.Equal(t, 1, n, "machine %s was upgraded %d times", name, n)
	}
	// The apply held back during the upgrade runs afterwards and changes nothing.
	p2.settled("roll", 4)
}
