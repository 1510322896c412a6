package backup

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestPickMember(t *testing.T) {
	cases := []struct {
		name  string
		cands []candidate
		want  string
	}{
		{"a follower before the leader", []candidate{{Name: "cp-1", Healthy: true, Leader: true}, {Name: "cp-2", Healthy: true}}, "cp-2"},
		{"the leader when alone healthy", []candidate{{Name: "cp-1", Healthy: true, Leader: true}, {Name: "cp-2"}}, "cp-1"},
		{"the first healthy follower", []candidate{{Name: "cp-1"}, {Name: "cp-2", Healthy: true}, {Name: "cp-3", Healthy: true}}, "cp-2"},
		{"none healthy", []candidate{{Name: "cp-1"}, {Name: "cp-2"}}, ""},
		{"none at all", nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := pickMember(tc.cands)
			require.Equal(t, tc.want != "", ok)
			require.Equal(t, tc.want, got.Name)
		})
	}
}

func TestRetire(t *testing.T) {
	now := time.Date(2026, 1, 20, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { x := now.Add(-d); return &x }
	b := func(name, phase string, done time.Duration) domain.EtcdBackup {
		return domain.EtcdBackup{Metadata: domain.ObjectMeta{Name: name, CreationTimestamp: at(done + time.Minute)},
			Status: domain.EtcdBackupStatus{Phase: phase, CompletedAt: at(done)}}
	}
	all := []domain.EtcdBackup{
		b("s1", domain.BackupSucceeded, 4*time.Hour), b("s2", domain.BackupSucceeded, 3*time.Hour),
		b("s3", domain.BackupSucceeded, 2*time.Hour), b("s4", domain.BackupSucceeded, time.Hour),
		b("f-old", domain.BackupFailed, 8*24*time.Hour), b("f-new", domain.BackupFailed, 6*24*time.Hour),
		b("p", domain.BackupPending, 0), b("r", domain.BackupRunning, 0),
	}
	cases := []struct {
		name  string
		keep  int
		inUse map[string]bool
		want  []string
	}{
		{"keep 2 retires the two oldest and old failures", 2, nil, []string{"f-old", "s1", "s2"}},
		{"keep more than there are", 10, nil, []string{"f-old"}},
		{"no schedule: only old failures", 0, nil, []string{"f-old"}},
		{"a backup a restore uses stays", 2, map[string]bool{"s1": true}, []string{"f-old", "s2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := retire(slices.Clone(all), tc.keep, now, tc.inUse)
			slices.Sort(got)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestDueSlot(t *testing.T) {
	now := time.Date(2026, 1, 2, 7, 31, 0, 0, time.UTC)
	on := &domain.Tenant{Spec: domain.TenantSpec{EtcdBackup: &domain.EtcdBackupSchedule{Interval: "6h", Keep: 7}}}
	slot, ok := dueSlot(on, now)
	require.True(t, ok)
	require.Equal(t, time.Date(2026, 1, 2, 6, 0, 0, 0, time.UTC), slot)
	_, ok = dueSlot(&domain.Tenant{}, now)
	require.False(t, ok, "no schedule")
	deleting := *on
	deleting.Metadata.DeletionTimestamp = &now
	_, ok = dueSlot(&deleting, now)
	require.False(t, ok, "being deleted")
}
