package upgrade_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/controllers/upgrade"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator"
)

// TestVerifyWaitKeepsItsDeadlineAcrossARestart is issue 43's stuck
// upgrade: a control plane whose Kubernetes never starts at the target
// (the emulator's kubernetesDownAt fault). The step records what it waits
// for, since when and until when, with the last answer; a saga stopped
// mid-wait and started again eleven minutes later (the clock moved) keeps
// the recorded ten-minute deadline, so the step fails at once, the machine
// gets its previous config back and the run ends Failed naming the step
// and the last answer. A wait begun afresh after the restart would have
// waited ten more minutes and timed this test out.
func TestVerifyWaitKeepsItsDeadlineAcrossARestart(t *testing.T) {
	e := newSagaEnv(t, 1, 0, nil)
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	_, err := e.em.InjectFault("cp-1", emulator.Faults{KubernetesDownAt: sagaKubeTo})
	require.NoError(t, err)

	_, stop := e.startSaga(func(c *upgrade.Config) { c.Now = now })
	e.createUpgrade("k8s", `{"kubernetesVersion":"`+sagaKubeTo+`","deadlines":{"verify":"10m"}}`)
	// The first answer may still be the old static pods (the kubelet has
	// not taken the new config yet): the wait is recorded again when the
	// answer changes.
	u := e.waitUpgrade("k8s", "cp-1 waits for its kube-apiserver", func(u domain.Upgrade) bool {
		m := u.Status.Machines
		return len(m) == 1 && m[0].Phase == domain.StepVerifying && m[0].Wait != nil && strings.Contains(m[0].Wait.LastError, "kube-apiserver is not running")
	})
	w := *u.Status.Machines[0].Wait
	require.Equal(t, "kube-apiserver on cp-1 to answer "+sagaKubeTo, w.For)
	require.Equal(t, 10*time.Minute, w.Deadline.Sub(w.Since))
	require.Contains(t, w.LastError, "kube-apiserver is not running")
	require.Equal(t, "waiting for "+w.For+": "+w.LastError, u.Status.Machines[0].Message)
	require.Contains(t, w.Message(w.Since.Add(250*time.Second)), ", 4m10s (fails in 5m50s)")
	stop()

	skew.Store(int64(11 * time.Minute))
	e.startSaga(func(c *upgrade.Config) { c.Now = now })
	u = e.waitUpgrade("k8s", "finished", finished)

	require.Equal(t, domain.UpgradeFailed, u.Status.Phase)
	cp := u.Status.Machines[0]
	require.Equal(t, domain.StepRolledBack, cp.Phase)
	require.Nil(t, cp.Wait)
	require.Contains(t, cp.Error, "Verifying passed its deadline of 10m waiting for kube-apiserver on cp-1 to answer "+sagaKubeTo+"; last answer: static pods not on Kubernetes "+sagaKubeTo)
	require.Contains(t, cp.Error, "rolled back to Kubernetes "+sagaKube)
	require.Contains(t, u.Status.Reason, "cp-1 (RolledBack): Verifying passed its deadline")
	st, err := e.em.Get("cp-1")
	require.NoError(t, err)
	require.Equal(t, sagaKube, st.KubernetesVersion, "the previous config is back")

	// Every recorded look at the wait carries the deadline it began with.
	for _, d := range e.recordedWaits("k8s", "cp-1", w.For) {
		require.True(t, d.Equal(w.Deadline), "deadline %s recorded after the restart, want %s", d, w.Deadline)
	}
}

// recordedWaits replays the upgrade's events and returns the deadline of
// every recorded wait of machine for what.
func (e *sagaEnv) recordedWaits(name, machine, what string) []time.Time {
	var out []time.Time
	e.replayUpgrade(name, func(u domain.Upgrade) {
		for _, m := range u.Status.Machines {
			if m.Name == machine && m.Wait != nil && m.Wait.For == what {
				out = append(out, m.Wait.Deadline)
			}
		}
	})
	return out
}

// TestRunRefusesAVersionItsProviderDoesNotRun: an Upgrade that reached the
// store without the API's check (a Rollout writes them itself) to a
// Kubernetes version the node groups' Provider does not run ends Failed
// before any machine is touched, naming the groups and the versions.
func TestRunRefusesAVersionItsProviderDoesNotRun(t *testing.T) {
	e := newSagaEnv(t, 1, 1, nil)
	e.execute(domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(domain.ProviderKind, "", "emu"),
		Object: &domain.Object{Spec: []byte(`{"type":"emulated","versions":{"kubernetes":["` + sagaKube + `"]}}`)}})
	e.startSaga(nil)
	e.createUpgrade("k8s", `{"kubernetesVersion":"`+sagaKubeTo+`"}`)
	u := e.waitUpgrade("k8s", "finished", finished)

	require.Equal(t, domain.UpgradeFailed, u.Status.Phase)
	require.Equal(t, `refused: node groups cp, workers: provider "emu" runs Kubernetes `+sagaKube+` only, not `+sagaKubeTo, u.Status.Reason)
	require.Empty(t, u.Status.Machines)
	for _, n := range []string{"cp-1", "w-1"} {
		st, err := e.em.Get(n)
		require.NoError(t, err)
		require.Equal(t, sagaKube, st.KubernetesVersion, n)
	}
}
