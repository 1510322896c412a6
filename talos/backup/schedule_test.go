package backup_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/internal/controller/controllertest"
)

// TestScheduleOnePerInterval: with a 10m schedule under a fake clock, the
// controller takes exactly one backup per interval — across a restart,
// with a second replica running beside it, and after the second replica
// takes over — and retention keeps the newest two (objects included).
func TestScheduleOnePerInterval(t *testing.T) {
	e := newEnv(t, 1, `{"interval":"10m","keep":2}`)
	clock := controllertest.NewClock(time.Date(2026, 1, 2, 3, 1, 0, 0, time.UTC))
	names := func() []string {
		var out []string
		for _, b := range e.backupList() {
			if b.Status.Phase == domain.BackupSucceeded && b.Metadata.DeletionTimestamp == nil {
				out = append(out, b.Metadata.Name)
			}
		}
		slices.Sort(out)
		return out
	}
	settle := func(want ...string) {
		t.Helper()
		require.Eventually(t, func() bool { return slices.Equal(names(), want) && len(e.backupList()) == len(want) },
			60*time.Second, 10*time.Millisecond, "backups %v (have %v)", want, names())
	}
	// waitArmed waits until a leader's resync waits on the clock, beyond the
	// n waits already there.
	waitArmed := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool { return len(clock.Waits()) > n }, 30*time.Second, 5*time.Millisecond, "resync armed")
	}

	// waitFuture waits until the leader's resync waits for a time still ahead.
	waitFuture := func() {
		t.Helper()
		require.Eventually(t, func() bool {
			return slices.ContainsFunc(clock.Waits(), func(w time.Time) bool { return w.After(clock.Now()) })
		}, 30*time.Second, 5*time.Millisecond, "resync armed")
	}

	r1, stop1 := e.start("r1", clock)
	settle("sched-20260102-0300")
	require.True(t, r1.Leading())
	waitArmed(0)

	// A restart in the same slot takes no second backup.
	stop1()
	n := len(clock.Waits())
	r1, stop1 = e.start("r1", clock)
	require.Eventually(t, r1.Leading, 30*time.Second, 5*time.Millisecond)
	waitArmed(n)
	settle("sched-20260102-0300")

	// Two replicas: one backup per interval.
	r2, stop2 := e.start("r2", clock)
	defer stop2()
	clock.Advance(10 * time.Minute)
	settle("sched-20260102-0300", "sched-20260102-0310")
	require.False(t, r2.Leading())
	waitFuture()
	clock.Advance(10 * time.Minute)
	settle("sched-20260102-0310", "sched-20260102-0320") // keep 2: 03:00 retired

	// The leader goes; the other replica goes on from where it was.
	n = len(clock.Waits())
	stop1()
	require.Eventually(t, r2.Leading, 60*time.Second, 10*time.Millisecond)
	waitArmed(n)
	settle("sched-20260102-0310", "sched-20260102-0320")
	clock.Advance(10 * time.Minute)
	settle("sched-20260102-0320", "sched-20260102-0330")
}
