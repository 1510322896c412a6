package upgrade_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/controllers/upgrade"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// requireOneAtATime checks that no step of the run started before the one
// before it finished.
func requireOneAtATime(t *testing.T, u domain.Upgrade) {
	t.Helper()
	var prev *time.Time
	for _, m := range u.Status.Machines {
		require.NotNil(t, m.Started, m.Name)
		require.NotNil(t, m.Finished, m.Name)
		if prev != nil {
			require.False(t, m.Started.Before(*prev), "%s started before the machine before it finished", m.Name)
		}
		prev = m.Finished
	}
}

// TestKubernetesUpgradeRollsTheClusterInOrder: changing the tenant's
// kubernetesVersion starts a Kubernetes run that gives a 3+2 cluster its next
// config through the Talos API — control planes first and one at a time, then
// the workers — each machine exactly once (one ApplyConfiguration, one
// MachineConfigApplied event); every node then runs the target's kubelet
// (the emulator says so) and holds the config its annotation names, and the
// tenant's status.kubernetesVersion is the target. An explicit Upgrade then
// writes its version into the tenant's spec too, without starting a run.
func TestKubernetesUpgradeRollsTheClusterInOrder(t *testing.T) {
	e := newSagaEnv(t, 3, 2, nil)
	_, stop := e.startSaga(nil)
	// The change comes while no replica runs the saga: the durable consumer
	// still has it when one starts.
	stop()
	tenantRef := domain.TenantRef(e.tenant)
	e.updateSpec(tenantRef, `{"talosVersion":"`+sagaFrom+`","kubernetesVersion":"`+sagaKubeTo+`"}`)
	e.startSaga(nil)
	var run string
	sagaEventually(t, 10*time.Second, "a run started by the version change", func() bool {
		for _, u := range e.upgrades() {
			run = u.Metadata.Name
		}
		return run != ""
	})
	u := e.upgrade(run)
	require.Equal(t, sagaKubeTo, u.Spec.KubernetesVersion)
	require.Empty(t, u.Spec.TalosVersion)
	require.Equal(t, "tenant", u.Metadata.Labels[upgrade.LabelTrigger])
	require.Contains(t, run, "kubernetes-v1-35-0-")

	u = e.waitUpgrade(run, "finished", finished)
	require.Equal(t, domain.UpgradeSucceeded, u.Status.Phase, "reason: %s", u.Status.Reason)
	require.Equal(t, "5 of 5 machines on "+sagaKubeTo, u.Status.Reason)
	require.Equal(t, []string{"cp-2", "cp-3", "cp-1", "w-1", "w-2"}, names(u))
	requireOneAtATime(t, u)
	for _, m := range u.Status.Machines {
		require.Equal(t, domain.StepDone, m.Phase, m.Name)
		require.Equal(t, sagaKube, m.From, m.Name)
		require.Equal(t, sagaKubeTo, m.To, m.Name)
	}
	for name, ph := range e.stepPhases(run) {
		require.Equal(t, []string{domain.StepPending, domain.StepUpgrading, domain.StepVerifying, domain.StepDone}, ph, name)
	}
	applies := e.applyCalls()
	for _, n := range e.nodes {
		st, err := e.em.Get(n)
		require.NoError(t, err)
		require.Equal(t, sagaKubeTo, st.KubernetesVersion, n)
		require.Equal(t, sagaFrom, st.Version, "%s: the Talos version stays", n)
		m := e.machine(n)
		require.Equal(t, st.ConfigHash, m.Metadata.Annotations[domain.AnnotationConfigHash], n)
		require.True(t, m.Status.ConfigUpToDate, n)
		c := domain.FindCondition(m.Status.Conditions, domain.ConditionConfigApplied)
		require.NotNil(t, c, n)
		require.Equal(t, "AppliedInPlace", c.Reason, n)
		require.Equal(t, 1, e.configsApplied(n), "%s took its config once", n)
		require.Equal(t, 1, applies[n], n)
	}
	require.Empty(t, e.upgradeCalls(), "no Talos upgrade")
	tn := e.tenantObj()
	require.Equal(t, sagaKubeTo, tn.Status.KubernetesVersion)
	require.Equal(t, sagaKubeTo, tn.Spec.KubernetesVersion)

	// An explicit run writes its version into the spec, which starts no
	// run; a later Talos change of a group still does (and shows that the
	// trigger has seen the spec write before it).
	e.createUpgrade("k8s-patch", `{"kubernetesVersion":"v1.35.1"}`)
	u = e.waitUpgrade("k8s-patch", "finished", finished)
	require.Equal(t, domain.UpgradeSucceeded, u.Status.Phase, "reason: %s", u.Status.Reason)
	tn = e.tenantObj()
	require.Equal(t, "v1.35.1", tn.Status.KubernetesVersion)
	require.Equal(t, "v1.35.1", tn.Spec.KubernetesVersion, "written back")
	e.updateSpec(e.ref(domain.NodeGroupKind, "workers"), `{"role":"worker","count":2,"provider":"emu","talosVersion":"v1.12.1"}`)
	sagaEventually(t, 10*time.Second, "the node group's run", func() bool { return len(e.upgrades()) == 3 })
	for _, u := range e.upgrades() {
		if u.Metadata.Name != run && u.Metadata.Name != "k8s-patch" {
			require.Equal(t, "v1.12.1", u.Spec.TalosVersion, "the only other run is the node group's")
			e.waitUpgrade(u.Metadata.Name, "finished", finished)
		}
	}
	require.Len(t, e.upgrades(), 3)
	for _, n := range e.nodes {
		st, err := e.em.Get(n)
		require.NoError(t, err)
		require.Equal(t, "v1.35.1", st.KubernetesVersion, n)
	}
}

// TestKubernetesUpgradeRefusesBeforeAnyCall: a Kubernetes run that would skip
// a minor version, go back, or that the machines' Talos does not run (1.12
// runs Kubernetes up to 1.35) fails before any config is applied.
func TestKubernetesUpgradeRefusesBeforeAnyCall(t *testing.T) {
	e := newSagaEnv(t, 1, 1, nil)
	e.createUpgrade("skip", `{"kubernetesVersion":"v1.36.0"}`)
	e.createUpgrade("downgrade", `{"kubernetesVersion":"v1.34.1"}`)
	e.startSaga(nil)
	skip := e.waitUpgrade("skip", "finished", finished)
	require.Equal(t, domain.UpgradeFailed, skip.Status.Phase)
	require.Contains(t, skip.Status.Reason, "refused: Kubernetes v1.34.2 to v1.36.0 skips a minor version; upgrade to v1.35.x first")
	down := e.waitUpgrade("downgrade", "finished", finished)
	require.Equal(t, domain.UpgradeFailed, down.Status.Phase)
	require.Contains(t, down.Status.Reason, "refused: Kubernetes v1.34.2 to v1.34.1 is a downgrade")

	// Configs on 1.35 (as a run left them): 1.36 is the next minor, which
	// Talos 1.12 does not run.
	e.execute(domain.Command{Op: domain.OpUpdateStatus, Ref: domain.TenantRef(e.tenant), Object: &domain.Object{Status: json.RawMessage(`{"kubernetesVersion":"v1.35.2"}`)}})
	e.createUpgrade("unsupported", `{"kubernetesVersion":"v1.36.0"}`)
	u := e.waitUpgrade("unsupported", "finished", finished)
	require.Equal(t, domain.UpgradeFailed, u.Status.Phase)
	require.Contains(t, u.Status.Reason, "refused: version of Kubernetes 1.36.0 is too new to be used with Talos 1.12.0")
	require.Len(t, u.Status.Machines, 2, "the refused plan shows the machines")
	require.Empty(t, e.applyCalls())
	require.Equal(t, "v1.35.2", e.tenantObj().Status.KubernetesVersion)
}

// TestKubernetesUpgradeRollsBackAnUnhealthyMachine: a worker whose services
// are not healthy on its new config gets its previous config back (recorded:
// a second MachineConfigApplied), and the run fails with the reason; the
// tenant's configs still carry the old version.
func TestKubernetesUpgradeRollsBackAnUnhealthyMachine(t *testing.T) {
	e := newSagaEnv(t, 1, 2, nil)
	e.startSaga(func(c *upgrade.Config) { c.HealthTimeout = 300 * time.Millisecond })
	_, err := e.em.InjectFault("w-1", emulator.Faults{Unhealthy: true})
	require.NoError(t, err)
	e.createUpgrade("k8s", `{"kubernetesVersion":"`+sagaKubeTo+`"}`)
	u := e.waitUpgrade("k8s", "finished", finished)

	require.Equal(t, domain.UpgradeFailed, u.Status.Phase)
	require.Equal(t, map[string]string{"cp-1": domain.StepDone, "w-1": domain.StepRolledBack, "w-2": domain.StepPending}, phases(u))
	w1 := u.Status.Machines[1]
	require.Contains(t, w1.Error, "Verifying passed its deadline of 300ms waiting for the kubelet on w-1 to run "+sagaKubeTo+" and be Ready; last answer: services not healthy")
	require.Contains(t, w1.Error, "rolled back to Kubernetes "+sagaKube)
	require.Contains(t, w1.Error, "but it is not healthy", "the fault outlives the rollback")
	require.Contains(t, u.Status.Reason, "w-1 (RolledBack): Verifying passed its deadline")
	require.Nil(t, w1.Wait, "nothing waits once the step is over")
	require.Equal(t, []string{domain.StepPending, domain.StepUpgrading, domain.StepVerifying, domain.StepRollingBack, domain.StepRolledBack}, e.stepPhases("k8s")["w-1"])

	for n, want := range map[string]string{"cp-1": sagaKubeTo, "w-1": sagaKube, "w-2": sagaKube} {
		st, err := e.em.Get(n)
		require.NoError(t, err)
		require.Equal(t, want, st.KubernetesVersion, n)
	}
	require.Equal(t, 2, e.configsApplied("w-1"), "the new config and the previous one back")
	require.Equal(t, 1, e.configsApplied("cp-1"))
	require.Equal(t, 0, e.configsApplied("w-2"))
	st, err := e.em.Get("w-1")
	require.NoError(t, err)
	require.Equal(t, st.ConfigHash, e.machine("w-1").Metadata.Annotations[domain.AnnotationConfigHash])
	tn := e.tenantObj()
	require.Equal(t, sagaKube, tn.Status.KubernetesVersion, "a failed run moves nothing")
	require.Equal(t, sagaKube, tn.Spec.KubernetesVersion)
}

// TestKubernetesUpgradeResumesWithoutASecondApply stops the saga while a
// control plane verifies, and again with a step recorded Upgrading after its
// config went through (as a crash between the apply and the next record
// leaves it): the run Succeeds, and every machine has one MachineConfigApplied
// event (the resumed step re-applies the same bytes and records nothing new).
func TestKubernetesUpgradeResumesWithoutASecondApply(t *testing.T) {
	e := newSagaEnv(t, 3, 2, nil)
	_, err := e.em.InjectFault("cp-3", emulator.Faults{Unhealthy: true})
	require.NoError(t, err)
	_, stop := e.startSaga(nil)
	e.createUpgrade("k8s", `{"kubernetesVersion":"`+sagaKubeTo+`"}`)
	e.waitUpgrade("k8s", "cp-3 verifying", stepIs("cp-3", domain.StepVerifying))
	stop()
	require.Equal(t, "cp-3", e.upgrade("k8s").Status.Current)
	// The crash came between the apply and the record of Verifying.
	w := eventstore.StatusWriter{Store: e.store, Actor: upgrade.Actor, Now: time.Now}
	_, err = eventstore.UpdateStatus(e.ctx, w, e.ref(domain.UpgradeKind, "k8s"), func(_ *domain.Object, st *domain.UpgradeStatus) (bool, error) {
		for i := range st.Machines {
			if st.Machines[i].Name == "cp-3" {
				st.Machines[i].Phase = domain.StepUpgrading
			}
		}
		return true, nil
	})
	require.NoError(t, err)
	_, err = e.em.InjectFault("cp-3", emulator.Faults{})
	require.NoError(t, err)

	e.startSaga(nil)
	u := e.waitUpgrade("k8s", "finished", finished)
	require.Equal(t, domain.UpgradeSucceeded, u.Status.Phase, "reason: %s", u.Status.Reason)
	requireOneAtATime(t, u)
	for _, n := range e.nodes {
		st, err := e.em.Get(n)
		require.NoError(t, err)
		require.Equal(t, sagaKubeTo, st.KubernetesVersion, n)
		require.Equal(t, 1, e.configsApplied(n), "%s took its config once", n)
	}
	require.Equal(t, map[string]int{"cp-1": 1, "cp-2": 1, "cp-3": 2, "w-1": 1, "w-2": 1}, e.applyCalls(), "the resumed step sent the same config again")
}

// TestTalosAndKubernetesRunsQueue: one tenant write that moves both versions
// queues the Talos run, then the Kubernetes run (Kubernetes 1.36 needs Talos
// 1.13 here); they run one after the other, and both succeed.
func TestTalosAndKubernetesRunsQueue(t *testing.T) {
	e := newSagaEnv(t, 1, 1, nil)
	e.startSaga(nil)
	// The configs carry 1.35 (a run left them there); 1.36 is the next minor.
	e.execute(domain.Command{Op: domain.OpUpdateStatus, Ref: domain.TenantRef(e.tenant), Object: &domain.Object{Status: json.RawMessage(`{"kubernetesVersion":"v1.35.2"}`)}})
	e.updateSpec(domain.TenantRef(e.tenant), `{"talosVersion":"`+sagaFrom+`","kubernetesVersion":"v1.35.2"}`)
	e.updateSpec(domain.TenantRef(e.tenant), `{"talosVersion":"`+sagaTo+`","kubernetesVersion":"v1.36.0"}`)
	var runs []domain.Upgrade
	sagaEventually(t, 10*time.Second, "two runs", func() bool { runs = e.upgrades(); return len(runs) == 2 })
	var talosRun, kubeRun string
	for _, u := range runs {
		if u.Spec.Kubernetes() {
			kubeRun = u.Metadata.Name
		} else {
			talosRun = u.Metadata.Name
		}
	}
	require.NotEmpty(t, talosRun)
	require.NotEmpty(t, kubeRun)
	tu := e.waitUpgrade(talosRun, "finished", finished)
	ku := e.waitUpgrade(kubeRun, "finished", finished)
	require.Equal(t, domain.UpgradeSucceeded, tu.Status.Phase, tu.Status.Reason)
	require.Equal(t, domain.UpgradeSucceeded, ku.Status.Phase, ku.Status.Reason)
	require.True(t, tu.Status.EndTime.Compare(*ku.Status.StartTime) <= 0, "the Kubernetes run waited for the Talos run")
	for _, n := range e.nodes {
		st, err := e.em.Get(n)
		require.NoError(t, err)
		require.Equal(t, sagaTo, st.Version, n)
		require.Equal(t, "v1.36.0", st.KubernetesVersion, n)
	}
}

// TestKubernetesTriggerOnAServerThatNeverRememberedIt: a saga whose consumer
// predates Kubernetes runs has no remembered Kubernetes version for a tenant.
// A tenant change then remembers the declared version when the configs carry
// it, and starts a run when they carry another.
func TestKubernetesTriggerOnAServerThatNeverRememberedIt(t *testing.T) {
	e := newSagaEnv(t, 1, 1, nil)
	_, stop := e.startSaga(nil)
	stop()
	kv, err := e.store.JetStream().KeyValue(e.ctx, upgrade.VersionsBucket)
	require.NoError(t, err)
	forget := func() { require.NoError(t, kv.Purge(e.ctx, e.tenant+"._kubernetes")) }

	forget()
	e.updateSpec(domain.TenantRef(e.tenant), `{"talosVersion":"`+sagaFrom+`","kubernetesVersion":"`+sagaKube+`","controlPlane":{"endpoint":"https://10.0.0.1:6443"}}`)
	_, stop = e.startSaga(nil)
	sagaEventually(t, 10*time.Second, "the declared version remembered", func() bool {
		v, err := kv.Get(e.ctx, e.tenant+"._kubernetes")
		return err == nil && string(v.Value()) == sagaKube
	})
	require.Empty(t, e.upgrades(), "the configs carry the declared version")
	stop()

	forget()
	e.updateSpec(domain.TenantRef(e.tenant), `{"talosVersion":"`+sagaFrom+`","kubernetesVersion":"`+sagaKubeTo+`"}`)
	e.startSaga(nil)
	sagaEventually(t, 10*time.Second, "a run", func() bool { return len(e.upgrades()) == 1 })
	u := e.waitUpgrade(e.upgrades()[0].Metadata.Name, "finished", finished)
	require.Equal(t, domain.UpgradeSucceeded, u.Status.Phase, u.Status.Reason)
	require.Equal(t, sagaKubeTo, u.Spec.KubernetesVersion)
}
