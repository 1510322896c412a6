//go:build e2e

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// talosctlExtensions lists the extensions a machine reports to the real
// talosctl (`talosctl get extensions`), by name.
func talosctlExtensions(t *testing.T, p *proc, tenant string, m machine) []string {
	t.Helper()
	tc := filepath.Join(t.TempDir(), "talosconfig")
	require.NoError(t, os.WriteFile(tc, p.raw("/api/v1/tenants/"+tenant+"/talosconfig"), 0o600))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	host, _, _ := strings.Cut(m.Spec.Address, ":")
	out, err := exec.CommandContext(ctx, tofutest.Talosctl(t), "--talosconfig", tc, "--endpoints", m.Spec.Address, "--nodes", host,
		"get", "extensions", "-o", "jsonpath={.spec.metadata.name}").CombinedOutput()
	require.NoError(t, err, string(out))
	return strings.Fields(string(out))
}

// nodeImages are the installer images the emulated machines of a tenant
// booted, by machine name.
func nodeImages(p *proc, tenant string) map[string]string {
	nodes := p.emulatorNodes()
	out := map[string]string{}
	for _, m := range p.machines(tenant) {
		for _, n := range nodes {
			if addr, _ := n["address"].(string); addr == m.Spec.Address || strings.HasPrefix(addr, m.Spec.Address+":") {
				out[m.Metadata.Name], _ = n["image"].(string)
			}
		}
	}
	return out
}

// stepPhases are the phases each machine of an upgrade run went through,
// in order, from the run's events; and the largest number of machines
// between Upgrading and Done at once.
func stepPhases(t *testing.T, p *proc, tenant, run string) (map[string][]string, int) {
	t.Helper()
	var hist struct {
		Items []struct {
			Object upgradeRun `json:"object"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal(p.raw("/api/v1/events?kind=Upgrade&tenant="+tenant+"&name="+run+"&since=0&limit=10000"), &hist))
	phases := map[string][]string{}
	most := 0
	for _, ev := range hist.Items {
		away := 0
		for _, m := range ev.Object.Status.Machines {
			if ps := phases[m.Name]; len(ps) == 0 || ps[len(ps)-1] != m.Phase {
				phases[m.Name] = append(ps, m.Phase)
			}
			if m.Phase == "Upgrading" || m.Phase == "Rebooting" || m.Phase == "Verifying" {
				away++
			}
		}
		most = max(most, away)
	}
	return phases, most
}

// TestSchematicReimageSurvivesKillNine: a node group declaring
// siderolabs/iscsi-tools builds machines that report it to talosctl; adding
// siderolabs/util-linux-tools re-images them in place one at a time
// (drained, the same Talos version, the new installer) while the other
// groups are left alone, through a kill -9 of the server mid-run; a Talos
// upgrade of the tenant then keeps each group's extensions.
func TestSchematicReimageSurvivesKillNine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startRealKubeServer(t, dir)
	const tenant = "ext"
	code, body := p.do("POST", "/api/v1/tenants", `{"metadata":{"name":"`+tenant+`"},"spec":{"talosVersion":"v1.13.0"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	// Refused before anything is built: a bad name, a duplicate, an empty
	// kernel argument, and a schematic beside an explicit installImage.
	code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/nodegroups", `{"metadata":{"name":"bad"},"spec":{"role":"worker","count":1,"provider":"emulated",
		"providerConfig":{"installImage":"ghcr.io/acme/installer:v1.13.0"},
		"schematic":{"extensions":["iscsi-tools","siderolabs/gvisor","siderolabs/gvisor"],"extraKernelArgs":[""]}}}`)
	require.Equal(t, http.StatusUnprocessableEntity, code, body)
	var fields []string
	for _, c := range body["details"].(map[string]any)["causes"].([]any) {
		fields = append(fields, c.(map[string]any)["field"].(string))
	}
	require.ElementsMatch(t, []string{"spec.schematic", "spec.schematic.extensions[0]", "spec.schematic.extensions[2]", "spec.schematic.extraKernelArgs[0]"}, fields)

	for _, g := range []string{
		`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`,
		`{"metadata":{"name":"storage"},"spec":{"role":"worker","count":2,"provider":"emulated","schematic":{"extensions":["siderolabs/iscsi-tools"]}}}`,
		`{"metadata":{"name":"plain"},"spec":{"role":"worker","count":1,"provider":"emulated"}}`,
	} {
		code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/nodegroups", g)
		require.Equal(t, http.StatusCreated, code, body)
	}
	p.settled(tenant, 4)
	k := tenantKube(t, p, tenant)
	requireNodesReady(t, k, 4, realKubeFrom)

	iscsi := domain.Schematic{Extensions: []string{"siderolabs/iscsi-tools"}}
	both := domain.Schematic{Extensions: []string{"siderolabs/iscsi-tools", "siderolabs/util-linux-tools"}}
	before := nodeImages(p, tenant)
	for _, m := range p.machines(tenant) {
		exts := talosctlExtensions(t, p, tenant, m)
		if m.Spec.NodeGroup == "storage" {
			require.Equal(t, domain.FactoryInstaller(domain.DefaultImageFactory, &iscsi, "v1.13.0"), before[m.Metadata.Name])
			require.Equal(t, []string{"iscsi-tools", "schematic"}, exts, m.Metadata.Name)
		} else {
			require.Equal(t, domain.FactoryInstaller(domain.DefaultImageFactory, nil, "v1.13.0"), before[m.Metadata.Name])
			require.Equal(t, []string{"schematic"}, exts, m.Metadata.Name)
		}
	}
	// What the health probe saw is the machine's status.
	p.eventually(time.Minute, "the machines' status shows their schematic", func() bool {
		p.do("GET", "/api/v1/tenants/"+tenant+"/health?refresh=true", "")
		_, m := p.do("GET", "/api/v1/tenants/"+tenant+"/machines/storage-0", "")
		st, _ := m["status"].(map[string]any)
		return st["schematic"] == iscsi.ID() && strings.Contains(strings.ToLower(jsonString(st["extensions"])), "iscsi-tools")
	})

	// Adding util-linux-tools re-images the storage machines.
	require.Equal(t, http.StatusOK, p.mergePatch("/api/v1/tenants/"+tenant+"/nodegroups/storage",
		`{"spec":{"schematic":{"extensions":["siderolabs/util-linux-tools","siderolabs/iscsi-tools"]}}}`))
	p.eventually(4*time.Minute, "one storage machine re-imaged, the other not yet", func() bool {
		us := p.upgrades(tenant)
		if len(us) != 1 {
			return false
		}
		done := 0
		for _, m := range us[0].Status.Machines {
			if m.Phase == "Done" {
				done++
			}
		}
		return done == 1
	})
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.done

	p2 := startRealKubeServer(t, dir)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("upgrades: %s", p2.raw("/api/v1/tenants/"+tenant+"/upgrades"))
			t.Logf("emulator nodes: %v", p2.emulatorNodes())
		}
	})
	p2.eventually(5*time.Minute, "the re-image finished", func() bool {
		us := p2.upgrades(tenant)
		return len(us) == 1 && (us[0].Status.Phase == "Succeeded" || us[0].Status.Phase == "Failed")
	})
	run := p2.upgrades(tenant)[0]
	require.Equal(t, "Succeeded", run.Status.Phase, run.Status.Reason)
	require.True(t, strings.HasPrefix(run.Metadata.Name, "reimage-v1-13-0-"), run.Metadata.Name)
	require.Len(t, run.Status.Machines, 2, "only the storage group's machines")
	phases, most := stepPhases(t, p2, tenant, run.Metadata.Name)
	require.Equal(t, 1, most, "one machine at a time")
	for name, ps := range phases {
		// Rebooting is not recorded when the kill lands between the upgrade
		// call and that record: the resumed step finds the node back on the
		// target and verifies it.
		ps = slices.DeleteFunc(slices.Clone(ps), func(p string) bool { return p == "Rebooting" })
		require.Equal(t, []string{"Pending", "Draining", "Upgrading", "Verifying", "Done"}, ps, "%s was drained, then re-imaged", name)
	}
	entered := upgradesEntered(t, p2, tenant, run.Metadata.Name)
	require.Len(t, entered, 2)
	for name, n := range entered {
		require.Equal(t, 1, n, "machine %s was re-imaged %d times", name, n)
	}
	after := nodeImages(p2, tenant)
	for _, m := range p2.machines(tenant) {
		if m.Spec.NodeGroup == "storage" {
			require.Equal(t, domain.FactoryInstaller(domain.DefaultImageFactory, &both, "v1.13.0"), after[m.Metadata.Name], "the same Talos version, the new installer")
			require.Equal(t, []string{"iscsi-tools", "schematic", "util-linux-tools"}, sortedCopy(talosctlExtensions(t, p2, tenant, m)))
		} else {
			require.Equal(t, before[m.Metadata.Name], after[m.Metadata.Name], "%s untouched", m.Metadata.Name)
		}
	}
	k = tenantKube(t, p2, tenant)
	requireNodesReady(t, k, 4, realKubeFrom)

	// A Talos upgrade keeps every group's schematic.
	require.Equal(t, http.StatusOK, p2.mergePatch("/api/v1/tenants/"+tenant, `{"spec":{"talosVersion":"v1.13.1"}}`))
	p2.eventually(6*time.Minute, "the Talos upgrade finished", func() bool {
		for _, u := range p2.upgrades(tenant) {
			if strings.HasPrefix(u.Metadata.Name, "talos-") {
				return u.Status.Phase == "Succeeded" || u.Status.Phase == "Failed"
			}
		}
		return false
	})
	for _, u := range p2.upgrades(tenant) {
		if strings.HasPrefix(u.Metadata.Name, "talos-") {
			require.Equal(t, "Succeeded", u.Status.Phase, u.Status.Reason)
		}
	}
	upgraded := nodeImages(p2, tenant)
	for _, m := range p2.machines(tenant) {
		want := domain.FactoryInstaller(domain.DefaultImageFactory, nil, "v1.13.1")
		if m.Spec.NodeGroup == "storage" {
			want = domain.FactoryInstaller(domain.DefaultImageFactory, &both, "v1.13.1")
			require.Equal(t, []string{"iscsi-tools", "schematic", "util-linux-tools"}, sortedCopy(talosctlExtensions(t, p2, tenant, m)))
		}
		require.Equal(t, want, upgraded[m.Metadata.Name], m.Metadata.Name)
	}
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	slices.Sort(out)
	return out
}

// TestSchematicDriftIsCorrected: behind RezusCloud's back, the real
// talosctl upgrades a storage machine to the vanilla installer, dropping the
// iscsi-tools its group declares. The tenant's drift check (action correct)
// finds it and starts a re-image run of the storage group, which puts the
// declared installer back on that machine alone; the check is then in sync.
func TestSchematicDriftIsCorrected(t *testing.T) {
	t.Parallel()
	p := startInfraServer(t, t.TempDir(), "--resync", "1s", "--drift-min-interval", "10s", "--drift-interval", "0", "--emulator-kube", "off")
	const tenant = "heal"
	code, body := p.do("POST", "/api/v1/tenants", `{"metadata":{"name":"`+tenant+`"},"spec":{"talosVersion":"v1.13.0","driftCheck":{"interval":"10s","action":"correct"}}}`)
	require.Equal(t, http.StatusCreated, code, body)
	for _, g := range []string{
		`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`,
		`{"metadata":{"name":"storage"},"spec":{"role":"worker","count":1,"provider":"emulated","schematic":{"extensions":["siderolabs/iscsi-tools"]}}}`,
	} {
		code, body = p.do("POST", "/api/v1/tenants/"+tenant+"/nodegroups", g)
		require.Equal(t, http.StatusCreated, code, body)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("tenant: %s", p.raw("/api/v1/tenants/"+tenant))
			t.Logf("upgrades: %s", p.raw("/api/v1/tenants/"+tenant+"/upgrades"))
		}
	})
	p.settled(tenant, 2)
	p.waitConfigs(tenant, tenant+" configured")
	p.eventually(driftWithin, "checked and in sync", func() bool {
		d := p.drift(tenant)
		return d.Reason == "InSync" && d.Status == "False"
	})
	iscsi := domain.Schematic{Extensions: []string{"siderolabs/iscsi-tools"}}
	before := nodeImages(p, tenant)
	require.Equal(t, domain.FactoryInstaller(domain.DefaultImageFactory, &iscsi, "v1.13.0"), before["storage-0"])

	var storage machine
	for _, m := range p.machines(tenant) {
		if m.Metadata.Name == "storage-0" {
			storage = m
		}
	}
	tc := filepath.Join(t.TempDir(), "talosconfig")
	require.NoError(t, os.WriteFile(tc, p.raw("/api/v1/tenants/"+tenant+"/talosconfig"), 0o600))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	host, _, _ := strings.Cut(storage.Spec.Address, ":")
	vanilla := domain.FactoryInstaller(domain.DefaultImageFactory, nil, "v1.13.0")
	out, err := exec.CommandContext(ctx, tofutest.Talosctl(t), "--talosconfig", tc, "--endpoints", storage.Spec.Address, "--nodes", host,
		"upgrade", "--image", vanilla, "--drain=false", "--wait=false").CombinedOutput()
	require.NoError(t, err, string(out))
	p.eventually(time.Minute, "storage-0 runs the vanilla installer", func() bool { return nodeImages(p, tenant)["storage-0"] == vanilla })

	p.eventually(3*time.Minute, "the drift re-image finished", func() bool {
		for _, u := range p.upgrades(tenant) {
			if strings.HasPrefix(u.Metadata.Name, "reimage-v1-13-0-drift-") {
				return u.Status.Phase == "Succeeded" || u.Status.Phase == "Failed"
			}
		}
		return false
	})
	runs := p.upgrades(tenant)
	require.Len(t, runs, 1, "one run: the drift's")
	require.Equal(t, "reimage-v1-13-0-drift-1", runs[0].Metadata.Name)
	require.Equal(t, "Succeeded", runs[0].Status.Phase, runs[0].Status.Reason)
	require.Len(t, runs[0].Status.Machines, 1, "the storage group's machine alone")
	require.Equal(t, "storage-0", runs[0].Status.Machines[0].Name)
	after := nodeImages(p, tenant)
	require.Equal(t, before["storage-0"], after["storage-0"], "the declared installer is back")
	require.Equal(t, before["cp-0"], after["cp-0"], "the control plane untouched")
	require.Equal(t, []string{"iscsi-tools", "schematic"}, sortedCopy(talosctlExtensions(t, p, tenant, storage)))
	p.eventually(driftWithin, "in sync again", func() bool {
		d := p.drift(tenant)
		return d.Status == "False" && d.Reason == "InSync"
	})
	require.Len(t, p.upgrades(tenant), 1, "no second run")
}
