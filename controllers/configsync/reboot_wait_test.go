package configsync_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/controllers/configsync"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/talos"
)

// TestRebootWaitKeepsItsDeadlineAcrossARestart: a control plane that does
// not come back from its config reboot is recorded as waited for (what,
// since when, until when, the last answer) while the other control planes
// wait; a controller started after the first one stopped mid-wait keeps
// the recorded deadline (a fresh one would be four minutes later) and
// records the new answer; at the deadline the machine's ConfigApplied
// names the step and the last answer and the wait is gone; once the node
// answers, the rollout goes on and every machine converges.
func TestRebootWaitKeepsItsDeadlineAcrossARestart(t *testing.T) {
	e := newEnv(t, 3, 1, 1)
	var mu sync.Mutex
	offset := time.Duration(0)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(offset) }
	advance := func(d time.Duration) { mu.Lock(); offset += d; mu.Unlock() }
	withClock := func(c *configsync.Config) { c.Now, c.RebootTimeout = now, 10*time.Minute }

	_, stopFirst := e.startStoppable(withClock)
	e.waitConverged("the first pass")
	e.calls.stayDown("cp-1", "connection refused")
	before := now()
	e.patch("sysctl", rebootPatch, true)

	const waitsFor = "cp-1 to be back after its config reboot"
	w := e.configWait("cp-1", "connection refused")
	require.Equal(t, waitsFor, w.For)
	require.False(t, w.Since.Before(before.Truncate(time.Second)), "since %s, the patch came at %s", w.Since, before)
	require.Equal(t, 10*time.Minute, w.Deadline.Sub(w.Since), "RebootTimeout")
	require.Equal(t, "waiting for "+waitsFor+": connection refused, 1m (fails in 9m)", w.Message(w.Since.Add(time.Minute)))
	require.NotEqual(t, e.nodeHashes()["cp-2"], "", "cp-2 is up")

	// Stopped mid-wait; four minutes later another replica leads.
	stopFirst()
	advance(4 * time.Minute)
	e.calls.stayDown("cp-1", "no route to host")
	e.startStoppable(withClock)
	resumed := e.configWait("cp-1", "no route to host")
	require.Equal(t, w.Since, resumed.Since, "the resumed wait began when the first did")
	require.Equal(t, w.Deadline, resumed.Deadline, "the resumed wait keeps its deadline")

	advance(6*time.Minute + time.Second)
	require.Eventually(t, func() bool {
		m := e.machineNamed("cp-1")
		c := domain.FindCondition(m.Status.Conditions, domain.ConditionConfigApplied)
		return c != nil && c.Reason == configsync.ReasonNotBack && m.Status.ConfigWait == nil
	}, 30*time.Second, 5*time.Millisecond, "cp-1 failed at its deadline")
	m := e.machineNamed("cp-1")
	c := domain.FindCondition(m.Status.Conditions, domain.ConditionConfigApplied)
	require.Equal(t, "False", c.Status)
	require.Equal(t, "the config reboot of cp-1 passed its deadline of 10m waiting for "+waitsFor+"; last answer: no route to host", c.Message)
	state, _ := m.Status.ConfigState()
	require.Equal(t, domain.ConfigStateFailed, state)
	c2 := domain.FindCondition(e.machineNamed("cp-2").Status.Conditions, domain.ConditionConfigApplied)
	require.Equal(t, talos.ReasonPending, c2.Reason, "cp-2 still waits for the control planes")

	e.calls.stayDown("cp-1", "")
	e.waitConverged("cp-1 back")
	c = domain.FindCondition(e.machineNamed("cp-1").Status.Conditions, domain.ConditionConfigApplied)
	require.Equal(t, talos.ReasonAppliedWithReboot, c.Reason)
}

// configWait waits until machine's recorded config wait has lastError.
func (e *env) configWait(machine, lastError string) domain.StepWait {
	e.T.Helper()
	var w *domain.StepWait
	require.EventuallyWithT(e.T, func(c *assert.CollectT) {
		w = e.machineNamed(machine).Status.ConfigWait
		if assert.NotNil(c, w, "%s's config wait", machine) {
			assert.Equal(c, lastError, w.LastError, "%s's config wait: %+v", machine, w)
		}
	}, 30*time.Second, 5*time.Millisecond, "%s waited for", machine)
	return *w
}
