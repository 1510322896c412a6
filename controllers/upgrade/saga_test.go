package upgrade_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/controllers/upgrade"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator"
)

// names lists the machines of a run in the order of its status.
func names(u domain.Upgrade) []string {
	var out []string
	for _, m := range u.Status.Machines {
		out = append(out, m.Name)
	}
	return out
}

func phases(u domain.Upgrade) map[string]string {
	out := map[string]string{}
	for _, m := range u.Status.Machines {
		out[m.Name] = m.Phase
	}
	return out
}

// replicas is the replica that last carried on each machine's step.
func replicas(u domain.Upgrade) map[string]string {
	out := map[string]string{}
	for _, m := range u.Status.Machines {
		out[m.Name] = m.Replica
	}
	return out
}

// TestUpgradeSagaRollsTheClusterInOrder: changing the tenant's talosVersion
// starts a run that upgrades a 3+3 cluster through the Talos API, control
// planes first and one at a time, the etcd leader (cp-1) last of them, each
// machine exactly once, every step recorded as an event; the machines'
// status follows, written by the health probe the saga asks (it writes none
// of it). A node group's override then upgrades that group alone, and
// a change that is not a version change starts nothing.
func TestUpgradeSagaRollsTheClusterInOrder(t *testing.T) {
	e := newSagaEnv(t, 3, 3, nil)
	saga, stop := e.startSaga(nil)
	require.False(t, saga.ActiveUpgrade(e.tenant))

	// The change comes while no replica runs the saga, and the tenant's
	// status moves after it (as the health probes write it): the durable
	// consumer still has the change when a saga starts again.
	stop()
	tenantRef := domain.Ref{Kind: domain.TenantKind.Kind, Name: e.tenant}
	e.updateSpec(tenantRef, `{"talosVersion":"`+sagaTo+`","kubernetesVersion":"`+sagaKube+`"}`)
	e.execute(domain.Command{Op: domain.OpUpdateStatus, Ref: tenantRef, Object: &domain.Object{Status: json.RawMessage(`{"phase":"Ready","kubernetesVersion":"` + sagaKube + `","machines":{"total":6,"ready":6,"controlPlane":3,"workers":3}}`)}})
	saga, stop = e.startSaga(e.observe)
	var run string
	sagaEventually(t, 10*time.Second, "a run started by the version change", func() bool {
		for _, u := range e.upgrades() {
			run = u.Metadata.Name
		}
		return run != ""
	})
	u := e.upgrade(run)
	require.Equal(t, sagaTo, u.Spec.TalosVersion)
	require.Empty(t, u.Spec.NodeGroups, "the tenant's version covers every group without an override")
	require.Equal(t, "tenant", u.Metadata.Labels[upgrade.LabelTrigger])
	require.Contains(t, u.Metadata.Annotations[upgrade.AnnotationCause], "Tenant/acme@")

	u = e.waitUpgrade(run, "finished", finished)
	require.Equal(t, domain.UpgradeSucceeded, u.Status.Phase, "reason: %s", u.Status.Reason)
	require.Equal(t, "6 of 6 machines on "+sagaTo, u.Status.Reason)
	require.Equal(t, []string{"cp-2", "cp-3", "cp-1", "w-1", "w-2", "w-3"}, names(u))
	var prev *time.Time
	for _, m := range u.Status.Machines {
		require.Equal(t, domain.StepDone, m.Phase, m.Name)
		require.Equal(t, sagaFrom, m.From)
		require.Equal(t, sagaTo, m.To)
		require.NotNil(t, m.Started, m.Name)
		require.NotNil(t, m.Finished, m.Name)
		if prev != nil {
			require.False(t, m.Started.Before(*prev), "%s started before the machine before it finished", m.Name)
		}
		prev = m.Finished
	}
	require.NotNil(t, u.Status.StartTime)
	require.NotNil(t, u.Status.EndTime)
	require.Empty(t, u.Status.Current)

	// Every step is an event.
	for name, ph := range e.stepPhases(run) {
		require.Equal(t, []string{domain.StepPending, domain.StepUpgrading, domain.StepRebooting, domain.StepVerifying, domain.StepDone}, ph, name)
	}
	calls := e.upgradeCalls()
	for _, n := range e.nodes {
		require.Equal(t, 1, calls[n], "upgrade calls to %s", n)
		st, err := e.em.Get(n)
		require.NoError(t, err)
		require.Equal(t, sagaTo, st.Version, n)
		m := e.machine(n)
		require.Equal(t, sagaTo, m.Status.TalosVersion, n)
		require.Equal(t, "Running", m.Status.Stage, n)
		require.True(t, m.Status.Ready, n)
	}
	require.False(t, saga.ActiveUpgrade(e.tenant))

	// A change that is not a version change starts nothing.
	// A node group's override upgrades that group alone. Both come while
	// no replica runs the saga: the tenant's event is then decided on a
	// read model that already has the group's new version, which is the
	// group's event's to start and label (CI once saw the tenant's do it).
	stop()
	e.updateSpec(domain.Ref{Kind: domain.TenantKind.Kind, Name: e.tenant}, `{"talosVersion":"`+sagaTo+`","kubernetesVersion":"`+sagaKube+`","controlPlane":{"endpoint":"https://10.0.0.1:6443"}}`)
	e.updateSpec(e.ref(domain.NodeGroupKind, "workers"), `{"role":"worker","count":3,"provider":"emu","talosVersion":"v1.13.1","updateStrategy":{"maxParallelism":2}}`)
	e.startSaga(nil)
	var second string
	sagaEventually(t, 10*time.Second, "a run for the node group", func() bool {
		for _, u := range e.upgrades() {
			if u.Metadata.Name != run {
				second = u.Metadata.Name
			}
		}
		return second != ""
	})
	u = e.waitUpgrade(second, "finished", finished)
	require.Equal(t, domain.UpgradeSucceeded, u.Status.Phase, "reason: %s", u.Status.Reason)
	require.Equal(t, []string{"workers"}, u.Spec.NodeGroups)
	require.Equal(t, 2, u.Spec.MaxParallelism, "the group's update strategy")
	require.Equal(t, "nodegroup", u.Metadata.Labels[upgrade.LabelTrigger])
	require.Equal(t, []string{"w-1", "w-2", "w-3"}, names(u))
	require.Len(t, e.upgrades(), 2, "the endpoint change started no run")
	calls = e.upgradeCalls()
	for _, n := range e.nodes {
		want, version := 2, "v1.13.1"
		if n[:2] == "cp" {
			want, version = 1, sagaTo
		}
		require.Equal(t, want, calls[n], n)
		st, err := e.em.Get(n)
		require.NoError(t, err)
		require.Equal(t, version, st.Version, n)
	}
}

// TestUpgradeSagaRollsBackAFailedMachine: the 4th machine's upgrade fails; it
// is rolled back (it still runs the old version), the run stops Failed with
// the reason, and the three control planes upgraded before stay upgraded.
func TestUpgradeSagaRollsBackAFailedMachine(t *testing.T) {
	e := newSagaEnv(t, 3, 3, nil)
	_, err := e.em.InjectFault("w-1", emulator.Faults{FailNextUpgrade: true})
	require.NoError(t, err)
	e.startSaga(e.observe)
	e.createUpgrade("to-113", `{"talosVersion":"`+sagaTo+`"}`)
	u := e.waitUpgrade("to-113", "finished", finished)

	require.Equal(t, domain.UpgradeFailed, u.Status.Phase)
	require.Equal(t, map[string]string{"cp-1": domain.StepDone, "cp-2": domain.StepDone, "cp-3": domain.StepDone,
		"w-1": domain.StepRolledBack, "w-2": domain.StepPending, "w-3": domain.StepPending}, phases(u))
	require.Contains(t, u.Status.Reason, "w-1 (RolledBack): the node refused the upgrade: upgrade to v1.13.0 failed: emulated fault")
	require.Contains(t, u.Status.Reason, "it still runs "+sagaFrom)
	require.Contains(t, u.Status.Reason, "3 of 6 machines on "+sagaTo)
	require.Equal(t, map[string]int{"cp-1": 1, "cp-2": 1, "cp-3": 1, "w-1": 1}, e.upgradeCalls())
	for _, n := range e.nodes {
		st, err := e.em.Get(n)
		require.NoError(t, err)
		want := sagaTo
		if n[:1] == "w" {
			want = sagaFrom
		}
		require.Equal(t, want, st.Version, n)
	}
	m := e.machine("w-1")
	require.Equal(t, sagaFrom, m.Status.TalosVersion)
	require.True(t, m.Status.Ready)
}

// TestUpgradeSagaRollsBackAnUnhealthyMachine: a node that comes back on the
// target but never turns healthy is rolled back through the Talos API (the
// emulator serves no Rollback, so by an upgrade to its old version).
func TestUpgradeSagaRollsBackAnUnhealthyMachine(t *testing.T) {
	e := newSagaEnv(t, 1, 2, nil)
	_, err := e.em.InjectFault("w-1", emulator.Faults{Unhealthy: true})
	require.NoError(t, err)
	e.startSaga(func(c *upgrade.Config) { c.HealthTimeout = 300 * time.Millisecond })
	e.createUpgrade("to-113", `{"talosVersion":"`+sagaTo+`"}`)
	u := e.waitUpgrade("to-113", "finished", finished)

	require.Equal(t, domain.UpgradeFailed, u.Status.Phase)
	require.Equal(t, map[string]string{"cp-1": domain.StepDone, "w-1": domain.StepRolledBack, "w-2": domain.StepPending}, phases(u))
	w1 := u.Status.Machines[1]
	require.Contains(t, w1.Error, "Verifying passed its deadline of 300ms waiting for w-1 to be healthy on "+sagaTo+"; last answer: services not healthy")
	require.Contains(t, w1.Error, "rolled back to "+sagaFrom+" (an upgrade to "+sagaFrom+")")
	require.Contains(t, w1.Error, "but it is not healthy", "the fault outlives the rollback")
	require.Equal(t, map[string]int{"cp-1": 1, "w-1": 2}, e.upgradeCalls(), "one upgrade and one back")
	st, err := e.em.Get("w-1")
	require.NoError(t, err)
	require.Equal(t, sagaFrom, st.Version)
	ph := e.stepPhases("to-113")["w-1"]
	require.Equal(t, []string{domain.StepPending, domain.StepUpgrading, domain.StepRebooting, domain.StepVerifying, domain.StepRollingBack, domain.StepRolledBack}, ph)
}

// TestUpgradeSagaResumesAfterARestart stops the saga twice mid-run (a node
// rebooting, then a node verifying) and starts a new one on the same store
// and nodes each time: the run ends Succeeded and no node is upgraded twice.
func TestUpgradeSagaResumesAfterARestart(t *testing.T) {
	e := newSagaEnv(t, 3, 3, func(c *emulator.Config) {
		c.UpgradeDelay, c.RebootDelay, c.ServiceStartDelay = 100*time.Millisecond, 100*time.Millisecond, 150*time.Millisecond
	})
	_, stop := e.startSaga(nil)
	e.createUpgrade("to-113", `{"talosVersion":"`+sagaTo+`"}`)

	e.waitUpgrade("to-113", "cp-3 rebooting", stepIs("cp-3", domain.StepRebooting))
	stop()
	u := e.upgrade("to-113")
	require.Equal(t, domain.UpgradeRunning, u.Status.Phase)
	require.Equal(t, "cp-3", u.Status.Current)
	require.Equal(t, "saga-1", replicas(u)["cp-3"], "the replica that ran the step")

	_, stop = e.startSaga(nil)
	e.waitUpgrade("to-113", "w-2 verifying", stepIs("w-2", domain.StepVerifying))
	stop()

	e.startSaga(nil)
	u = e.waitUpgrade("to-113", "finished", finished)
	require.Equal(t, domain.UpgradeSucceeded, u.Status.Phase, "reason: %s", u.Status.Reason)
	for _, m := range u.Status.Machines {
		require.Equal(t, domain.StepDone, m.Phase, m.Name)
		require.NotEmpty(t, m.Replica, m.Name)
	}
	// A step taken up after a failover names the replica that took it up.
	require.Equal(t, "saga-2", replicas(u)["cp-3"])
	require.Equal(t, "saga-3", replicas(u)["w-2"])
	require.Equal(t, map[string]int{"cp-1": 1, "cp-2": 1, "cp-3": 1, "w-1": 1, "w-2": 1, "w-3": 1}, e.upgradeCalls())
}

// TestUpgradeSagaCancelStopsAfterTheCurrentMachine: a cancel while the first
// machine reboots lets it finish, then the run ends Canceled.
func TestUpgradeSagaCancelStopsAfterTheCurrentMachine(t *testing.T) {
	e := newSagaEnv(t, 3, 1, func(c *emulator.Config) { c.RebootDelay = 100 * time.Millisecond })
	e.startSaga(nil)
	e.createUpgrade("to-113", `{"talosVersion":"`+sagaTo+`"}`)
	e.createUpgrade("later", `{"talosVersion":"v1.13.1"}`) // queued behind to-113
	e.waitUpgrade("to-113", "cp-2 rebooting", stepIs("cp-2", domain.StepRebooting))

	// A queued run that is canceled ends at once.
	_, err := upgrade.Cancel(e.ctx, e.store, upgrade.CancelRequest{Tenant: e.tenant, Name: "later", Actor: "test", Now: time.Now()})
	require.NoError(t, err)
	later := e.waitUpgrade("later", "finished", finished)
	require.Equal(t, domain.UpgradeCanceled, later.Status.Phase)
	require.Equal(t, "canceled before it started", later.Status.Reason)
	require.Empty(t, later.Status.Machines)

	res, err := upgrade.Cancel(e.ctx, e.store, upgrade.CancelRequest{Tenant: e.tenant, Name: "to-113", Actor: "test", Now: time.Now()})
	require.NoError(t, err)
	require.Equal(t, "UpgradeCancelRequested", res.Events[0].Type)
	u := e.waitUpgrade("to-113", "finished", finished)

	require.Equal(t, domain.UpgradeCanceled, u.Status.Phase)
	require.Contains(t, u.Status.Reason, "canceled on request after the current step; 1 of 4 machines on "+sagaTo)
	require.Equal(t, map[string]string{"cp-2": domain.StepDone, "cp-3": domain.StepPending, "cp-1": domain.StepPending, "w-1": domain.StepPending}, phases(u))
	require.Equal(t, map[string]int{"cp-2": 1}, e.upgradeCalls())
	require.True(t, later.Status.EndTime.Before(*u.Status.EndTime), "the queued run did not wait for the running one")

	_, err = upgrade.Cancel(e.ctx, e.store, upgrade.CancelRequest{Tenant: e.tenant, Name: "to-113", Actor: "test", Now: time.Now()})
	require.True(t, domain.IsConflict(err), "a finished run cannot be canceled: %v", err)
}

// TestUpgradeSagaRefusesSkipsAndDowngrades: runs that would skip a minor
// version or go back across one fail before any machine is touched, with the
// reason; they ran one at a time, in the order they were created.
func TestUpgradeSagaRefusesSkipsAndDowngrades(t *testing.T) {
	e := newSagaEnv(t, 1, 1, nil)
	e.createUpgrade("skip", `{"talosVersion":"v1.14.0"}`)
	e.createUpgrade("downgrade", `{"talosVersion":"v1.11.5"}`)
	e.createUpgrade("patch", `{"talosVersion":"v1.12.1","nodeGroups":["workers"]}`)
	e.createUpgrade("unknown-group", `{"talosVersion":"v1.12.1","nodeGroups":["gpu"]}`)
	name, ok := upgrade.Active(e.cache, e.tenant)
	require.True(t, ok)
	require.Equal(t, "skip", name, "the oldest first")
	saga, _ := e.startSaga(nil)

	skip := e.waitUpgrade("skip", "finished", finished)
	require.Equal(t, domain.UpgradeFailed, skip.Status.Phase)
	require.Contains(t, skip.Status.Reason, "refused: cp-1: v1.12.0 to v1.14.0 skips a minor version; upgrade to v1.13.x first; w-1: ")
	down := e.waitUpgrade("downgrade", "finished", finished)
	require.Equal(t, domain.UpgradeFailed, down.Status.Phase)
	require.Contains(t, down.Status.Reason, "v1.12.0 to v1.11.5 is a downgrade across a minor version")
	patch := e.waitUpgrade("patch", "finished", finished)
	require.Equal(t, domain.UpgradeSucceeded, patch.Status.Phase, patch.Status.Reason)
	require.Equal(t, []string{"w-1"}, names(patch))
	unknown := e.waitUpgrade("unknown-group", "finished", finished)
	require.Equal(t, domain.UpgradeFailed, unknown.Status.Phase)
	require.Equal(t, "refused: no node group gpu in the tenant", unknown.Status.Reason)

	require.True(t, skip.Status.EndTime.Compare(*down.Status.StartTime) <= 0, "one run at a time")
	require.True(t, down.Status.EndTime.Compare(*patch.Status.StartTime) <= 0, "one run at a time")
	require.Equal(t, map[string]int{"w-1": 1}, e.upgradeCalls())
	require.False(t, saga.ActiveUpgrade(e.tenant))
	raw, err := json.Marshal(skip.Status.Machines)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"from":"v1.12.0"`, "the refused plan shows what the machines run")
}
