package apply

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestResyncKeys(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *time.Time { x := now.Add(-d); return &x }
	tenant := func(name string, f func(*domain.Tenant)) domain.Tenant {
		t := domain.Tenant{Metadata: domain.ObjectMeta{Name: name, Generation: 2, Finalizers: []string{InfraFinalizer}}}
		t.Status.ObservedGeneration = 2
		t.Status.Conditions = []domain.Condition{{Type: "Reconciled", Status: "True"}}
		t.Status.Drift = &domain.DriftStatus{CheckedAt: ago(2 * time.Hour)}
		if f != nil {
			f(&t)
		}
		return t
	}
	w := &Worker{cfg: Config{DriftInterval: time.Hour, DriftMinInterval: time.Minute}}
	tenants := []domain.Tenant{
		tenant("due", nil),
		tenant("checked-recently", func(t *domain.Tenant) { t.Status.Drift.CheckedAt = ago(time.Minute) }),
		tenant("never-checked", func(t *domain.Tenant) { t.Status.Drift = nil }),
		tenant("own-interval", func(t *domain.Tenant) {
			t.Spec.DriftCheck = &domain.DriftCheck{Interval: "30s"}
			t.Status.Drift.CheckedAt = ago(90 * time.Second) // the server's minimum (1m) passed
		}),
		tenant("own-interval-not-yet", func(t *domain.Tenant) {
			t.Spec.DriftCheck = &domain.DriftCheck{Interval: "4h"}
		}),
		tenant("spec-pending", func(t *domain.Tenant) { t.Metadata.Generation = 3 }),
		tenant("apply-failed", func(t *domain.Tenant) { t.Status.Conditions[0].Status = "False" }),
		tenant("never-applied", func(t *domain.Tenant) { t.Metadata.Finalizers = nil }),
		tenant("deleting", func(t *domain.Tenant) {
			t.Metadata.DeletionTimestamp = &now
			t.Status.Drift.CheckedAt = ago(time.Second)
		}),
	}
	require.Equal(t, []string{"due", "never-checked", "own-interval", "deleting"}, w.resyncKeys(tenants, now))

	off := &Worker{cfg: Config{DriftInterval: 0, DriftMinInterval: time.Minute}}
	require.Equal(t, []string{"own-interval", "deleting"}, off.resyncKeys(tenants, now),
		"with the server's default off, only tenants declaring a check are checked")
}

func TestDriftAfterApply(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	sched := domain.DriftSchedule{Every: time.Hour, Action: domain.DriftCorrect}

	var s domain.TenantStatus
	driftAfterApply(&s, "apply-2", sched, now)
	require.Equal(t, "applied by apply-2", s.Drift.Summary)
	require.Equal(t, "1h0m0s", s.Drift.Interval)
	c := domain.FindCondition(s.Conditions, domain.ConditionDrifted)
	require.Equal(t, "False", c.Status)
	require.Equal(t, domain.ReasonApplied, c.Reason)

	// The apply a drift check queued says what it corrected.
	s.Drift = &domain.DriftStatus{Add: 1, Summary: "1 to add, 0 to change, 0 to destroy", Correction: "apply-3"}
	driftAfterApply(&s, "apply-3", sched, now)
	require.Equal(t, "corrected by apply-3 (found: 1 to add, 0 to change, 0 to destroy)", s.Drift.Summary)
	require.Zero(t, s.Drift.Add)
	require.Equal(t, now, *s.Drift.CheckedAt)
}
