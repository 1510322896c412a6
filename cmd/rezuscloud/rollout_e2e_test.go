//go:build e2e

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func (p *proc) rollout(name string) domain.Rollout {
	var ro domain.Rollout
	require.NoError(p.t, json.Unmarshal(p.raw("/api/v1/rollouts/"+name), &ro))
	return ro
}

func rolloutTenant(ro domain.Rollout, name string) domain.RolloutTenantStatus {
	for _, t := range ro.Status.Tenants {
		if t.Name == name {
			return t
		}
	}
	return domain.RolloutTenantStatus{}
}

// TestRolloutAcrossTenants rolls a Talos patch version over six tenants in
// waves 1 / 50% / 100% with a short soak: the canary alone first; a fault in
// a wave-2 tenant halts the rollout with that tenant named and no wave-3
// tenant touched; resume starts that tenant again and goes on; the server is
// killed with -9 mid-wave-3 and the rollout finishes after the restart with
// every tenant upgraded exactly once (and a tenant outside the selector
// never touched).
func TestRolloutAcrossTenants(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startInfraServer(t, dir, "--rollout-interval", "500ms")
	tenants := []string{"fl-1", "fl-2", "fl-3", "fl-4", "fl-5", "fl-6"}
	for _, tn := range append(tenants, "other") {
		labels := `{"fleet":"e2e"}`
		if tn == "other" {
			labels = `{"fleet":"elsewhere"}`
		}
		code, body := p.do("POST", "/api/v1/tenants", `{"metadata":{"name":"`+tn+`","labels":`+labels+`},"spec":{"talosVersion":"v1.13.0"}}`)
		require.Equal(t, http.StatusCreated, code, body)
		code, body = p.do("POST", "/api/v1/tenants/"+tn+"/nodegroups", `{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`)
		require.Equal(t, http.StatusCreated, code, body)
	}
	hostname := map[string]string{}
	for _, tn := range append(tenants, "other") {
		p.settled(tn, 1)
		p.eventually(2*time.Minute, tn+" healthy", func() bool {
			code, h := p.do("GET", "/api/v1/tenants/"+tn+"/health?refresh=true", "")
			return code == http.StatusOK && h["state"] == "Ready"
		})
		hostname[tn] = p.machines(tn)[0].Spec.Hostname
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("rollout: %s", p.raw("/api/v1/rollouts/fleet-113"))
		}
	})
	// A wave-2 tenant refuses its next upgrade.
	p.setFaults(hostname["fl-3"], `{"failNextUpgrade":true}`)

	code, body := p.do("POST", "/api/v1/rollouts", `{"metadata":{"name":"fleet-113"},"spec":{"change":{"talosVersion":"v1.13.1"},
		"tenantSelector":"fleet=e2e","waves":[{"tenants":1},{"percent":50},{"percent":100}],"soak":"3s"}}`)
	require.Equal(t, http.StatusCreated, code, body)

	// The canary alone: while wave 1 soaks, no other tenant has an upgrade.
	p.eventually(2*time.Minute, "wave 1 soaking", func() bool {
		ro := p.rollout("fleet-113")
		return len(ro.Status.Waves) == 3 && ro.Status.Waves[0].State == domain.RolloutWaveSoaking
	})
	require.Len(t, p.upgrades("fl-1"), 1)
	for _, tn := range tenants[1:] {
		require.Empty(t, p.upgrades(tn), "%s changed while the canary soaks", tn)
	}

	// Halted at fl-3; wave 3 untouched.
	var ro domain.Rollout
	p.eventually(3*time.Minute, "the rollout halted", func() bool {
		ro = p.rollout("fleet-113")
		return ro.Status.Phase == domain.RolloutHalted || ro.Status.Finished()
	})
	require.Equal(t, domain.RolloutHalted, ro.Status.Phase, ro.Status.Message)
	require.Equal(t, "fl-3", ro.Status.Halt.Tenant)
	require.Contains(t, ro.Status.Halt.Reason, "emulated fault")
	require.Equal(t, []int{1, 2, 3}, []int{ro.Status.Waves[0].Size, ro.Status.Waves[1].Size, ro.Status.Waves[2].Size})
	for _, tn := range tenants[3:] {
		require.Empty(t, p.upgrades(tn), "%s started although the rollout halted", tn)
		require.Equal(t, domain.RolloutTenantWaiting, rolloutTenant(p.rollout("fleet-113"), tn).State)
	}

	// The fault cleared itself with the refused upgrade: resume (as
	// `rezusctl rollout resume` does), then kill the server mid-wave-3.
	// No wave-3 upgrade may come before the resume, however long the halt
	// lasted: each one's first event must follow the resume's (checked
	// once they exist, below), not a pause.
	resumed, err := strconv.ParseUint(p.patchVersion("/api/v1/rollouts/fleet-113", fmt.Sprintf(`{"spec":{"resumeHalt":%d}}`, ro.Status.Halt.Number)), 10, 64)
	require.NoError(t, err)
	p.eventually(3*time.Minute, "wave 3 under way", func() bool {
		ro = p.rollout("fleet-113")
		return rolloutTenant(ro, "fl-4").State == domain.RolloutTenantRunning || ro.Status.Finished()
	})
	require.False(t, ro.Status.Finished(), "wave 3 finished before the kill")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.done

	p2 := startInfraServer(t, dir, "--rollout-interval", "500ms")
	p2.eventually(4*time.Minute, "the rollout finished", func() bool {
		ro = p2.rollout("fleet-113")
		return ro.Status.Finished() || ro.Status.Phase == domain.RolloutHalted
	})
	require.Equal(t, domain.RolloutSucceeded, ro.Status.Phase, ro.Status.Message)
	require.Equal(t, domain.RolloutCounts{Total: 6, Done: 6}, ro.Status.Counts)
	require.True(t, ro.Status.Halt.Resumed)

	// Every tenant upgraded exactly once: one succeeded Upgrade of the
	// rollout (fl-3 also keeps its refused first attempt), whose history
	// shows the machine entering Upgrading once.
	for _, tn := range tenants {
		ups := p2.upgrades(tn)
		want := 1
		if tn == "fl-3" {
			want = 2
		}
		require.Len(t, ups, want, "%s: %+v", tn, ups)
		ok := ups[len(ups)-1]
		for _, u := range ups {
			if u.Status.Phase == domain.UpgradeSucceeded {
				ok = u
			}
		}
		require.Equal(t, domain.UpgradeSucceeded, ok.Status.Phase, "%s: %s", tn, ok.Status.Reason)
		if slices.Contains(tenants[3:], tn) {
			require.Greater(t, firstEventSeq(t, p2, tn, ok.Metadata.Name), resumed, "%s's upgrade started while the rollout halted", tn)
		}
		for m, n := range upgradesEntered(t, p2, tn, ok.Metadata.Name) {
			require.Equal(t, 1, n, "%s/%s entered Upgrading %d times", tn, m, n)
		}
		require.Equal(t, "v1.13.1", p2.machines(tn)[0].Status.TalosVersion, tn)
	}
	require.Empty(t, p2.upgrades("other"))
	require.Equal(t, "v1.13.0", p2.machines("other")[0].Status.TalosVersion)

	// Issue 46: a Rollout carries a rotation of the Kubernetes CA over the
	// same six tenants in waves; each tenant's rotation Upgrade succeeds and
	// its kubeconfig trusts another CA than before; "other" keeps its CA.
	caOf := func(tn string) string {
		kc := string(p2.raw("/api/v1/tenants/" + tn + "/kubeconfig/admin"))
		i := strings.Index(kc, "certificate-authority-data: ")
		require.Positive(t, i, tn)
		return strings.Fields(kc[i:])[1]
	}
	before := map[string]string{}
	for _, tn := range append(tenants, "other") {
		before[tn] = caOf(tn)
	}
	code, body = p2.do("POST", "/api/v1/rollouts", `{"metadata":{"name":"rotate-fleet"},"spec":{"change":{"rotate":["kubernetes-ca"]},
		"tenantSelector":"fleet=e2e","waves":[{"tenants":1},{"percent":50},{"percent":100}],"soak":"1s"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	p2.eventually(5*time.Minute, "the rotation rollout finished", func() bool {
		ro = p2.rollout("rotate-fleet")
		return ro.Status.Finished() || ro.Status.Phase == domain.RolloutHalted
	})
	require.Equal(t, domain.RolloutSucceeded, ro.Status.Phase, ro.Status.Message)
	require.Equal(t, domain.RolloutCounts{Total: 6, Done: 6}, ro.Status.Counts)
	require.Len(t, ro.Status.Waves, 3)
	for _, tn := range tenants {
		var list struct{ Items []domain.Upgrade }
		require.NoError(t, json.Unmarshal(p2.raw("/api/v1/tenants/"+tn+"/upgrades"), &list))
		var rotations []domain.Upgrade
		for _, u := range list.Items {
			if u.Spec.Rotation() {
				rotations = append(rotations, u)
			}
		}
		require.Len(t, rotations, 1, tn)
		require.Equal(t, []string{domain.SecretKubernetesCA}, rotations[0].Spec.Rotate, tn)
		require.Equal(t, domain.UpgradeSucceeded, rotations[0].Status.Phase, "%s: %s", tn, rotations[0].Status.Reason)
		require.NotEqual(t, before[tn], caOf(tn), "%s trusts its new Kubernetes CA", tn)
	}
	require.Equal(t, before["other"], caOf("other"), "a tenant outside the selector keeps its CA")
}

// firstEventSeq is the stream sequence of the first event of tenant's
// Upgrade run: when it was created.
func firstEventSeq(t *testing.T, p *proc, tenant, run string) uint64 {
	t.Helper()
	var hist struct {
		Items []struct {
			Seq uint64 `json:"seq"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal(p.raw("/api/v1/events?kind=Upgrade&tenant="+tenant+"&name="+run+"&since=0&limit=1"), &hist))
	require.NotEmpty(t, hist.Items, "%s/%s has no events", tenant, run)
	return hist.Items[0].Seq
}
