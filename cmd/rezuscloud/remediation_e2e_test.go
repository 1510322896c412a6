//go:build e2e

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// remediationStep is one step of a Remediation.
type remediationStep struct {
	Name    string `json:"name"`
	Message string `json:"message"`
}

// remediationObj is a Remediation as the API answers it.
type remediationObj struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		NodeGroup, Machine, Reason string
	} `json:"spec"`
	Status struct {
		Phase   string            `json:"phase"`
		Apply   string            `json:"apply"`
		Steps   []remediationStep `json:"steps"`
		Message string            `json:"message"`
	} `json:"status"`
}

func (p *proc) remediations(tenant string) []remediationObj {
	var l struct{ Items []remediationObj }
	require.NoError(p.t, json.Unmarshal(p.raw("/api/v1/tenants/"+tenant+"/remediations"), &l))
	return l.Items
}

// groupCondition is a node group's condition of type typ (nil when absent).
func (p *proc) groupCondition(tenant, group, typ string) map[string]any {
	_, ng := p.do("GET", "/api/v1/tenants/"+tenant+"/nodegroups/"+group, "")
	st, _ := ng["status"].(map[string]any)
	conds, _ := st["conditions"].([]any)
	for _, c := range conds {
		if m := c.(map[string]any); m["type"] == typ {
			return m
		}
	}
	return nil
}

// TestDeadWorkersAreReplaced: a cluster of 1+3 on the real control plane
// whose workers declare remediation (unhealthyAfter 5s, maxUnhealthy 1).
// One worker's emulated node stops answering: it is drained, its Node
// deleted, tofu replaces its machine (a new boot id), the new Node
// registers Ready, and its Remediation records every step; exactly one
// replacement. Then two workers stop answering: nothing is replaced and
// the group says RemediationAllowed=False (TooManyUnhealthy); when one
// comes back, the other is replaced.
func TestDeadWorkersAreReplaced(t *testing.T) {
	t.Parallel()
	p := startRealKubeServer(t, t.TempDir(), "--remediation-interval", "1s")
	const tenant = "heal"
	code, body := p.do("POST", "/api/v1/tenants", `{"metadata":{"name":"`+tenant+`"},"spec":{"talosVersion":"v1.13.0"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	for _, g := range []string{
		`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`,
		`{"metadata":{"name":"workers"},"spec":{"role":"worker","count":3,"provider":"emulated","drainTimeout":"1m",
			"remediation":{"unhealthyAfter":"5s","maxUnhealthy":1,"startupTimeout":"3m"}}}`,
	} {
		code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/nodegroups", g)
		require.Equal(t, http.StatusCreated, code, body)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("remediations: %s", p.raw("/api/v1/tenants/"+tenant+"/remediations"))
			t.Logf("machines: %s", p.raw("/api/v1/tenants/"+tenant+"/machines"))
		}
	})
	p.settled(tenant, 4)
	k := tenantKube(t, p, tenant)
	requireNodesReady(t, k, 4, realKubeFrom)
	p.eventually(time.Minute, "the workers' RemediationAllowed condition", func() bool {
		c := p.groupCondition(tenant, "workers", "RemediationAllowed")
		return c != nil && c["status"] == "True"
	})

	byName := func() map[string]machine {
		out := map[string]machine{}
		for _, m := range p.machines(tenant) {
			out[m.Metadata.Name] = m
		}
		return out
	}
	before := byName()
	victim := before["workers-1"]
	boots := map[string]string{}
	for name, m := range before {
		boots[name] = bootID(t, p, tenant, m.Spec.Address)
	}
	oldNode, err := k.CoreV1().Nodes().Get(t.Context(), victim.Spec.Hostname, metav1.GetOptions{})
	require.NoError(t, err)
	began := time.Now()
	p.setFaults(victim.Spec.Hostname, `{"unreachable":true}`)

	var rem remediationObj
	p.eventually(5*time.Minute, "workers-1 replaced", func() bool {
		rs := p.remediations(tenant)
		if len(rs) != 1 {
			return false
		}
		rem = rs[0]
		return rem.Status.Phase == "Succeeded" || rem.Status.Phase == "Failed"
	})
	took := time.Since(began)
	require.Equal(t, "Succeeded", rem.Status.Phase, rem.Status.Message)
	require.Equal(t, "workers-1", rem.Spec.Machine)
	require.Contains(t, rem.Spec.Reason, "Unreachable")
	var steps []string
	for _, s := range rem.Status.Steps {
		steps = append(steps, s.Name)
	}
	require.Equal(t, []string{"Detected", "Replacing", "Drained", "NodeDeleted", "Replaced", "Joined"}, steps)
	require.NotEmpty(t, rem.Status.Apply)

	after := byName()
	require.NotEqual(t, boots["workers-1"], bootID(t, p, tenant, after["workers-1"].Spec.Address), "a new machine")
	for _, name := range []string{"cp-0", "workers-0", "workers-2"} {
		require.Equal(t, boots[name], bootID(t, p, tenant, after[name].Spec.Address), "%s untouched", name)
	}
	requireNodesReady(t, k, 4, realKubeFrom)
	newNode, err := k.CoreV1().Nodes().Get(t.Context(), victim.Spec.Hostname, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEqual(t, oldNode.UID, newNode.UID, "the old Node was deleted, the new machine registered its own")
	require.False(t, newNode.Spec.Unschedulable)
	require.Len(t, p.remediations(tenant), 1, "exactly one replacement")
	t.Logf("figures: from the fault to a Ready replacement %s (unhealthyAfter 5s, probe interval 1s)", took.Round(100*time.Millisecond))
	for _, a := range p.applies(tenant) {
		if a.Metadata.Name == rem.Status.Apply && a.Status.EndTime != nil {
			wall := a.Status.EndTime.Sub(*a.Status.StartTime)
			tofu := time.Duration(a.Status.TofuMilliseconds) * time.Millisecond
			t.Logf("figures: the replacing apply took %s, tofu %s of it: overhead beyond tofu %s (drain, Node deletion, observing the new machine)",
				wall.Round(10*time.Millisecond), tofu.Round(10*time.Millisecond), (wall - tofu).Round(10*time.Millisecond))
		}
	}

	// Two of three unreachable with maxUnhealthy 1: nothing is replaced.
	w0, w2 := after["workers-0"], after["workers-2"]
	p.setFaults(w0.Spec.Hostname, `{"unreachable":true}`)
	p.setFaults(w2.Spec.Hostname, `{"unreachable":true}`)
	p.eventually(time.Minute, "RemediationAllowed=False", func() bool {
		c := p.groupCondition(tenant, "workers", "RemediationAllowed")
		return c != nil && c["status"] == "False" && c["reason"] == "TooManyUnhealthy"
	})
	c := p.groupCondition(tenant, "workers", "RemediationAllowed")
	require.Contains(t, c["message"], "2 of 3 machines are unhealthy")
	// Well past unhealthyAfter, still one remediation.
	require.Never(t, func() bool { return len(p.remediations(tenant)) > 1 }, 8*time.Second, 500*time.Millisecond,
		"a partition does not destroy machines")

	// One comes back: the other is replaced.
	p.setFaults(w0.Spec.Hostname, `{}`)
	p.eventually(5*time.Minute, "workers-2 replaced", func() bool {
		rs := p.remediations(tenant)
		i := slices.IndexFunc(rs, func(r remediationObj) bool { return r.Spec.Machine == "workers-2" })
		return i >= 0 && rs[i].Status.Phase == "Succeeded"
	})
	rs := p.remediations(tenant)
	require.Len(t, rs, 2)
	require.False(t, slices.ContainsFunc(rs, func(r remediationObj) bool { return r.Spec.Machine == "workers-0" }), "workers-0 came back in time")
	requireNodesReady(t, k, 4, realKubeFrom)
}

// TestRemediationSurvivesKillNine kills the server (kill -9) while the apply
// worker replaces a dead worker (its Remediation Replacing). After the
// restart the Remediation is taken up again and Succeeds, once: one
// Remediation, one Replaced step, and the cluster's Nodes all Ready.
func TestRemediationSurvivesKillNine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startRealKubeServer(t, dir, "--remediation-interval", "1s")
	const tenant = "heal9"
	code, body := p.do("POST", "/api/v1/tenants", `{"metadata":{"name":"`+tenant+`"},"spec":{"talosVersion":"v1.13.0"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	for _, g := range []string{
		`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`,
		`{"metadata":{"name":"workers"},"spec":{"role":"worker","count":2,"provider":"emulated","drainTimeout":"1m",
			"remediation":{"unhealthyAfter":"3s","startupTimeout":"3m"}}}`,
	} {
		code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/nodegroups", g)
		require.Equal(t, http.StatusCreated, code, body)
	}
	p.settled(tenant, 3)
	requireNodesReady(t, tenantKube(t, p, tenant), 3, realKubeFrom)
	var victim machine
	for _, m := range p.machines(tenant) {
		if m.Metadata.Name == "workers-0" {
			victim = m
		}
	}
	p.setFaults(victim.Spec.Hostname, `{"unreachable":true}`)
	p.eventually(3*time.Minute, "the replacement under way", func() bool {
		rs := p.remediations(tenant)
		return len(rs) == 1 && rs[0].Status.Phase == "Replacing"
	})
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.done

	p2 := startRealKubeServer(t, dir, "--remediation-interval", "1s")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("remediations: %s", p2.raw("/api/v1/tenants/"+tenant+"/remediations"))
		}
	})
	var rem remediationObj
	p2.eventually(5*time.Minute, "the remediation finished after the restart", func() bool {
		rs := p2.remediations(tenant)
		if len(rs) == 0 {
			return false
		}
		rem = rs[0]
		return rem.Status.Phase == "Succeeded" || rem.Status.Phase == "Failed"
	})
	require.Equal(t, "Succeeded", rem.Status.Phase, rem.Status.Message)
	require.Len(t, p2.remediations(tenant), 1, "one remediation")
	replaced := 0
	for _, s := range rem.Status.Steps {
		if s.Name == "Replaced" {
			replaced++
		}
	}
	require.Equal(t, 1, replaced, "replaced once")
	requireNodesReady(t, tenantKube(t, p2, tenant), 3, realKubeFrom)
}

// TestDeadControlPlaneIsReplaced: a cluster of 3+1 on the real control
// plane (real etcd) whose control planes declare remediation. cp-2's node
// stops answering: its etcd member is removed through a healthy one, tofu
// replaces the machine, and the new cp-2 joins etcd again (three members,
// through the Talos API as talosctl asks) and registers its Node. cp-1's
// services go unhealthy during that replacement: it is not touched until
// cp-2's is done, then replaced the same way. The Kubernetes API answers writes
// throughout but for leader elections.
func TestDeadControlPlaneIsReplaced(t *testing.T) {
	t.Parallel()
	p := startRealKubeServer(t, t.TempDir(), "--remediation-interval", "1s")
	const tenant = "healcp"
	code, body := p.do("POST", "/api/v1/tenants", `{"metadata":{"name":"`+tenant+`"},"spec":{"talosVersion":"v1.13.0"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	for _, g := range []string{
		`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":3,"provider":"emulated",
			"remediation":{"unhealthyAfter":"5s","startupTimeout":"5m"}}}`,
		`{"metadata":{"name":"workers"},"spec":{"role":"worker","count":1,"provider":"emulated"}}`,
	} {
		code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/nodegroups", g)
		require.Equal(t, http.StatusCreated, code, body)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("remediations: %s", p.raw("/api/v1/tenants/"+tenant+"/remediations"))
		}
	})
	p.settled(tenant, 4)
	k := tenantKube(t, p, tenant)
	requireNodesReady(t, k, 4, realKubeFrom)
	ms := map[string]machine{}
	for _, m := range p.machines(tenant) {
		ms[m.Metadata.Name] = m
	}
	require.Len(t, etcdMembers(t, p, tenant, ms["cp-0"].Spec.Address), 3)

	ctx := t.Context()
	cms := k.CoreV1().ConfigMaps("default")
	i := 0
	writes := startProbe(ctx, func(ctx context.Context) (int, error) {
		i++
		name := fmt.Sprintf("probe-%d", i)
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			return 0, err
		}
		_, err := cms.Get(ctx, name, metav1.GetOptions{})
		return 0, err
	})
	p.setFaults(ms["cp-2"].Spec.Hostname, `{"unreachable":true}`)
	var rem remediationObj
	secondDown, touchedEarly := false, ""
	p.eventually(5*time.Minute, "cp-2 replaced", func() bool {
		rs := p.remediations(tenant)
		i := slices.IndexFunc(rs, func(r remediationObj) bool { return r.Spec.Machine == "cp-2" })
		if i < 0 {
			return false
		}
		rem = rs[i]
		final := rem.Status.Phase == "Succeeded" || rem.Status.Phase == "Failed"
		if len(rs) > 1 && !final {
			touchedEarly = fmt.Sprintf("%d remediations while cp-2's ran: %+v", len(rs), rs)
			return true
		}
		removed := slices.ContainsFunc(rem.Status.Steps, func(s remediationStep) bool { return s.Name == "EtcdMemberRemoved" })
		if !secondDown && removed && rem.Status.Phase != "Succeeded" && rem.Status.Phase != "Failed" {
			// A second control plane goes unhealthy during the
			// replacement, once cp-2's member is out: it must wait until
			// the first is done (one control plane at a time). Its
			// services report unhealthy while its etcd still runs, so the
			// new cp-2 can join. (A second *dead* control plane — etcd
			// down too — is two of three members gone: no quorum, nothing
			// can be replaced, and the replacement refuses, saying so.)
			p.setFaults(ms["cp-1"].Spec.Hostname, `{"unhealthy":true}`)
			secondDown = true
		}
		return rem.Status.Phase == "Succeeded" || rem.Status.Phase == "Failed"
	})
	require.Empty(t, touchedEarly)
	require.True(t, secondDown, "cp-1 was taken down during cp-2's replacement")
	require.Equal(t, "Succeeded", rem.Status.Phase, rem.Status.Message)
	require.Equal(t, "cp-2", rem.Spec.Machine)
	var steps []string
	for _, s := range rem.Status.Steps {
		steps = append(steps, s.Name)
	}
	require.Equal(t, []string{"Detected", "Replacing", "EtcdMemberRemoved", "NodeDeleted", "Replaced", "Joined"}, steps)
	// Then cp-1, once cp-2 is back (its etcd member with it: quorum holds).
	var second remediationObj
	p.eventually(5*time.Minute, "cp-1 replaced after cp-2", func() bool {
		for _, r := range p.remediations(tenant) {
			if r.Spec.Machine == "cp-1" {
				second = r
				return r.Status.Phase == "Succeeded" || r.Status.Phase == "Failed"
			}
		}
		return false
	})
	require.Equal(t, "Succeeded", second.Status.Phase, second.Status.Message)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.ElementsMatch(c, []string{ms["cp-0"].Spec.Hostname, ms["cp-1"].Spec.Hostname, ms["cp-2"].Spec.Hostname},
			etcdMembers(t, p, tenant, ms["cp-0"].Spec.Address), "the new cp-2 is a member again")
	}, 2*time.Minute, time.Second)
	requireNodesReady(t, k, 4, realKubeFrom)
	longest, _, runs, lastErr := writes.end()
	require.Positive(t, runs)
	require.Less(t, longest, 10*time.Second, "the API answered through both replacements but for leader elections (last error: %v)", lastErr)
	require.Len(t, p.remediations(tenant), 2)
	t.Logf("figures: two control-plane replacements one after the other, longest write outage %s over %d probes", longest.Round(10*time.Millisecond), runs)
}

// TestSickMetalWorkerIsReinstalled: metal machines are not rebuilt but
// reinstalled. A metal worker whose services go unhealthy is taken out,
// reset through the Talos API (back to maintenance mode) and given its
// day-0 config again by the metal path; once the reinstall has healed it
// (the test lifts the fault when the machine is reset), the Remediation
// Succeeds.
func TestSickMetalWorkerIsReinstalled(t *testing.T) {
	t.Parallel()
	p := startInfraServer(t, t.TempDir(), "--remediation-interval", "1s")
	hosts, rack := bootMaintenance(t, "rackr", 1, 2)
	code, body := p.do("POST", "/api/v1/providers", `{"metadata":{"name":"dc"},"spec":{"type":"metal"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	const tenant = "ironr"
	code, body = p.do("POST", "/api/v1/tenants", `{"metadata":{"name":"`+tenant+`"},"spec":{}}`)
	require.Equal(t, http.StatusCreated, code, body)
	code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/nodegroups",
		`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"dc","providerConfig":{"machines":[{"address":"`+hosts[0]+`"}]}}}`)
	require.Equal(t, http.StatusCreated, code, body)
	code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/nodegroups",
		`{"metadata":{"name":"workers"},"spec":{"role":"worker","count":2,"provider":"dc",
			"providerConfig":{"machines":[{"address":"`+hosts[1]+`"},{"address":"`+hosts[2]+`"}]},
			"remediation":{"unhealthyAfter":"3s","startupTimeout":"3m"}}}`)
	require.Equal(t, http.StatusCreated, code, body)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("remediations: %s", p.raw("/api/v1/tenants/"+tenant+"/remediations"))
		}
	})
	p.settled(tenant, 3)
	p.eventually(2*time.Minute, "every machine healthy", func() bool {
		code, h := p.do("GET", "/api/v1/tenants/"+tenant+"/health?refresh=true", "")
		return code == http.StatusOK && h["state"] == "Ready"
	})
	var node string
	for _, n := range nodesAt(t, rack) {
		if host, _, _ := strings.Cut(n["address"].(string), ":"); host == hosts[2] {
			node = n["name"].(string)
		}
	}
	require.NotEmpty(t, node)
	faults := func(body string) {
		req := rack.request(t, http.MethodPut, "/v1/nodes/"+node+"/faults", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	faults(`{"unhealthy":true}`)
	p.eventually(3*time.Minute, "workers-1 reset", func() bool {
		rs := p.remediations(tenant)
		return len(rs) == 1 && slices.ContainsFunc(rs[0].Status.Steps, func(s remediationStep) bool { return s.Name == "Reset" })
	})
	faults(`{}`) // the reinstall healed it
	var rem remediationObj
	p.eventually(3*time.Minute, "workers-1 reinstalled", func() bool {
		rem = p.remediations(tenant)[0]
		return rem.Status.Phase == "Succeeded" || rem.Status.Phase == "Failed"
	})
	require.Equal(t, "Succeeded", rem.Status.Phase, rem.Status.Message)
	require.Equal(t, "workers-1", rem.Spec.Machine)
	var steps []string
	for _, s := range rem.Status.Steps {
		steps = append(steps, s.Name)
	}
	require.Equal(t, []string{"Detected", "Replacing", "Drained", "NodeDeleted", "Reset", "Replaced", "Joined"}, steps)
	log := string(p.raw("/api/v1/tenants/" + tenant + "/applies/" + rem.Status.Apply + "/log"))
	require.Contains(t, log, "machine workers-1 ("+hosts[2]+"): config applied from maintenance mode")
	require.Len(t, p.remediations(tenant), 1)
}
