//go:build e2e

package main

import (
	"context"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/stretchr/testify/require"
)

// talosconfigAnswers reports whether a node at address answers the talosconfig raw.
func talosconfigAnswers(ctx context.Context, raw []byte, address string) error {
	tc, err := clientconfig.FromBytes(raw)
	if err != nil {
		return err
	}
	ep := net.JoinHostPort(address, "50000")
	c, err := client.New(ctx, client.WithConfig(tc), client.WithEndpoints(ep))
	if err != nil {
		return err
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = c.Version(cctx)
	return err
}

// TestRotationSurvivesKillNine rotates the Talos and Kubernetes CAs of a
// 1+1 cluster built by tofu and kills the server (kill -9) once in each
// stage — accept, swap and drop — while a machine's config apply is
// refused by its node (an emulator fault, so the run is caught in the
// stage for sure). After each restart the run goes on at its stage; it
// Succeeds, every machine answers a talosconfig issued now and refuses the
// one from before, and the tenant is healthy on the new CAs.
func TestRotationSurvivesKillNine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startInfraServer(t, dir, "--emulator-kube", "off")
	const tenant = "rot"
	createCluster(t, p, tenant, 1)
	p.settled(tenant, 2)
	p.eventually(2*time.Minute, "the cluster is healthy", func() bool {
		code, h := p.do("GET", "/api/v1/tenants/"+tenant+"/health?refresh=true", "")
		return code == http.StatusOK && h["state"] == "Ready"
	})
	// The emulator's node of each machine, by address.
	var cp, worker string
	byAddr := map[string]string{}
	for _, n := range p.emulatorNodes() {
		host, _, _ := net.SplitHostPort(n["address"].(string))
		byAddr[host] = n["name"].(string)
	}
	machineOf := map[string]string{}
	for _, m := range p.machines(tenant) {
		node := byAddr[m.Spec.Address]
		machineOf[node] = m.Metadata.Name
		if m.Spec.Role == "controlplane" {
			cp = node
		} else {
			worker = node
		}
	}
	require.NotEmpty(t, worker)
	require.NotEmpty(t, cp)
	oldTalosconfig := p.raw("/api/v1/tenants/" + tenant + "/talosconfig")

	// stageBlocked waits until the run is at stage with node's machine
	// asking its refusing node again.
	stageBlocked := func(p *proc, stage, node string) {
		p.eventually(3*time.Minute, "the rotation waits at stage "+stage+" on "+node, func() bool {
			for _, u := range p.upgrades(tenant) {
				for _, m := range u.Status.Machines {
					if m.Name == machineOf[node] && m.Phase == "Upgrading" && strings.Contains(m.Message, "refusing ApplyConfiguration") &&
						rotationStage(p, tenant, u.Metadata.Name) == stage {
						return true
					}
				}
			}
			return false
		})
	}
	kill := func(p *proc) *proc {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
		<-p.done
		return startInfraServer(t, dir, "--emulator-kube", "off")
	}

	p.setFaults(worker, `{"refuseApply":true}`)
	code, body := p.do("POST", "/api/v1/tenants/"+tenant+"/upgrades", `{"metadata":{"name":"rotate"},"spec":{"rotate":["talos-ca","kubernetes-ca"]}}`)
	require.Equal(t, http.StatusCreated, code, body)
	stageBlocked(p, "accept", worker) // the control plane took it, the worker refuses
	p = kill(p)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("upgrades: %s", p.raw("/api/v1/tenants/"+tenant+"/upgrades"))
		}
	})
	stageBlocked(p, "accept", worker) // resumed at its stage
	p.setFaults(cp, `{"refuseApply":true}`)
	p.setFaults(worker, `{}`)
	stageBlocked(p, "swap", cp) // the worker took accept, the control plane refuses swap
	p = kill(p)
	p.setFaults(worker, `{"refuseApply":true}`)
	p.setFaults(cp, `{}`)
	stageBlocked(p, "swap", worker) // the control plane took swap, the worker refuses it
	p.setFaults(cp, `{"refuseApply":true}`)
	p.setFaults(worker, `{}`)
	stageBlocked(p, "drop", cp)
	p = kill(p)
	p.setFaults(cp, `{}`)
	var run upgradeRun
	p.eventually(3*time.Minute, "the rotation finished", func() bool {
		us := p.upgrades(tenant)
		run = us[len(us)-1]
		return run.Status.Phase == "Succeeded" || run.Status.Phase == "Failed"
	})
	require.Equal(t, "Succeeded", run.Status.Phase, run.Status.Reason)

	ctx := t.Context()
	newTalosconfig := p.raw("/api/v1/tenants/" + tenant + "/talosconfig")
	for _, m := range p.machines(tenant) {
		require.NoError(t, talosconfigAnswers(ctx, newTalosconfig, m.Spec.Address), "%s answers a talosconfig issued now", m.Metadata.Name)
		require.Error(t, talosconfigAnswers(ctx, oldTalosconfig, m.Spec.Address), "%s refuses the talosconfig from before", m.Metadata.Name)
	}
	p.eventually(time.Minute, "the cluster is healthy on the new CAs", func() bool {
		code, h := p.do("GET", "/api/v1/tenants/"+tenant+"/health?refresh=true", "")
		return code == http.StatusOK && h["state"] == "Ready"
	})
}

// rotationStage is the stage a rotation run is at.
func rotationStage(p *proc, tenant, name string) string {
	code, u := p.do("GET", "/api/v1/tenants/"+tenant+"/upgrades/"+name, "")
	if code != http.StatusOK {
		return ""
	}
	st, _ := u["status"].(map[string]any)
	rot, _ := st["rotation"].(map[string]any)
	s, _ := rot["stage"].(string)
	return s
}
