//go:build e2e

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/stretchr/testify/require"
)

// patchStatus sends a merge patch and decodes the answer.
func (p *proc) patchStatus(path, body string) (int, map[string]any) {
	req, err := http.NewRequest("PATCH", p.url+path, strings.NewReader(body))
	require.NoError(p.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/merge-patch+json")
	resp, err := p.client.Do(req)
	require.NoError(p.t, err)
	defer resp.Body.Close()
	var m map[string]any
	require.NoError(p.t, json.NewDecoder(resp.Body).Decode(&m))
	return resp.StatusCode, m
}

// etcdWatch polls the emulator's node statuses of one tenant while a
// scale-down runs: what each control plane looked like last, and whether
// etcd ever had a member set without quorum.
type etcdWatch struct {
	mu       sync.Mutex
	last     map[string]map[string]any // node -> its last status while it existed
	gone     map[string]map[string]any // node -> its last status before it vanished
	polls    int
	problems []string
	stop     chan struct{}
	done     chan struct{}
}

func watchEtcd(endpoint, token, tenant string) *etcdWatch {
	w := &etcdWatch{last: map[string]map[string]any{}, gone: map[string]map[string]any{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
				w.poll(endpoint, token, tenant)
			}
		}
	}()
	return w
}

func (w *etcdWatch) poll(endpoint, token, tenant string) {
	req, err := http.NewRequest(http.MethodGet, endpoint+"/v1/nodes", nil)
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	var l struct{ Items []map[string]any }
	if json.NewDecoder(resp.Body).Decode(&l) != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.polls++
	seen := map[string]bool{}
	members, healthy := 0, 0
	for _, n := range l.Items {
		name, _ := n["name"].(string)
		if n["cluster"] != tenant || n["role"] != "controlplane" {
			continue
		}
		seen[name] = true
		w.last[name] = n
		if left, _ := n["etcdLeft"].(bool); !left {
			members++
			if n["phase"] == "running" {
				healthy++
			}
		}
	}
	for name, st := range w.last {
		if !seen[name] {
			w.gone[name] = st
			delete(w.last, name)
		}
	}
	if members > 0 && healthy < members/2+1 {
		w.problems = append(w.problems, fmt.Sprintf("poll %d: %d healthy of %d etcd members", w.polls, healthy, members))
	}
}

func (w *etcdWatch) finish() {
	close(w.stop)
	<-w.done
}

// etcdMembers asks a control plane's Talos API for the member list.
func etcdMembers(t *testing.T, p *proc, tenant, address string) []string {
	tc, err := clientconfig.FromBytes(p.raw("/api/v1/tenants/" + tenant + "/talosconfig"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.WithConfig(tc), client.WithEndpoints(address))
	require.NoError(t, err)
	defer c.Close()
	resp, err := c.EtcdMemberList(ctx, &machineapi.EtcdMemberListRequest{})
	require.NoError(t, err)
	var out []string
	for _, m := range resp.GetMessages() {
		for _, mb := range m.GetMembers() {
			out = append(out, mb.GetHostname())
		}
	}
	return out
}

// TestScaleDownControlPlanesKeepsQuorum: a tenant of 3 control planes and a
// worker built by tofu; 3 → 2 is refused with a Status; 3 → 1 takes two
// members out of etcd one at a time before tofu destroys them, with quorum
// at every step; one member is left, healthy, and the tenant's health is Ready.
func TestScaleDownControlPlanesKeepsQuorum(t *testing.T) {
	t.Parallel()
	p := startInfraServer(t, t.TempDir())
	const tenant = "shrink"
	code, body := p.do("POST", "/api/v1/tenants", `{"metadata":{"name":"`+tenant+`"},"spec":{}}`)
	require.Equal(t, http.StatusCreated, code, body)
	code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/nodegroups", `{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":3,"provider":"emulated"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/nodegroups", `{"metadata":{"name":"workers"},"spec":{"role":"worker","count":1,"provider":"emulated"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	p.settled(tenant, 4)
	healthy := func() bool {
		code, h := p.do("GET", "/api/v1/tenants/"+tenant+"/health?refresh=true", "")
		return code == http.StatusOK && h["state"] == "Ready"
	}
	p.eventually(2*time.Minute, "the cluster is healthy", healthy)
	t.Cleanup(func() {
		if t.Failed() {
			for _, a := range p.applies(tenant) {
				t.Logf("apply %s %s: %s\n%s", a.Metadata.Name, a.Status.Phase, a.Status.Error, p.raw("/api/v1/tenants/"+tenant+"/applies/"+a.Metadata.Name+"/log"))
			}
		}
	})

	// 3 → 2: a Status 422 naming spec.count; the group keeps 3.
	code, st := p.patchStatus("/api/v1/tenants/"+tenant+"/nodegroups/cp", `{"spec":{"count":2}}`)
	require.Equal(t, http.StatusUnprocessableEntity, code, st)
	require.Equal(t, "Status", st["kind"])
	require.Equal(t, "Invalid", st["reason"])
	causes := st["details"].(map[string]any)["causes"].([]any)
	require.Equal(t, "spec.count", causes[0].(map[string]any)["field"])
	// Deleting the control-plane group while the worker stays: refused too.
	code, st = p.do("DELETE", "/api/v1/tenants/"+tenant+"/nodegroups/cp", "")
	require.Equal(t, http.StatusUnprocessableEntity, code, st)
	require.Contains(t, fmt.Sprint(st["message"]), "would remove all 3 control planes")

	// 3 → 1, watched through the emulator.
	url, tok := p.emulatorAPI()
	watch := watchEtcd(url, tok, tenant)
	before := len(p.applies(tenant))
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/"+tenant+"/nodegroups/cp", `{"spec":{"count":1}}`))
	p.eventually(3*time.Minute, "the scale-down applied", func() bool {
		as := p.applies(tenant)
		return len(as) > before && as[len(as)-1].Status.EndTime != nil && len(p.machines(tenant)) == 2
	})
	watch.finish()
	as := p.applies(tenant)
	last := as[len(as)-1]
	require.Equal(t, "Succeeded", last.Status.Phase, last.Status.Error)
	require.Equal(t, 2, last.Status.Resources.Destroyed)

	// The apply log: two members left, one at a time, quorum at every step, before tofu destroyed them.
	log := string(p.raw("/api/v1/tenants/" + tenant + "/applies/" + last.Metadata.Name + "/log"))
	steps := regexp.MustCompile(`step (\d)/2: (cp-\d) left etcd; (\d+) members remain, (\d+) healthy \(quorum (\d+)\)`).FindAllStringSubmatch(log, -1)
	require.Len(t, steps, 2, log)
	require.Equal(t, []string{"cp-2", "cp-1"}, []string{steps[0][2], steps[1][2]}, "highest index first")
	for i, s := range steps {
		remain, _ := strconv.Atoi(s[3])
		ok, _ := strconv.Atoi(s[4])
		quorum, _ := strconv.Atoi(s[5])
		require.Equal(t, 2-i, remain, s[0])
		require.GreaterOrEqual(t, ok, quorum, s[0])
	}
	require.Less(t, strings.Index(log, "step 2/2"), strings.Index(log, "Destroying"), "etcd first, then tofu:\n%s", log)

	// The emulator saw both leave etcd before they were destroyed, and never a member set without quorum.
	watch.mu.Lock()
	require.Empty(t, watch.problems)
	for _, n := range []string{tenant + "-cp-1", tenant + "-cp-2"} {
		st, ok := watch.gone[n]
		require.True(t, ok, "%s was destroyed while watched (%d polls)", n, watch.polls)
		require.Equal(t, true, st["etcdLeft"], "%s left etcd before it was destroyed: %v", n, st)
	}
	watch.mu.Unlock()

	// One member left, healthy; the tenant's health (what `rezusctl health` shows) Ready.
	var cp0 machine
	for _, m := range p.machines(tenant) {
		if m.Metadata.Name == "cp-0" {
			cp0 = m
		}
	}
	require.NotEmpty(t, cp0.Spec.Address)
	require.Equal(t, []string{tenant + "-cp-0"}, etcdMembers(t, p, tenant, cp0.Spec.Address))
	p.eventually(2*time.Minute, "the cluster is healthy with one control plane", healthy)

	// Workers scale down freely, and are reset gracefully before tofu destroys them.
	before = len(p.applies(tenant))
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/"+tenant+"/nodegroups/workers", `{"spec":{"count":0}}`))
	p.eventually(3*time.Minute, "the worker is gone", func() bool {
		as := p.applies(tenant)
		return len(as) > before && as[len(as)-1].Status.EndTime != nil && len(p.machines(tenant)) == 1
	})
	as = p.applies(tenant)
	last = as[len(as)-1]
	require.Equal(t, "Succeeded", last.Status.Phase, last.Status.Error)
	log = string(p.raw("/api/v1/tenants/" + tenant + "/applies/" + last.Metadata.Name + "/log"))
	reset := strings.Index(log, "scale-down: worker workers-0 reset")
	require.GreaterOrEqual(t, reset, 0, log)
	require.Less(t, reset, strings.Index(log, "Destroying"), "reset first, then tofu:\n%s", log)
}
