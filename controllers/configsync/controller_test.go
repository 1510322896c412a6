package configsync_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/controllers/configsync"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator"
	"github.com/rezuscloud/rezuscloud/emulator/talostest"
	"github.com/rezuscloud/rezuscloud/talos"
)

// Patches in the config kubelet's and sysctls' sections: the first is
// applied in place, the second needs a reboot (as Talos decides in AUTO).
const (
	inPlacePatch = "machine:\n  kubelet:\n    extraArgs:\n      v: \"2\"\n"
	rebootPatch  = "machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n"
)

func reasons(ms []domain.Machine) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		if c := domain.FindCondition(m.Status.Conditions, domain.ConditionConfigApplied); c != nil {
			out[m.Metadata.Name] = c.Reason
		}
	}
	return out
}

func TestPatchesRollOutControlPlanesFirstByParallelism(t *testing.T) {
	e := newEnv(t, 3, 3, 2)
	e.start(nil)
	// The nodes booted with configs rendered before their node groups
	// existed: the first pass gives each its rendered config.
	e.waitConverged("the first pass")
	first := e.nodeHashes()
	e.calls.take()

	check := func(what string) []string {
		t.Helper()
		log := e.calls.take()
		order := applied(log)
		require.Equal(t, []string{"cp-1", "cp-2", "cp-3"}, order[:3], "%s: control planes first, in name order", what)
		require.ElementsMatch(t, []string{"w-1", "w-2", "w-3"}, order[3:], what)
		require.Equal(t, 1, maxInFlight(log, "cp-"), "%s: control planes one at a time", what)
		require.LessOrEqual(t, maxInFlight(log, "w-"), 2, "%s: workers by maxParallelism", what)
		return order
	}

	e.patch("verbose-kubelet", inPlacePatch, true)
	e.eventuallyAllChanged(first, "the in-place patch")
	e.waitConverged("the in-place patch")
	check("in place")
	for name, r := range reasons(e.machines()) {
		require.Equal(t, talos.ReasonAppliedInPlace, r, name)
	}
	inPlace := e.nodeHashes()

	e.patch("sysctl", rebootPatch, true)
	e.eventuallyAllChanged(inPlace, "the reboot patch")
	e.waitConverged("the reboot patch")
	check("with reboot")
	for name, r := range reasons(e.machines()) {
		require.Equal(t, talos.ReasonAppliedWithReboot, r, name)
	}
	require.Eventually(t, func() bool {
		for _, n := range e.Em.List() {
			if n.Phase != emulator.PhaseRunning {
				return false
			}
		}
		return true
	}, 30*time.Second, 5*time.Millisecond, "every node back after its reboot")

	// Disabling both patches goes back to the configs of the first pass.
	e.patch("verbose-kubelet", inPlacePatch, false)
	e.patch("sysctl", rebootPatch, false)
	require.Eventually(t, func() bool { return maps(e.nodeHashes(), first) }, 60*time.Second, 5*time.Millisecond, "back to the first configs")
	e.waitConverged("the patches disabled")

	// A machine's history says how each config reached it.
	history := e.configHistory("w-1")
	require.Equal(t, []string{
		domain.EventMachineConfigApplied + " " + talos.ReasonAppliedInPlace, // first pass
		domain.EventMachineConfigApplied + " " + talos.ReasonAppliedInPlace,
		domain.EventMachineConfigApplied + " " + talos.ReasonAppliedWithReboot,
		domain.EventMachineConfigApplied + " " + talos.ReasonAppliedWithReboot, // back: sysctls removed
	}, history)
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// eventuallyAllChanged waits until no node holds the config it held before.
func (e *env) eventuallyAllChanged(before map[string]string, what string) {
	e.T.Helper()
	require.Eventually(e.T, func() bool {
		for name, h := range e.nodeHashes() {
			if before[name] == h {
				return false
			}
		}
		return true
	}, 60*time.Second, 5*time.Millisecond, what+" reaches every node")
}

// configHistory replays a machine's events: each MachineConfigApplied with
// the ConfigApplied reason of the status event that follows it.
func (e *env) configHistory(machine string) []string {
	e.T.Helper()
	_, last, err := e.Store.Bounds(e.Ctx)
	require.NoError(e.T, err)
	cur, err := e.Store.Follow(e.Ctx, 1, []string{e.ref(domain.MachineKind, machine).Subject()})
	require.NoError(e.T, err)
	defer cur.Stop()
	var out []string
	pending := false
	for {
		ctx, cancel := context.WithTimeout(e.Ctx, 2*time.Second)
		rec, err := cur.Next(ctx)
		cancel()
		require.NoError(e.T, err)
		switch {
		case rec.Event.Type == domain.EventMachineConfigApplied:
			pending = true
		case pending && strings.HasSuffix(rec.Event.Type, "StatusUpdated"):
			var st domain.MachineStatus
			require.NoError(e.T, json.Unmarshal(rec.Event.Object.Status, &st))
			if c := domain.FindCondition(st.Conditions, domain.ConditionConfigApplied); c != nil && c.Status == "True" {
				out = append(out, domain.EventMachineConfigApplied+" "+c.Reason)
				pending = false
			}
		}
		if rec.Pending == 0 || rec.Seq >= last {
			return out
		}
	}
}

func TestNodeGroupLabelReachesOnlyItsMachines(t *testing.T) {
	e := newEnv(t, 1, 2, 2)
	e.start(nil)
	e.waitConverged("the first pass")
	before := e.nodeHashes()
	e.calls.take()

	e.updateGroup("workers", func(s *domain.NodeGroupSpec) { s.Labels = map[string]string{"tier": "batch"} })
	require.Eventually(t, func() bool {
		h := e.nodeHashes()
		return h["w-1"] != before["w-1"] && h["w-2"] != before["w-2"]
	}, 60*time.Second, 5*time.Millisecond, "the workers' new configs")
	e.waitConverged("the label change")
	require.Equal(t, before["cp-1"], e.nodeHashes()["cp-1"], "the control plane's config does not change")
	order := applied(e.calls.take())
	slices.Sort(order)
	require.Equal(t, []string{"w-1", "w-2"}, order)
}

func TestAMachineThatRefusesItsConfigIsRetried(t *testing.T) {
	e := newEnv(t, 1, 2, 2)
	e.start(nil)
	e.waitConverged("the first pass")
	before := e.nodeHashes()

	e.Fault("w-2", emulator.Faults{RefuseApply: true})
	e.patch("verbose-kubelet", inPlacePatch, true)
	require.Eventually(t, func() bool {
		h := e.nodeHashes()
		for _, m := range e.machines() {
			c := domain.FindCondition(m.Status.Conditions, domain.ConditionConfigApplied)
			if c == nil {
				return false
			}
			if m.Metadata.Name == "w-2" {
				if c.Status != "False" || c.Reason != talos.ReasonApplyFailed || m.Status.ConfigUpToDate {
					return false
				}
				require.Contains(t, c.Message, "refusing ApplyConfiguration")
				continue
			}
			if h[m.Metadata.Name] == before[m.Metadata.Name] || m.Metadata.Annotations[domain.AnnotationConfigHash] != h[m.Metadata.Name] || !m.Status.ConfigUpToDate {
				return false
			}
		}
		return true
	}, 60*time.Second, 5*time.Millisecond, "w-2 recorded as failing, the others converged")
	require.Equal(t, before["w-2"], e.nodeHashes()["w-2"], "w-2 still holds its old config")
	w2 := e.machineNamed("w-2")
	require.Equal(t, before["w-2"], w2.Metadata.Annotations[domain.AnnotationConfigHash], "its annotation says what it holds")

	// The fault lifted, a retry gives it its config: no spec change needed.
	e.Fault("w-2", emulator.Faults{})
	e.waitConverged("w-2 after the fault")
	require.NotEqual(t, before["w-2"], e.nodeHashes()["w-2"])
}

func (e *env) machineNamed(name string) domain.Machine {
	for _, m := range e.machines() {
		if m.Metadata.Name == name {
			return m
		}
	}
	e.T.Fatalf("no machine %s", name)
	return domain.Machine{}
}

func TestHeldBackWhileAnUpgradeIsInFlight(t *testing.T) {
	e := newEnv(t, 1, 1, 1)
	e.start(nil)
	e.waitConverged("the first pass")
	before := e.nodeHashes()

	up := e.ref(domain.UpgradeKind, "to-next")
	e.Execute(domain.Command{Op: domain.OpCreate, Ref: up, Object: &domain.Object{
		Metadata: domain.ObjectMeta{Name: up.Name, Tenant: e.Tenant}, Spec: json.RawMessage(`{"talosVersion":"v1.13.0"}`)}})
	e.patch("verbose-kubelet", inPlacePatch, true)
	require.Eventually(t, func() bool { return e.logs.has("holding back while an upgrade runs") }, 30*time.Second, 5*time.Millisecond, "the controller holds back")
	require.Equal(t, before, e.nodeHashes(), "no config was applied while the upgrade is pending")

	// The upgrade's end releases the tenant.
	e.Execute(domain.Command{Op: domain.OpUpdateStatus, Ref: up, Object: &domain.Object{Status: json.RawMessage(`{"phase":"Succeeded"}`)}})
	e.eventuallyAllChanged(before, "the patch after the upgrade")
	e.waitConverged("after the upgrade")
}

// A control plane that is down holds the rollout: no other control plane
// is given a config (it may reboot), and the workers wait for the control
// planes; the machines say they are pending. Once it is back, all converge.
func TestAControlPlaneDownHoldsTheRollout(t *testing.T) {
	e := newEnv(t, 3, 1, 1)
	e.start(nil)
	e.waitConverged("the first pass")
	before := e.nodeHashes()
	e.calls.take()

	e.Fault("cp-2", emulator.Faults{Unhealthy: true})
	e.patch("verbose-kubelet", inPlacePatch, true)
	require.Eventually(t, func() bool {
		for _, m := range e.machines() {
			c := domain.FindCondition(m.Status.Conditions, domain.ConditionConfigApplied)
			if c == nil || c.Status != "Unknown" || c.Reason != talos.ReasonPending || m.Status.ConfigUpToDate {
				return false
			}
		}
		return true
	}, 30*time.Second, 5*time.Millisecond, "every machine pending")
	require.Eventually(t, func() bool { return e.logs.has("holding back a control plane") }, 30*time.Second, 5*time.Millisecond, "the control planes held back")
	require.Eventually(t, func() bool { return e.logs.has("does not hold its config; retrying") }, 30*time.Second, 5*time.Millisecond, "the rollout stopped")
	require.Empty(t, applied(e.calls.take()), "no config went out")
	require.Equal(t, before, e.nodeHashes())

	e.Fault("cp-2", emulator.Faults{})
	e.eventuallyAllChanged(before, "the patch once cp-2 is back")
	e.waitConverged("cp-2 back")
}

// A tenant with a maintenance window: a config taken in place is applied
// while the window is closed; one that reboots its machines waits (the
// machines say until when); once the clock enters the window (and a change
// queues the tenant), it goes too.
func TestRebootingConfigsWaitForTheMaintenanceWindow(t *testing.T) {
	e := newEnv(t, 1, 1, 1)
	tenant := domain.TenantRef(e.Tenant)
	tn := talostest.GetAs[domain.Tenant](t, e.Cache, tenant)
	tn.Spec.Maintenance = &domain.Maintenance{Windows: []domain.MaintenanceWindow{{Days: []string{"Sat"}, Start: "02:00", Duration: "1h", TimeZone: "UTC"}}}
	spec, err := json.Marshal(tn.Spec)
	require.NoError(t, err)
	obj := &domain.Object{Metadata: tn.Metadata, Spec: spec}
	e.Execute(domain.Command{Op: domain.OpUpdate, Ref: tenant, Object: obj})

	// The clock runs (the controller runtime's debounce needs it to), from
	// a Wednesday noon.
	var mu sync.Mutex
	offset := time.Until(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	e.start(func(c *configsync.Config) {
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(offset) }
	})
	e.waitConverged("the first pass")

	// In place: not disruptive, no wait.
	before := e.nodeHashes()
	e.patch("verbose-kubelet", inPlacePatch, true)
	e.eventuallyAllChanged(before, "the in-place patch outside the window")
	e.waitConverged("the in-place patch")

	before = e.nodeHashes()
	e.patch("sysctl", rebootPatch, true)
	require.Eventually(t, func() bool {
		for _, m := range e.machines() {
			c := domain.FindCondition(m.Status.Conditions, domain.ConditionConfigApplied)
			if c == nil || !strings.Contains(c.Message, "Waiting for maintenance window (opens Sat 02:00 UTC)") {
				return false
			}
		}
		return true
	}, 30*time.Second, 5*time.Millisecond, "both machines wait for the window")
	require.Equal(t, before, e.nodeHashes(), "no rebooting config was applied outside the window")

	// The clock enters the window; the pass it scheduled for then (an hour
	// or days away on the real clock) is not waited for: a change queues
	// the tenant, and the window is open.
	mu.Lock()
	offset = time.Until(time.Date(2026, 12, 5, 2, 5, 0, 0, time.UTC))
	mu.Unlock()
	e.patch("verbose-kubelet", inPlacePatch, false)
	e.eventuallyAllChanged(before, "the rebooting patch in the window")
	e.waitConverged("in the window")
}
