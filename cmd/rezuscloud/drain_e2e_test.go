//go:build e2e

package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestTalosUpgradeDrainsThroughKubernetes upgrades Talos on 1 control plane
// + 3 workers of the real control plane with a 3-replica Deployment and a
// PodDisruptionBudget minAvailable 2: every worker is cordoned, drained and
// uncordoned in turn, a watcher of the Deployment's available replicas
// never sees fewer than 2, and every Node ends Ready and schedulable. Then a
// budget that allows no disruption blocks the next run's first worker: the
// step fails after the group's drainTimeout naming the budget, and that
// machine was neither rebooted (its boot id) nor left cordoned.
func TestTalosUpgradeDrainsThroughKubernetes(t *testing.T) {
	t.Parallel()
	p := startRealKubeServer(t, t.TempDir())
	const tenant = "dr"
	code, body := p.do("POST", "/api/v1/tenants", `{"metadata":{"name":"`+tenant+`"},"spec":{"talosVersion":"v1.13.0"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	for _, g := range []string{
		`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`,
		`{"metadata":{"name":"workers"},"spec":{"role":"worker","count":3,"provider":"emulated","drainTimeout":"5m"}}`,
	} {
		code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/nodegroups", g)
		require.Equal(t, http.StatusCreated, code, body)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("upgrades: %s", p.raw("/api/v1/tenants/"+tenant+"/upgrades"))
		}
	})
	p.settled(tenant, 4)
	k := tenantKube(t, p, tenant)
	requireNodesReady(t, k, 4, realKubeFrom)
	ctx := t.Context()

	available := deployment(t, k, "web", 3, nil)
	budget(t, k, "web", "web", ptr[int32](2), nil)

	watch := startProbe(ctx, available)
	began := time.Now()
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/"+tenant, `{"spec":{"talosVersion":"v1.13.1"}}`))
	p.eventually(10*time.Minute, "the Talos upgrade finished", func() bool {
		us := p.upgrades(tenant)
		return len(us) == 1 && (us[0].Status.Phase == "Succeeded" || us[0].Status.Phase == "Failed")
	})
	wall := time.Since(began)
	_, lowest, runs, _ := watch.end()
	run := p.upgrades(tenant)[0]
	require.Equal(t, "Succeeded", run.Status.Phase, run.Status.Reason)
	require.Positive(t, runs)
	require.GreaterOrEqual(t, lowest, 2, "available replicas during the upgrade, with a budget of minAvailable 2")
	requireNodesReady(t, k, 4, realKubeFrom)
	nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, n := range nodes.Items {
		require.False(t, n.Spec.Unschedulable, "%s uncordoned", n.Name)
	}
	// Every worker was drained: the upgrade's history shows each Draining.
	drained := map[string]bool{}
	var hist struct {
		Items []struct {
			Object upgradeRun `json:"object"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal(p.raw("/api/v1/events?kind=Upgrade&tenant="+tenant+"&name="+run.Metadata.Name+"&since=0&limit=10000"), &hist))
	for _, ev := range hist.Items {
		for _, m := range ev.Object.Status.Machines {
			if m.Phase == "Draining" {
				drained[m.Name] = true
			}
		}
	}
	for _, m := range p.machines(tenant) {
		if m.Spec.Role == "worker" {
			require.True(t, drained[m.Metadata.Name], "%s was drained", m.Metadata.Name)
		}
	}
	t.Logf("figures: Talos upgrade of 1+3 with drains (PDB minAvailable 2): wall clock %s; drains took %v; lowest available replicas %d of 3 over %d probes",
		wall.Round(100*time.Millisecond), drainTimes(p.log()), lowest, runs)

	// A budget that allows no disruption blocks the drain.
	require.NoError(t, k.PolicyV1().PodDisruptionBudgets("default").Delete(ctx, "web", metav1.DeleteOptions{}))
	budget(t, k, "frozen", "web", nil, ptr[int32](0))
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/"+tenant+"/nodegroups/workers", `{"spec":{"drainTimeout":"5s"}}`))
	var bootBefore = map[string]string{}
	for _, m := range p.machines(tenant) {
		bootBefore[m.Metadata.Name] = bootID(t, p, tenant, m.Spec.Address)
	}
	code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/upgrades",
		`{"metadata":{"name":"blocked"},"spec":{"talosVersion":"v1.13.2","nodeGroups":["workers"]}}`)
	require.Equal(t, http.StatusCreated, code, body)
	var blocked upgradeRun
	p.eventually(5*time.Minute, "the blocked upgrade ended", func() bool {
		for _, u := range p.upgrades(tenant) {
			if u.Metadata.Name == "blocked" && (u.Status.Phase == "Failed" || u.Status.Phase == "Succeeded") {
				blocked = u
				return true
			}
		}
		return false
	})
	require.Equal(t, "Failed", blocked.Status.Phase)
	require.Contains(t, blocked.Status.Reason, "blocked")
	require.Contains(t, blocked.Status.Reason, "frozen", "the reason names the budget")
	var failedOn string
	for _, m := range blocked.Status.Machines {
		if m.Phase == "Failed" {
			failedOn = m.Name
		}
	}
	require.NotEmpty(t, failedOn)
	for _, m := range p.machines(tenant) {
		require.Equal(t, bootBefore[m.Metadata.Name], bootID(t, p, tenant, m.Spec.Address), "%s was not rebooted", m.Metadata.Name)
	}
	nodes, err = k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, n := range nodes.Items {
		require.False(t, n.Spec.Unschedulable, "%s uncordoned after the blocked drain", n.Name)
	}

	// Lifting the budget and starting the run again completes it.
	require.NoError(t, k.PolicyV1().PodDisruptionBudgets("default").Delete(ctx, "frozen", metav1.DeleteOptions{}))
	code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/upgrades",
		`{"metadata":{"name":"again"},"spec":{"talosVersion":"v1.13.2","nodeGroups":["workers"]}}`)
	require.Equal(t, http.StatusCreated, code, body)
	p.eventually(5*time.Minute, "the upgrade run again ended", func() bool {
		for _, u := range p.upgrades(tenant) {
			if u.Metadata.Name == "again" && (u.Status.Phase == "Failed" || u.Status.Phase == "Succeeded") {
				require.Equal(t, "Succeeded", u.Status.Phase, u.Status.Reason)
				return true
			}
		}
		return false
	})
	requireNodesReady(t, k, 4, realKubeFrom)

	// Scale-down 3 -> 2 workers: the going worker's pods are evicted first
	// (and run again on the others), then the machine is destroyed and its
	// Node deleted. The budget minAvailable 2 holds throughout.
	budget(t, k, "web", "web", ptr[int32](2), nil)
	requireAvailable(t, available, 3)
	before := map[string]bool{}
	var going string // the group keeps workers-0 and workers-1
	for _, m := range p.machines(tenant) {
		before[m.Spec.Hostname] = true
		if m.Metadata.Name == "workers-2" {
			going = m.Spec.Hostname
		}
	}
	require.NotEmpty(t, going)
	// A pod that prefers the going worker runs there until it is evicted.
	deployment(t, k, "pinned", 1, &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
		Weight: 100, Preference: corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{going}}}}}}}})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pods, err := k.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=pinned"})
		if assert.NoError(c, err) && assert.Len(c, pods.Items, 1) {
			assert.Equal(c, going, pods.Items[0].Spec.NodeName)
			assert.Equal(c, corev1.PodRunning, pods.Items[0].Status.Phase)
		}
	}, 2*time.Minute, 500*time.Millisecond, "the pinned pod runs on %s", going)
	applies := len(p.applies(tenant))
	watch = startProbe(ctx, available)
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/"+tenant+"/nodegroups/workers", `{"spec":{"count":2,"drainTimeout":"5m"}}`))
	p.eventually(5*time.Minute, "the scale-down applied", func() bool {
		as := p.applies(tenant)
		return len(as) > applies && len(p.machines(tenant)) == 3 && p.reconciled(tenant)
	})
	_, lowest, runs, _ = watch.end()
	var gone string
	for h := range before {
		if !slices.ContainsFunc(p.machines(tenant), func(m machine) bool { return m.Spec.Hostname == h }) {
			gone = h
		}
	}
	require.Equal(t, going, gone)
	requireNodesReady(t, k, 3, realKubeFrom)
	_, err = k.CoreV1().Nodes().Get(ctx, gone, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the Node of %s is deleted: %v", gone, err)
	require.GreaterOrEqual(t, lowest, 2, "available replicas during the scale-down, with a budget of minAvailable 2")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pods, err := k.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		assert.NoError(c, err)
		ready := 0
		for _, pod := range pods.Items {
			assert.NotEqual(c, gone, pod.Spec.NodeName, "no pod left on the gone node")
			if pod.Status.Phase == corev1.PodRunning {
				ready++
			}
		}
		assert.Equal(c, 3, ready)
		pods, err = k.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=pinned"})
		if assert.NoError(c, err) && assert.Len(c, pods.Items, 1) {
			assert.NotEqual(c, gone, pods.Items[0].Spec.NodeName, "the pinned pod runs elsewhere")
			assert.Equal(c, corev1.PodRunning, pods.Items[0].Status.Phase)
		}
	}, 2*time.Minute, 500*time.Millisecond, "the replicas run on the workers that stay")
	log := applyLog(t, p, tenant)
	require.Contains(t, log, "scale-down: cordoned")
	require.Contains(t, log, "drained in")
	require.Regexp(t, `scale-down: workers-2: Draining \([1-9]\d* pods? left\)`, log, "the going worker had pods to evict")
	require.Contains(t, log, "Node "+gone+" deleted")
	require.Less(t, strings.Index(log, "drained in"), strings.Index(log, "Node "+gone+" deleted"))
	t.Logf("figures: scale-down of 3 -> 2 workers with drain; %q; lowest available replicas %d of 3 over %d probes",
		regexp.MustCompile(`scale-down: \S+: Draining \(\d+ pods? left\)|drained in \S+`).FindAllString(log, -1), lowest, runs)
}

// bootID reads a machine's /proc/sys/kernel/random/boot_id through the Talos
// API (talosctl read), new on every boot.
func bootID(t *testing.T, p *proc, tenant, address string) string {
	t.Helper()
	out, err := talosRead(t, p, tenant, address, "/proc/sys/kernel/random/boot_id")
	require.NoError(t, err)
	return strings.TrimSpace(out)
}

func talosRead(t *testing.T, p *proc, tenant, address, path string) (string, error) {
	t.Helper()
	tc, err := clientconfig.FromBytes(p.raw("/api/v1/tenants/" + tenant + "/talosconfig"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.WithConfig(tc), client.WithEndpoints(address))
	if err != nil {
		return "", err
	}
	defer c.Close()
	rc, err := c.Read(ctx, path)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

// drainTimes are the durations the upgrade saga logged for its drains.
func drainTimes(serverLog string) []time.Duration {
	var out []time.Duration
	for _, m := range regexp.MustCompile(`"msg":"upgrade: drained"[^\n]*?"took":(\d+)`).FindAllStringSubmatch(serverLog, -1) {
		ns, _ := strconv.ParseInt(m[1], 10, 64)
		out = append(out, time.Duration(ns).Round(time.Millisecond))
	}
	return out
}

// applyLog is the logs of every apply of the tenant, one after the other.
func applyLog(t *testing.T, p *proc, tenant string) string {
	t.Helper()
	var b strings.Builder
	for _, a := range p.applies(tenant) {
		b.Write(p.raw("/api/v1/tenants/" + tenant + "/applies/" + a.Metadata.Name + "/log"))
		b.WriteByte('\n')
	}
	return b.String()
}
