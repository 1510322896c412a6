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
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	talosmachine "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/stretchr/testify/require"
)

// bootMaintenance runs `rezusctl boot --platform emulated` (built from this
// tree) for machines in maintenance mode, and returns their Talos API hosts
// and the URL of that emulator's HTTP API.
// bootAPI is the HTTP API of a `rezusctl boot --platform emulated`
// emulator: its address and the bearer token boot printed.
type bootAPI struct{ url, token string }

// request is a request to the boot emulator's API, with its token.
func (a bootAPI) request(t *testing.T, method, path string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, a.url+path, body)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+a.token)
	return req
}

func bootMaintenance(t *testing.T, cluster string, controlPlanes, workers int) (hosts []string, api bootAPI) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rezusctl")
	out, err := exec.Command("go", "build", "-o", bin, "../rezusctl").CombinedOutput()
	require.NoError(t, err, string(out))
	cmd := exec.Command(bin, "boot", "--platform", "emulated", "--cluster", cluster,
		"--control-planes", strconv.Itoa(controlPlanes), "--workers", strconv.Itoa(workers), "--listen", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	apiRE := regexp.MustCompile(`emulator API: (http://\S+)/v1/nodes \(Authorization: Bearer ([0-9a-f]{64})\)`)
	for (len(hosts) < controlPlanes+workers || api.token == "") && sc.Scan() {
		if m := apiRE.FindStringSubmatch(sc.Text()); m != nil {
			api = bootAPI{url: m[1], token: m[2]}
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && strings.HasPrefix(f[0], cluster) {
			host, _, err := net.SplitHostPort(f[2])
			require.NoError(t, err, sc.Text())
			hosts = append(hosts, host)
		}
	}
	require.Len(t, hosts, controlPlanes+workers, "rezusctl boot printed the machines")
	require.NotEmpty(t, api.token, "rezusctl boot printed its API and token")
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return hosts, api
}

func nodesAt(t *testing.T, api bootAPI) []map[string]any {
	resp, err := http.DefaultClient.Do(api.request(t, http.MethodGet, "/v1/nodes", nil))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
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
	// A control plane joins etcd once it installed and rebooted into its
	// config, which can be after the apply run ended (as on real Talos).
	var members *talosmachine.EtcdMemberListResponse
	p.eventually(60*time.Second, "every control plane is an etcd member", func() bool {
		members, err = c.EtcdMemberList(ctx, &talosmachine.EtcdMemberListRequest{})
		return err == nil && len(members.Messages[0].Members) == 3
	})
	require.NoError(t, err)
	require.Len(t, members.Messages[0].Members, 3)
	// A worker answers once a control plane issued its certificate: under
	// load that can be after the run ended.
	for _, m := range p.machines("iron") {
		p.eventually(60*time.Second, m.Metadata.Name+" answers with the tenant's PKI", func() bool {
			return talosVersion(t, p, "iron", m.Spec.Address) == nil
		})
	}
	_, tenant := p.do("GET", "/api/v1/tenants/iron", "")
	require.Contains(t, fmt.Sprint(tenant["status"]), "Bootstrapped")
	as := p.applies("iron")
	require.Len(t, as, 1)
	require.Contains(t, string(p.raw("/api/v1/tenants/iron/applies/"+as[0].Metadata.Name+"/log")), "config applied from maintenance mode")

	// Day 0 was the maintenance-mode apply: each machine's annotation is the
	// hash of what its node holds.
	hashes := func() map[string]string {
		out := map[string]string{}
		for _, n := range nodesAt(t, rack) {
			host, _, _ := net.SplitHostPort(n["address"].(string))
			h, _ := n["configHash"].(string)
			out[host] = h
		}
		return out
	}
	day0 := hashes()
	for name, m := range p.machineConfigs("iron") {
		require.Equal(t, "Day0", m.reason, name)
	}
	addresses := map[string]string{}
	for _, m := range p.machines("iron") {
		addresses[m.Metadata.Name] = m.Spec.Address
		require.Equal(t, day0[m.Spec.Address], p.machineConfigs("iron")[m.Metadata.Name].hash, m.Metadata.Name)
	}

	// A config change reaches the running machines through the config
	// controller (one day-2 path for every provider); a machine left out of
	// its group is reset.
	code, body = p.do("POST", "/api/v1/tenants/iron/configpatches",
		`{"metadata":{"name":"sysctl"},"spec":{"patch":"machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	p.eventually(2*time.Minute, "the patch reaches every machine", func() bool {
		now := hashes()
		for name, m := range p.machineConfigs("iron") {
			a := addresses[name]
			if now[a] == day0[a] || now[a] != m.hash || !m.upToDate || m.reason != "AppliedWithReboot" {
				return false
			}
		}
		return true
	})
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/iron/nodegroups/workers",
		`{"spec":{"count":1,"providerConfig":{"machines":`+list(hosts[3:4])+`}}}`))
	p.settled("iron", 4)
	// Three runs: the build, the patch's (nothing to do: day 2 is the config
	// controller's), the scale-down.
	as = p.applies("iron")
	require.Len(t, as, 3)
	last := as[0]
	for _, a := range as {
		if a.Status.StartTime.After(*last.Status.StartTime) {
			last = a
		}
		if strings.Contains(strings.Join(a.Spec.Sources, " "), "ConfigPatch/") {
			require.NotContains(t, string(p.raw("/api/v1/tenants/iron/applies/"+a.Metadata.Name+"/log")), "config applied",
				"a metal run gives configs in maintenance mode only")
		}
	}
	logText := string(p.raw("/api/v1/tenants/iron/applies/" + last.Metadata.Name + "/log"))
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
