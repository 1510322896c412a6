package upgrade_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/controllers/upgrade"
	"github.com/rezuscloud/rezuscloud/domain"
)

// TestUpgradeWaitsForTheMaintenanceWindow: a tenant whose window is
// Saturday 02:00-03:00 UTC gets an upgrade on a Wednesday (the saga's
// clock is the test's). Nothing starts and the run says when the window
// opens, while the tenant's applies are not held back; in the window the
// first machine goes; the window closes while it runs: it finishes and the
// next waits; in the next window the run completes. An upgrade with
// spec.now does not wait.
func TestUpgradeWaitsForTheMaintenanceWindow(t *testing.T) {
	e := newSagaEnv(t, 1, 2, nil)
	tenantRef := domain.Ref{Kind: domain.TenantKind.Kind, Name: e.tenant}
	e.updateSpec(tenantRef, `{"talosVersion":"`+sagaFrom+`","kubernetesVersion":"`+sagaKube+`",
		"maintenance":{"windows":[{"days":["Sat"],"start":"02:00","duration":"1h"}]}}`)
	var mu sync.Mutex
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC) // a Wednesday
	set := func(t time.Time) { mu.Lock(); now = t; mu.Unlock() }
	// The window closes as soon as the first machine has been asked to upgrade.
	closeAfterFirst := false
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		if closeAfterFirst && e.upgradeCalls()["cp-1"] > 0 {
			return time.Date(2026, 12, 5, 3, 30, 0, 0, time.UTC)
		}
		return now
	}
	saga, _ := e.startSaga(func(c *upgrade.Config) { c.Now = clock })
	e.createUpgrade("weekend", `{"talosVersion":"`+sagaTo+`"}`)
	u := e.waitUpgrade("weekend", "waiting for the window", func(u domain.Upgrade) bool {
		return strings.HasPrefix(u.Status.Reason, "Waiting for maintenance window")
	})
	require.Equal(t, "Waiting for maintenance window (opens Sat 02:00 UTC)", u.Status.Reason)
	require.NotNil(t, u.Status.MaintenanceOpensAt)
	require.Equal(t, time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC), u.Status.MaintenanceOpensAt.UTC())
	for _, m := range u.Status.Machines {
		require.Equal(t, domain.StepPending, m.Phase, m.Name)
	}
	require.Empty(t, e.upgradeCalls(), "no machine was asked to upgrade")
	require.False(t, saga.ActiveUpgrade(e.tenant), "a run waiting between machines holds no apply back")
	// So a scale-down may remove a machine the run planned: it is skipped,
	// not failed.
	e.execute(domain.Command{Op: domain.OpDelete, Ref: e.ref(domain.MachineKind, "w-2")})

	mu.Lock()
	closeAfterFirst = true
	mu.Unlock()
	set(time.Date(2026, 12, 5, 2, 10, 0, 0, time.UTC))
	u = e.waitUpgrade("weekend", "the first machine done, the next waiting", func(u domain.Upgrade) bool {
		return u.Status.Machines[0].Phase == domain.StepDone && u.Status.MaintenanceOpensAt != nil
	})
	require.Equal(t, "cp-1", u.Status.Machines[0].Name)
	require.Equal(t, "Waiting for maintenance window (opens Sat 02:00 UTC)", u.Status.Reason)
	require.Equal(t, time.Date(2026, 12, 12, 2, 0, 0, 0, time.UTC), u.Status.MaintenanceOpensAt.UTC(), "next Saturday")
	for _, m := range u.Status.Machines[1:] {
		require.Equal(t, domain.StepPending, m.Phase, m.Name)
	}

	mu.Lock()
	closeAfterFirst = false
	mu.Unlock()
	set(time.Date(2026, 12, 12, 2, 5, 0, 0, time.UTC))
	u = e.waitUpgrade("weekend", "finished", finished)
	require.Equal(t, domain.UpgradeSucceeded, u.Status.Phase, u.Status.Reason)
	require.Nil(t, u.Status.MaintenanceOpensAt)
	require.Equal(t, "w-2", u.Status.Machines[2].Name)
	require.Equal(t, domain.StepDone, u.Status.Machines[2].Phase)
	require.Equal(t, "the machine was removed before its turn", u.Status.Machines[2].Message)
	require.Zero(t, e.upgradeCalls()["w-2"])

	// spec.now: no wait, even on a Wednesday.
	set(time.Date(2026, 12, 16, 12, 0, 0, 0, time.UTC))
	e.createUpgrade("urgent", `{"talosVersion":"v1.13.1","now":true}`)
	u = e.waitUpgrade("urgent", "finished", finished)
	require.Equal(t, domain.UpgradeSucceeded, u.Status.Phase, u.Status.Reason)
}
