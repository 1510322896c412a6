package rollout

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/internal/controller/controllertest"
)

// TestDuePicks: while a wave still runs tenants, a done tenant is probed
// once after its change finished and then every reprobeEvery, the longest
// unprobed first, a few a round; probes again only as many as the budget
// allows, first probes whatever it says.
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
		// reprobes is the budget of probes again; -1: limit.
		reprobes int
		want     []string
	}{
		{"never probed: due", []domain.RolloutTenantStatus{done("a", time.Second)}, nil, 4, -1, []string{"a"}},
		{"probed before its change finished: due", []domain.RolloutTenantStatus{done("a", time.Second)},
			map[string]time.Duration{"a": 10 * time.Second}, 4, -1, []string{"a"}},
		{"probed since, recently: not due", []domain.RolloutTenantStatus{done("a", time.Minute)},
			map[string]time.Duration{"a": 10 * time.Second}, 4, -1, nil},
		{"probed a minute ago: due again", []domain.RolloutTenantStatus{done("a", 5*time.Minute)},
			map[string]time.Duration{"a": time.Minute}, 4, -1, []string{"a"}},
		{"the unprobed first, then the longest ago, at most limit",
			[]domain.RolloutTenantStatus{done("old", 10*time.Minute), done("older", 10*time.Minute), done("new", time.Second), done("fresh", 10*time.Minute)},
			map[string]time.Duration{"old": 2 * time.Minute, "older": 3 * time.Minute, "fresh": time.Second}, 2, -1, []string{"new", "older"}},
		{"probes again within the budget, the longest ago first",
			[]domain.RolloutTenantStatus{done("old", 10*time.Minute), done("older", 10*time.Minute), done("oldest", 10*time.Minute)},
			map[string]time.Duration{"old": 2 * time.Minute, "older": 3 * time.Minute, "oldest": 4 * time.Minute}, 16, 2, []string{"oldest", "older"}},
		{"no budget: first probes only",
			[]domain.RolloutTenantStatus{done("old", 10*time.Minute), done("new", time.Second), done("newer", time.Second)},
			map[string]time.Duration{"old": 2 * time.Minute}, 16, 0, []string{"new", "newer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			last := func(name string) time.Time {
				if d, ok := tc.last[name]; ok {
					return now.Add(-d)
				}
				return time.Time{}
			}
			reprobes := tc.reprobes
			if reprobes < 0 {
				reprobes = tc.limit
			}
			var got []string
			due, again := duePicks(tc.done, last, now, reprobeEvery, tc.limit, reprobes)
			wantAgain := 0
			for _, d := range due {
				got = append(got, d.Name)
				if _, probed := tc.last[d.Name]; probed && last(d.Name).After(*d.FinishedAt) {
					wantAgain++
				}
			}
			require.Equal(t, tc.want, got)
			require.Equal(t, wantAgain, again)
		})
	}
}

// TestReprobeBudget: probes again of done tenants are bounded to Probes
// every Interval across rounds (two rounds' worth held), while first probes
// after a change are not held back by it.
func TestReprobeBudget(t *testing.T) {
	now := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	clock := controllertest.NewClock(now)
	c := &Controller{cfg: Config{Probes: 8, Interval: 5 * time.Second, Clock: clock}}
	finished := now.Add(-10 * time.Minute)
	var done []domain.RolloutTenantStatus
	c.probed = map[string]time.Time{}
	for i := range 100 {
		name := fmt.Sprintf("t%03d", i)
		done = append(done, domain.RolloutTenantStatus{Name: name, State: domain.RolloutTenantDone, FinishedAt: &finished})
		c.probed["r/"+name] = now.Add(-2 * time.Minute)
	}
	require.Len(t, c.dueProbes("r", done), 16, "a full bucket: two rounds' worth")
	require.Empty(t, c.dueProbes("r", done), "the bucket empty")
	clock.Advance(2500 * time.Millisecond)
	require.Len(t, c.dueProbes("r", done), 4, "half an Interval: half of Probes")
	clock.Advance(time.Hour)
	require.Len(t, c.dueProbes("r", done), 16, "the bucket holds two rounds' worth, not more")

	fresh := now.Add(time.Hour)
	next := append([]domain.RolloutTenantStatus{}, done...)
	next = append(next, domain.RolloutTenantStatus{Name: "new", State: domain.RolloutTenantDone, FinishedAt: &fresh})
	due := c.dueProbes("r", next)
	require.Len(t, due, 1, "the bucket empty, a first probe still")
	require.Equal(t, "new", due[0].Name)
}
