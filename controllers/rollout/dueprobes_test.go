package rollout

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestDuePicks: while a wave still runs tenants, a done tenant is probed
// once after its change finished and then every reprobeEvery, the longest
// unprobed first, a few a round.
func TestDuePicks(t *testing.T) {
	now := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := now.Add(-d); return &v }
	done := func(name string, finished time.Duration) domain.RolloutTenantStatus {
		return domain.RolloutTenantStatus{Name: name, State: domain.RolloutTenantDone, FinishedAt: at(finished)}
	}
	for _, tc := range []struct {
		name  string
		done  []domain.RolloutTenantStatus
		last  map[string]time.Duration // how long ago each was last probed
		limit int
		want  []string
	}{
		{"never probed: due", []domain.RolloutTenantStatus{done("a", time.Second)}, nil, 4, []string{"a"}},
		{"probed before its change finished: due", []domain.RolloutTenantStatus{done("a", time.Second)},
			map[string]time.Duration{"a": 10 * time.Second}, 4, []string{"a"}},
		{"probed since, recently: not due", []domain.RolloutTenantStatus{done("a", time.Minute)},
			map[string]time.Duration{"a": 10 * time.Second}, 4, nil},
		{"probed a minute ago: due again", []domain.RolloutTenantStatus{done("a", 5*time.Minute)},
			map[string]time.Duration{"a": time.Minute}, 4, []string{"a"}},
		{"the unprobed first, then the longest ago, at most limit",
			[]domain.RolloutTenantStatus{done("old", 10*time.Minute), done("older", 10*time.Minute), done("new", time.Second), done("fresh", 10*time.Minute)},
			map[string]time.Duration{"old": 2 * time.Minute, "older": 3 * time.Minute, "fresh": time.Second}, 2, []string{"new", "older"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			last := func(name string) time.Time {
				if d, ok := tc.last[name]; ok {
					return now.Add(-d)
				}
				return time.Time{}
			}
			var got []string
			for _, d := range duePicks(tc.done, last, now, reprobeEvery, tc.limit) {
				got = append(got, d.Name)
			}
			require.Equal(t, tc.want, got)
		})
	}
}
