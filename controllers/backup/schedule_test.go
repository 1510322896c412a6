package backup_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/internal/controller/controllertest"
	"github.com/rezuscloud/rezuscloud/projections"
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

// A tenant without machines has no etcd: its schedule makes no backup (and
// no PKI, nor a Failed backup every interval), and a manual backup of it
// fails with the reason. The tenant with machines is backed up as usual.
func TestNoBackupOfATenantWithoutMachines(t *testing.T) {
	e := newEnv(t, 1, `{"interval":"10m","keep":2}`)
	e.Execute(domain.Command{Op: domain.OpCreate, Ref: domain.TenantRef("empty"), Object: &domain.Object{
		Metadata: domain.ObjectMeta{Name: "empty"}, Spec: json.RawMessage(`{"etcdBackup":{"interval":"10m","keep":2}}`)}})
	clock := controllertest.NewClock(time.Date(2026, 1, 2, 3, 1, 0, 0, time.UTC))
	_, stop := e.start("r1", clock)
	defer stop()
	require.Eventually(t, func() bool {
		for _, b := range e.backupList() {
			if b.Status.Phase == domain.BackupSucceeded {
				return true
			}
		}
		return false
	}, 60*time.Second, 10*time.Millisecond, "the tenant with machines backed up")
	empty, err := projections.List[domain.EtcdBackup](e.Cache, domain.EtcdBackupKind, projections.ListOptions{Tenant: "empty"})
	require.NoError(t, err)
	require.Empty(t, empty, "a scheduled backup of a tenant without machines")

	e.Execute(domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(domain.EtcdBackupKind, "empty", "manual"), Object: &domain.Object{
		Metadata: domain.ObjectMeta{Name: "manual", Tenant: "empty", Finalizers: []string{domain.BackupObjectFinalizer}}}})
	require.Eventually(t, func() bool {
		b, ok, err := projections.Get[domain.EtcdBackup](e.Cache, domain.ObjectRef(domain.EtcdBackupKind, "empty", "manual"))
		return err == nil && ok && b.Status.Phase == domain.BackupFailed && strings.Contains(b.Status.Reason, "no machines")
	}, 60*time.Second, 10*time.Millisecond, "the manual backup fails with the reason")
}
