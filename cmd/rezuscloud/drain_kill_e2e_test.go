//go:build e2e

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestDrainSurvivesKillNine kills the server (kill -9) while a Talos
// upgrade's drain waits on a PodDisruptionBudget that allows no disruption
// (drainTimeout 0: as long as it takes). After the restart the run is still
// draining that machine; once the budget is lifted the drain finishes and
// the run succeeds, every worker upgraded (rebooted) exactly once and every
// Node Ready and schedulable.
func TestDrainSurvivesKillNine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startRealKubeServer(t, dir)
	const tenant = "kd"
	code, body := p.do("POST", "/api/v1/tenants", `{"metadata":{"name":"`+tenant+`"},"spec":{"talosVersion":"v1.13.0"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	for _, g := range []string{
		`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`,
		`{"metadata":{"name":"workers"},"spec":{"role":"worker","count":2,"provider":"emulated","drainTimeout":"0"}}`,
	} {
		code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/nodegroups", g)
		require.Equal(t, http.StatusCreated, code, body)
	}
	p.settled(tenant, 3)
	k := tenantKube(t, p, tenant)
	requireNodesReady(t, k, 3, realKubeFrom)
	ctx := t.Context()

	available := deployment(t, k, "held", 2, nil)
	budget(t, k, "hold", "held", nil, ptr[int32](0))

	code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/upgrades",
		`{"metadata":{"name":"roll"},"spec":{"talosVersion":"v1.13.1","nodeGroups":["workers"]}}`)
	require.Equal(t, http.StatusCreated, code, body)
	// A step blocked in Draining with pods left (the budget holds them).
	draining := func(p *proc) string {
		for _, u := range p.upgrades(tenant) {
			for _, m := range u.Status.Machines {
				if m.Phase == "Draining" && m.Message != "" && m.Message != "Draining" {
					return m.Name
				}
			}
		}
		return ""
	}
	// phaseOf is a machine's phase in the run. A step that resumes (or
	// retries while the control plane comes back) says "Draining" again
	// until its next eviction round says who is left: the phase, not the
	// message, says whether the budget still holds it.
	phaseOf := func(p *proc, name string) string {
		for _, u := range p.upgrades(tenant) {
			for _, m := range u.Status.Machines {
				if m.Name == name {
					return m.Phase
				}
			}
		}
		return ""
	}
	var held string
	p.eventually(3*time.Minute, "a worker's drain is held by the budget", func() bool {
		held = draining(p)
		return held != ""
	})
	// The drain cannot end while the budget allows no disruption and its
	// pods run: that, not a pause, says it is held when the server dies.
	heldByBudget := func(k kubernetes.Interface) {
		t.Helper()
		pdb, err := k.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "hold", metav1.GetOptions{})
		require.NoError(t, err)
		require.Zero(t, pdb.Status.DisruptionsAllowed, "the budget allows no eviction")
		require.EqualValues(t, 2, pdb.Status.CurrentHealthy, "the held pods run")
	}
	heldByBudget(k)
	require.Equal(t, held, draining(p), "still draining")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.done

	p2 := startRealKubeServer(t, dir)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("upgrades: %s", p2.raw("/api/v1/tenants/"+tenant+"/upgrades"))
		}
	})
	// The resumed step says "Draining" again, and its first eviction round
	// says who is left: a second such round in the run's history is the
	// resumed drain's.
	p2.eventually(3*time.Minute, "the drain resumed after the restart", func() bool {
		return drainRounds(t, p2, tenant, "roll", held) >= 2
	})
	// The emulator restarted with the server: its control plane comes back.
	k = tenantKube(t, p2, tenant)
	requireNodesReady(t, k, 3, realKubeFrom)
	for _, m := range p2.machines(tenant) {
		if m.Metadata.Name == held {
			n, err := k.CoreV1().Nodes().Get(ctx, m.Spec.Hostname, metav1.GetOptions{})
			require.NoError(t, err)
			require.True(t, n.Spec.Unschedulable, "%s is still cordoned", held)
		}
	}
	// The resumed drain ran an eviction round, and the budget held it.
	heldByBudget(k)
	require.Equal(t, "Draining", phaseOf(p2, held), "the resumed drain still waits on the budget")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, k.PolicyV1().PodDisruptionBudgets("default").Delete(context.Background(), "hold", metav1.DeleteOptions{}))
	}, time.Minute, time.Second, "the budget is lifted")
	p2.eventually(5*time.Minute, "the upgrade finished", func() bool {
		us := p2.upgrades(tenant)
		return len(us) == 1 && (us[0].Status.Phase == "Succeeded" || us[0].Status.Phase == "Failed")
	})
	run := p2.upgrades(tenant)[0]
	require.Equal(t, "Succeeded", run.Status.Phase, run.Status.Reason)
	requireNodesReady(t, k, 3, realKubeFrom)
	nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, n := range nodes.Items {
		require.False(t, n.Spec.Unschedulable, "%s uncordoned", n.Name)
	}
	entered := upgradesEntered(t, p2, tenant, run.Metadata.Name)
	require.Len(t, entered, 2, "both workers upgraded")
	for name, n := range entered {
		require.Equal(t, 1, n, "machine %s was upgraded %d times", name, n)
	}
	for _, m := range p2.machines(tenant) {
		if m.Spec.Role == "worker" {
			require.Equal(t, "v1.13.1", m.Status.TalosVersion, m.Metadata.Name)
		}
	}

	// A day-2 config that reboots (a sysctl) drains each worker first: with
	// a budget of minAvailable 1 over 2 replicas, one is always available;
	// every worker is rebooted, its config applied with a reboot, and its
	// Node schedulable again without the controller's label.
	budget(t, k, "one", "held", ptr[int32](1), nil)
	requireAvailable(t, available, 2)
	boots := map[string]string{}
	for _, m := range p2.machines(tenant) {
		boots[m.Metadata.Name] = bootID(t, p2, tenant, m.Spec.Address)
	}
	watch := startProbe(ctx, available)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"name": "somaxconn"}, "spec": map[string]any{
		"patch": "machine:\n  sysctls:\n    net.core.somaxconn: \"65535\"\n", "target": map[string]any{"kind": "nodeGroup", "name": "workers"}}})
	code, body = p2.do("POST", "/api/v1/tenants/"+tenant+"/configpatches", string(patch))
	require.Equal(t, http.StatusCreated, code, body)
	p2.eventually(5*time.Minute, "the workers took the rebooting config", func() bool {
		cfgs := p2.machineConfigs(tenant)
		for _, m := range p2.machines(tenant) {
			if m.Spec.Role == "worker" && (!cfgs[m.Metadata.Name].upToDate || cfgs[m.Metadata.Name].reason != "AppliedWithReboot") {
				return false
			}
		}
		return true
	})
	requireNodesReady(t, k, 3, realKubeFrom)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		assert.NoError(c, err)
		for _, n := range nodes.Items {
			assert.False(c, n.Spec.Unschedulable, "%s uncordoned", n.Name)
			assert.NotContains(c, n.Labels, "rezuscloud.io/drained-for-config", n.Name)
		}
	}, time.Minute, 500*time.Millisecond, "every Node schedulable after the rebooting config")
	_, lowest, runs, _ := watch.end()
	require.GreaterOrEqual(t, lowest, 1, "available replicas during the rebooting config, with a budget of minAvailable 1")
	for _, m := range p2.machines(tenant) {
		changed := boots[m.Metadata.Name] != bootID(t, p2, tenant, m.Spec.Address)
		require.Equal(t, m.Spec.Role == "worker", changed, "%s rebooted only if a worker", m.Metadata.Name)
	}
	require.Contains(t, p2.log(), "drained before a rebooting config")
	t.Logf("figures: rebooting config on 2 workers with drain; lowest available replicas %d of 2 over %d probes", lowest, runs)
}

// drainRounds counts the times the run's history shows machine's drain
// going from "Draining" (a step entered or resumed) to who is left (its
// first eviction round).
func drainRounds(t *testing.T, p *proc, tenant, run, machine string) int {
	t.Helper()
	var hist struct {
		Items []struct {
			Object upgradeRun `json:"object"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal(p.raw("/api/v1/events?kind=Upgrade&tenant="+tenant+"&name="+run+"&since=0&limit=10000"), &hist))
	rounds, last := 0, ""
	for _, ev := range hist.Items {
		for _, m := range ev.Object.Status.Machines {
			if m.Name != machine || m.Message == last {
				continue
			}
			if last == "Draining" && strings.HasPrefix(m.Message, "Draining (") {
				rounds++
			}
			last = m.Message
		}
	}
	return rounds
}
