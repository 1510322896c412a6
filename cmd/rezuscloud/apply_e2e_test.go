//go:build e2e

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	talosmachine "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/stretchr/testify/require"
)

// These tests run the whole loop: a real server process with embedded NATS
// and the in-process Talos emulator, the real tofu binary with the emulated
// provider from the tools mirror, and the Talos API of the machines it builds.
// Run with `go test -tags e2e ./cmd/rezuscloud` after `go tool task tools`.

func (p *proc) mergePatch(path, body string) int {
	req, err := http.NewRequest("PATCH", p.url+path, strings.NewReader(body))
	require.NoError(p.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/merge-patch+json")
	resp, err := p.client.Do(req)
	require.NoError(p.t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func (p *proc) raw(path string) []byte {
	req, err := http.NewRequest("GET", p.url+path, nil)
	require.NoError(p.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := p.client.Do(req)
	require.NoError(p.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(p.t, err)
	require.Equal(p.t, http.StatusOK, resp.StatusCode, string(b))
	return b
}

type apply struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Operation string   `json:"operation"`
		Trigger   string   `json:"trigger"`
		Sources   []string `json:"sources"`
	} `json:"spec"`
	Status struct {
		Phase     string     `json:"phase"`
		StartTime *time.Time `json:"startTime"`
		EndTime   *time.Time `json:"endTime"`
		Error     string     `json:"error"`
		Resources struct {
			Added, Changed, Destroyed int
		} `json:"resources"`
	} `json:"status"`
}

func (p *proc) applies(tenant string) []apply {
	var l struct{ Items []apply }
	require.NoError(p.t, json.Unmarshal(p.raw("/api/v1/tenants/"+tenant+"/applies"), &l))
	return l.Items
}

type machine struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		NodeGroup, Role, Address, ProviderID, Hostname string
	} `json:"spec"`
}

func (p *proc) machines(tenant string) []machine {
	var l struct{ Items []machine }
	require.NoError(p.t, json.Unmarshal(p.raw("/api/v1/tenants/"+tenant+"/machines"), &l))
	return l.Items
}

func (p *proc) reconciled(tenant string) bool {
	code, m := p.do("GET", "/api/v1/tenants/"+tenant, "")
	if code != http.StatusOK {
		return false
	}
	st, _ := m["status"].(map[string]any)
	conds, _ := st["conditions"].([]any)
	for _, c := range conds {
		c := c.(map[string]any)
		if c["type"] == "Reconciled" && c["status"] == "True" {
			md := m["metadata"].(map[string]any)
			return st["observedGeneration"] == md["generation"]
		}
	}
	return false
}

// settled waits until the tenant's applies all finished and it is reconciled.
func (p *proc) settled(tenant string, wantMachines int) {
	p.t.Helper()
	p.eventually(3*time.Minute, fmt.Sprintf("tenant %s reconciled with %d machines", tenant, wantMachines), func() bool {
		if !p.reconciled(tenant) || len(p.machines(tenant)) != wantMachines {
			return false
		}
		for _, a := range p.applies(tenant) {
			if a.Status.EndTime == nil {
				return false
			}
		}
		return true
	})
}

func (p *proc) emulatorNodes() []map[string]any {
	_, prov := p.do("GET", "/api/v1/providers/emulated", "")
	endpoint := prov["spec"].(map[string]any)["config"].(map[string]any)["endpoint"].(string)
	resp, err := http.Get(endpoint + "/v1/nodes")
	require.NoError(p.t, err)
	defer resp.Body.Close()
	var l struct{ Items []map[string]any }
	require.NoError(p.t, json.NewDecoder(resp.Body).Decode(&l))
	return l.Items
}

func createCluster(t *testing.T, p *proc, tenant string, workers int) {
	t.Helper()
	code, body := p.do("POST", "/api/v1/tenants", `{"metadata":{"name":"`+tenant+`"},"spec":{}}`)
	require.Equal(t, http.StatusCreated, code, body)
	code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/nodegroups",
		`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/nodegroups",
		fmt.Sprintf(`{"metadata":{"name":"workers"},"spec":{"role":"worker","count":%d,"provider":"emulated"}}`, workers))
	require.Equal(t, http.StatusCreated, code, body)
}

// talosVersion asks a machine's Talos API for its version with the tenant's talosconfig.
func talosVersion(t *testing.T, p *proc, tenant, address string) error {
	tc, err := clientconfig.FromBytes(p.raw("/api/v1/tenants/" + tenant + "/talosconfig"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.WithConfig(tc), client.WithEndpoints(address))
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Version(ctx)
	return err
}

func TestApplyBuildsScalesAndDestroysACluster(t *testing.T) {
	t.Parallel()
	p := startInfraServer(t, t.TempDir())
	createCluster(t, p, "acme", 2)
	p.settled("acme", 3)

	as := p.applies("acme")
	require.Len(t, as, 1, "tenant + two node groups within the debounce make one apply")
	require.Equal(t, "Succeeded", as[0].Status.Phase, as[0].Status.Error)
	require.Equal(t, 3, as[0].Status.Resources.Added-1, "3 machines and the endpoint address")
	logText := string(p.raw("/api/v1/tenants/acme/applies/" + as[0].Metadata.Name + "/log"))
	require.Contains(t, logText, "Apply complete")
	require.NotContains(t, logText, "-----BEGIN", "no key or certificate of the machine configs reaches the log")

	ms := p.machines("acme")
	roles := map[string]int{}
	for _, m := range ms {
		require.NotEmpty(t, m.Spec.Address, m.Metadata.Name)
		require.Equal(t, "emulated://acme-"+m.Metadata.Name, m.Spec.ProviderID)
		roles[m.Spec.Role]++
		// The machine answers on its Talos API, with the tenant's PKI (mTLS).
		p.eventually(30*time.Second, "talos api of "+m.Metadata.Name, func() bool { return talosVersion(t, p, "acme", m.Spec.Address) == nil })
	}
	require.Equal(t, map[string]int{"controlplane": 1, "worker": 2}, roles)

	// Ten rapid edits make one more apply.
	for i := 0; i < 10; i++ {
		count := 3 + i%2 // ends at 4
		require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/acme/nodegroups/workers", fmt.Sprintf(`{"spec":{"count":%d}}`, count)))
	}
	p.settled("acme", 5)
	time.Sleep(3 * time.Second) // nothing else may be queued
	as = p.applies("acme")
	require.Len(t, as, 2, "ten patches in a burst make one apply")
	for _, a := range as {
		require.Equal(t, "Succeeded", a.Status.Phase)
	}
	require.Len(t, p.emulatorNodes(), 5)

	// Deleting the tenant destroys its machines, then the tenant goes.
	code, _ := p.do("DELETE", "/api/v1/tenants/acme", "")
	require.Equal(t, http.StatusAccepted, code)
	p.eventually(3*time.Minute, "tenant acme deleted", func() bool {
		code, _ := p.do("GET", "/api/v1/tenants/acme", "")
		return code == http.StatusNotFound
	})
	require.Empty(t, p.emulatorNodes(), "tofu destroy removed the emulated nodes")
	code, _ = p.do("GET", "/api/v1/tenants/acme/state", "")
	require.Equal(t, http.StatusNotFound, code, "the state is removed with the tenant")
}

func TestTwoTenantsApplyInParallel(t *testing.T) {
	t.Parallel()
	p := startInfraServer(t, t.TempDir())
	var wg sync.WaitGroup
	for _, tenant := range []string{"red", "blue"} {
		wg.Add(1)
		go func() { defer wg.Done(); createCluster(t, p, tenant, 1) }()
	}
	wg.Wait()
	p.settled("red", 2)
	p.settled("blue", 2)
	red, blue := p.applies("red"), p.applies("blue")
	require.Len(t, red, 1)
	require.Len(t, blue, 1)
	// The runs overlapped in time: each started before the other ended.
	r, b := red[0].Status, blue[0].Status
	require.True(t, r.StartTime.Before(*b.EndTime) && b.StartTime.Before(*r.EndTime),
		"red %s..%s, blue %s..%s", r.StartTime, r.EndTime, b.StartTime, b.EndTime)
}

func TestKillNineMidApplyRecovers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startInfraServer(t, dir)
	createCluster(t, p, "phoenix", 4)
	p.eventually(2*time.Minute, "the apply is changing things", func() bool {
		as := p.applies("phoenix")
		return len(as) == 1 && as[0].Status.Phase == "Applying"
	})
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.done

	p2 := startInfraServer(t, dir)
	p2.settled("phoenix", 5)
	as := p2.applies("phoenix")
	require.GreaterOrEqual(t, len(as), 2)
	var interrupted, succeeded int
	for _, a := range as {
		switch {
		case a.Status.Phase == "Failed" && strings.Contains(a.Status.Error, "interrupted"):
			interrupted++
		case a.Status.Phase == "Succeeded":
			succeeded++
		}
	}
	require.Equal(t, 1, interrupted, "the killed run is recorded as interrupted")
	require.GreaterOrEqual(t, succeeded, 1)
	require.Len(t, p2.emulatorNodes(), 5, "no machine was built twice")
	code, _ := p2.do("GET", "/api/v1/tenants/phoenix/state", "")
	require.Equal(t, http.StatusOK, code)
}

func TestCancelStopsARunAndTheLogFollowsIt(t *testing.T) {
	t.Parallel()
	p := startInfraServer(t, t.TempDir())
	createCluster(t, p, "halt", 12)
	var running apply
	p.eventually(2*time.Minute, "the apply is running", func() bool {
		as := p.applies("halt")
		if len(as) == 1 && (as[0].Status.Phase == "Planning" || as[0].Status.Phase == "Applying") {
			running = as[0]
			return true
		}
		return false
	})
	// Follow the log while the run goes on: the stream ends when the run does.
	logDone := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest("GET", p.url+"/api/v1/tenants/halt/applies/"+running.Metadata.Name+"/log?follow=true", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := p.client.Do(req)
		if err != nil {
			logDone <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		logDone <- string(b)
	}()
	code, body := p.do("POST", "/api/v1/tenants/halt/applies/"+running.Metadata.Name+"/cancel", "")
	if code == http.StatusConflict {
		t.Fatalf("the run finished before it could be canceled (make it longer): %v", body)
	}
	require.Equal(t, http.StatusAccepted, code, body)
	p.eventually(time.Minute, "the run is canceled", func() bool {
		for _, a := range p.applies("halt") {
			if a.Metadata.Name == running.Metadata.Name {
				return a.Status.Phase == "Canceled"
			}
		}
		return false
	})
	select {
	case text := <-logDone:
		require.Contains(t, text, "canceled by a user")
	case <-time.After(30 * time.Second):
		t.Fatal("the followed log did not end with the run")
	}
	code, body = p.do("POST", "/api/v1/tenants/halt/applies/"+running.Metadata.Name+"/cancel", "")
	require.Equal(t, http.StatusConflict, code, body)

	// The canceled run released its lock: the next change applies cleanly.
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/halt/nodegroups/workers", `{"spec":{"count":2}}`))
	p.settled("halt", 3)
	require.Len(t, p.emulatorNodes(), 3)
}

func TestMissingTofuFailsWithACondition(t *testing.T) {
	t.Parallel()
	p := startServer(t, t.TempDir(), "--with-emulator", "--tofu", "/nonexistent/tofu", "--apply-debounce", "200ms")
	p.eventually(60*time.Second, "the emulated provider is registered", func() bool {
		code, _ := p.do("GET", "/api/v1/providers/emulated", "")
		return code == http.StatusOK
	})
	createCluster(t, p, "notofu", 1)
	p.eventually(time.Minute, "Reconciled=False naming the missing tofu", func() bool {
		_, m := p.do("GET", "/api/v1/tenants/notofu", "")
		st, _ := m["status"].(map[string]any)
		conds, _ := st["conditions"].([]any)
		for _, c := range conds {
			c := c.(map[string]any)
			if c["type"] == "Reconciled" && c["status"] == "False" {
				msg, _ := c["message"].(string)
				return strings.Contains(msg, "tofu not found") && strings.Contains(msg, "/nonexistent/tofu") && st["phase"] == "Failed"
			}
		}
		return false
	})
}

// bootMaintenance runs `rezusctl boot --platform emulated` (built from this
// tree) for machines in maintenance mode, and returns their Talos API hosts
// and the URL of that emulator's HTTP API.
func bootMaintenance(t *testing.T, cluster string, controlPlanes, workers int) (hosts []string, api string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rezusctl")
	out, err := exec.Command("go", "build", "-o", bin, "../rezusctl").CombinedOutput()
	require.NoError(t, err, string(out))
	listen := freePort(t)
	cmd := exec.Command(bin, "boot", "--platform", "emulated", "--cluster", cluster,
		"--control-planes", strconv.Itoa(controlPlanes), "--workers", strconv.Itoa(workers), "--listen", listen)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	for len(hosts) < controlPlanes+workers && sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && strings.HasPrefix(f[0], cluster) {
			host, _, err := net.SplitHostPort(f[2])
			require.NoError(t, err, sc.Text())
			hosts = append(hosts, host)
		}
	}
	require.Len(t, hosts, controlPlanes+workers, "rezusctl boot printed the machines")
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return hosts, "http://" + listen
}

func nodesAt(t *testing.T, api string) []map[string]any {
	resp, err := http.Get(api + "/v1/nodes")
	require.NoError(t, err)
	defer resp.Body.Close()
	var l struct{ Items []map[string]any }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&l))
	return l.Items
}

func TestMetalFromMaintenanceModeToABootstrappedCluster(t *testing.T) {
	t.Parallel()
	p := startInfraServer(t, t.TempDir())
	hosts, rack := bootMaintenance(t, "rack", 3, 2)
	code, body := p.do("POST", "/api/v1/providers", `{"metadata":{"name":"dc1"},"spec":{"type":"metal"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	code, body = p.do("POST", "/api/v1/tenants", `{"metadata":{"name":"iron"},"spec":{}}`)
	require.Equal(t, http.StatusCreated, code, body)
	list := func(hs []string) string {
		var parts []string
		for _, h := range hs {
			parts = append(parts, `{"address":"`+h+`"}`)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	code, body = p.do("POST", "/api/v1/tenants/iron/nodegroups",
		`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":3,"provider":"dc1","providerConfig":{"machines":`+list(hosts[:3])+`}}}`)
	require.Equal(t, http.StatusCreated, code, body)
	code, body = p.do("POST", "/api/v1/tenants/iron/nodegroups",
		`{"metadata":{"name":"workers"},"spec":{"role":"worker","count":2,"provider":"dc1","providerConfig":{"machines":`+list(hosts[3:])+`,"installDisk":"/dev/nvme0n1"}}}`)
	require.Equal(t, http.StatusCreated, code, body)
	p.settled("iron", 5)

	// etcd was bootstrapped once, on the first control plane, and every
	// control plane joined: the cluster answers with the tenant's PKI.
	tc, err := clientconfig.FromBytes(p.raw("/api/v1/tenants/iron/talosconfig"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(ctx, client.WithConfig(tc), client.WithEndpoints(net.JoinHostPort(hosts[0], "50000")))
	require.NoError(t, err)
	defer c.Close()
	members, err := c.EtcdMemberList(ctx, &talosmachine.EtcdMemberListRequest{})
	require.NoError(t, err)
	require.Len(t, members.Messages[0].Members, 3)
	for _, m := range p.machines("iron") {
		require.NoError(t, talosVersion(t, p, "iron", m.Spec.Address), m.Metadata.Name)
	}
	_, tenant := p.do("GET", "/api/v1/tenants/iron", "")
	require.Contains(t, fmt.Sprint(tenant["status"]), "Bootstrapped")
	as := p.applies("iron")
	require.Len(t, as, 1)
	require.Contains(t, string(p.raw("/api/v1/tenants/iron/applies/"+as[0].Metadata.Name+"/log")), "config applied from maintenance mode")

	// A config change is applied in place; a machine left out of its group is reset.
	code, body = p.do("POST", "/api/v1/tenants/iron/configpatches",
		`{"metadata":{"name":"sysctl"},"spec":{"patch":"machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/iron/nodegroups/workers",
		`{"spec":{"count":1,"providerConfig":{"machines":`+list(hosts[3:4])+`}}}`))
	p.settled("iron", 4)
	as = p.applies("iron")
	require.Len(t, as, 2)
	last := as[0]
	if as[1].Status.StartTime.After(*last.Status.StartTime) {
		last = as[1]
	}
	logText := string(p.raw("/api/v1/tenants/iron/applies/" + last.Metadata.Name + "/log"))
	require.Contains(t, logText, "config applied in place")
	require.Contains(t, logText, "left its node group: resetting it")
	removed := hosts[4]
	p.eventually(30*time.Second, "the removed machine is reset into maintenance mode", func() bool {
		for _, n := range nodesAt(t, rack) {
			if strings.HasPrefix(n["address"].(string), removed+":") {
				return n["phase"] == "maintenance"
			}
		}
		return false
	})

	// Deleting the tenant resets every machine; then the tenant goes.
	code, _ = p.do("DELETE", "/api/v1/tenants/iron", "")
	require.Equal(t, http.StatusAccepted, code)
	p.eventually(2*time.Minute, "tenant iron deleted", func() bool {
		code, _ := p.do("GET", "/api/v1/tenants/iron", "")
		return code == http.StatusNotFound
	})
	p.eventually(30*time.Second, "every machine back in maintenance mode", func() bool {
		for _, n := range nodesAt(t, rack) {
			if n["phase"] != "maintenance" {
				return false
			}
		}
		return true
	})
}

type upgradeRun struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Status struct {
		Phase    string `json:"phase"`
		Reason   string `json:"reason"`
		Machines []struct {
			Name, Phase, To string
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
	var hist struct {
		Items []struct {
			Object upgradeRun `json:"object"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal(p2.raw("/api/v1/events?kind=Upgrade&tenant=roll&name="+run.Metadata.Name+"&since=0&limit=10000"), &hist))
	entered := map[string]int{}
	last := map[string]string{}
	for _, ev := range hist.Items {
		for _, m := range ev.Object.Status.Machines {
			if m.Phase == "Upgrading" && last[m.Name] != "Upgrading" {
				entered[m.Name]++
			}
			last[m.Name] = m.Phase
		}
	}
	require.Len(t, entered, 4)
	for name, n := range entered {
		require.Equal(t, 1, n, "machine %s was upgraded %d times", name, n)
	}
	// The apply held back during the upgrade runs afterwards and changes nothing.
	p2.settled("roll", 4)
}
