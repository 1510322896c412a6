//go:build e2e

package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestStuckUpgradeFailsAtItsDeadlineAcrossKillNine is issue 43's stuck
// Kubernetes upgrade on a real server process: the control plane never
// comes up at the target (the emulator's kubernetesDownAt fault). The step
// says what it waits for, since when and until when; the server is killed
// with SIGKILL mid-wait and started again; the step still fails at the
// deadline recorded before the kill (not one begun afresh), the machine
// gets its previous config back, and the run ends Failed naming the step
// and the last answer.
func TestStuckUpgradeFailsAtItsDeadlineAcrossKillNine(t *testing.T) {
	t.Parallel()
	const from, to = "v1.35.2", "v1.35.3"
	dir := t.TempDir()
	p := startInfraServer(t, dir, "--emulator-kube", "off")
	code, body := p.do("POST", "/api/v1/tenants", `{"metadata":{"name":"stuck"},"spec":{"kubernetesVersion":"`+from+`"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	code, body = p.do("POST", "/api/v1/tenants/stuck/nodegroups", `{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	p.settled("stuck", 1)
	node := p.machines("stuck")[0].Metadata.Name
	nodes := p.emulatorNodes()
	require.Len(t, nodes, 1)
	p.setFaults(nodes[0]["name"].(string), `{"kubernetesDownAt":"`+to+`"}`)

	code, body = p.do("POST", "/api/v1/tenants/stuck/upgrades",
		`{"metadata":{"name":"k"},"spec":{"kubernetesVersion":"`+to+`","deadlines":{"verify":"30s"}}}`)
	require.Equal(t, http.StatusCreated, code, body)
	var waiting domain.UpgradeMachine
	p.eventually(2*time.Minute, "the step waits with an answer", func() bool {
		u := p.upgrade("stuck", "k")
		if len(u.Status.Machines) != 1 {
			return false
		}
		waiting = u.Status.Machines[0]
		return waiting.Phase == domain.StepVerifying && waiting.Wait != nil && waiting.Wait.LastError != ""
	})
	w := waiting.Wait
	require.Equal(t, "kube-apiserver on "+node+" to answer "+to, w.For)
	require.Equal(t, 30*time.Second, w.Deadline.Sub(w.Since))
	require.Contains(t, waiting.Message, "waiting for kube-apiserver on "+node+" to answer "+to+": ")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.done

	p2 := startInfraServer(t, dir, "--emulator-kube", "off")
	p2.eventually(3*time.Minute, "the upgrade ended", func() bool { u := p2.upgrade("stuck", "k"); return u.Status.Final() })
	u := p2.upgrade("stuck", "k")
	require.Equal(t, domain.UpgradeFailed, u.Status.Phase, u.Status.Reason)
	m := u.Status.Machines[0]
	require.Equal(t, domain.StepRolledBack, m.Phase, m.Error)
	require.Nil(t, m.Wait)
	require.Contains(t, m.Error, "Verifying passed its deadline of 30s waiting for kube-apiserver on "+node+" to answer "+to+"; last answer: ")
	require.Contains(t, m.Error, "rolled back to Kubernetes "+from)
	require.Contains(t, u.Status.Reason, node+" (RolledBack): Verifying passed its deadline")
	for _, n := range p2.emulatorNodes() {
		require.Equal(t, from, n["kubernetesVersion"], "the previous config is back")
	}

	// The kill bought no time: every recorded look at the wait, before
	// and after the restart, carries the deadline it began with, and the
	// step ended after it.
	var hist struct {
		Items []struct {
			Object domain.Upgrade `json:"object"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal(p2.raw("/api/v1/events?kind=Upgrade&tenant=stuck&name=k&since=0&limit=10000"), &hist))
	looks := 0
	for _, ev := range hist.Items {
		for _, e := range ev.Object.Status.Machines {
			if e.Wait != nil && e.Wait.For == w.For {
				looks++
				require.True(t, e.Wait.Deadline.Equal(w.Deadline), "deadline %s recorded, want %s", e.Wait.Deadline, w.Deadline)
			}
		}
	}
	require.NotZero(t, looks)
	require.NotNil(t, m.Finished)
	require.False(t, m.Finished.Before(w.Deadline), "the step failed at %s, before its deadline %s", m.Finished, w.Deadline)
	require.True(t, strings.HasPrefix(u.Status.Reason, node+" (RolledBack)"), u.Status.Reason)
}

// upgrade reads one Upgrade.
func (p *proc) upgrade(tenant, name string) domain.Upgrade {
	p.t.Helper()
	var u domain.Upgrade
	require.NoError(p.t, json.Unmarshal(p.raw("/api/v1/tenants/"+tenant+"/upgrades/"+name), &u))
	return u
}
