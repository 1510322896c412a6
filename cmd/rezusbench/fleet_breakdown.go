package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// breakdownRow is one stretch of a rollout's time, over the tenants (or
// machines, or slots) it was measured on.
type breakdownRow struct {
	Stretch string
	Samples []time.Duration
}

// rolloutBreakdown splits a finished rollout's time into the stretches a
// tenant's part goes through, from the rollout's status and its Upgrades:
// the rollout's start of the tenant to the Upgrade's creation, the saga
// taking it up, planning, each machine's step (beside what the emulator's
// delays make it take) and the gaps between steps, the end of the last
// step to the Upgrade's end, that end to the rollout seeing it, and a
// freed place in a wave to the next tenant's start in it.
func rolloutBreakdown(ro *domain.Rollout, ups []domain.Upgrade, least time.Duration) []breakdownRow {
	byTenant := make(map[string]*domain.Upgrade, len(ups))
	for i := range ups {
		byTenant[ups[i].Metadata.Tenant] = &ups[i]
	}
	rows := []breakdownRow{
		{Stretch: "rollout starts the tenant → its Upgrade written"},
		{Stretch: "Upgrade written → the saga takes it up"},
		{Stretch: "saga takes it up → first machine's call"},
		{Stretch: "a machine's step beyond the emulator's " + least.String()},
		{Stretch: "a machine's end → the next one's call"},
		{Stretch: "last machine's end → the Upgrade's end"},
		{Stretch: "the Upgrade's end → the rollout sees it done"},
		{Stretch: "a place free in a wave → the next tenant starts"},
	}
	add := func(i int, from, to *time.Time) {
		if from != nil && to != nil {
			rows[i].Samples = append(rows[i].Samples, to.Sub(*from))
		}
	}
	for _, t := range ro.Status.Tenants {
		if t.State != domain.RolloutTenantDone {
			continue
		}
		up := byTenant[t.Name]
		if up == nil {
			continue
		}
		add(0, t.StartedAt, up.Metadata.CreationTimestamp)
		add(1, up.Metadata.CreationTimestamp, up.Status.StartTime)
		var prev *time.Time
		for i, m := range up.Status.Machines {
			if i == 0 {
				add(2, up.Status.StartTime, m.Started)
			}
			if m.Started != nil && m.Finished != nil {
				rows[3].Samples = append(rows[3].Samples, m.Finished.Sub(*m.Started)-least)
			}
			add(4, prev, m.Started)
			prev = m.Finished
		}
		add(5, prev, up.Status.EndTime)
		add(6, up.Status.EndTime, t.FinishedAt)
	}
	rows[7].Samples = refillLags(ro)
	return rows
}

// refillLags is, in each wave run some at a time, how long a freed place
// stayed empty: the k-th start after the first maxParallel follows the
// (k-maxParallel)-th finish.
func refillLags(ro *domain.Rollout) []time.Duration {
	var lags []time.Duration
	for w := range ro.Status.Waves {
		if w >= len(ro.Spec.Waves) || ro.Spec.Waves[w].MaxParallel == 0 {
			continue
		}
		p := ro.Spec.Waves[w].MaxParallel
		var starts, ends []time.Time
		for _, t := range ro.Status.Tenants {
			if t.Wave != w || t.StartedAt == nil || t.FinishedAt == nil {
				continue
			}
			starts = append(starts, *t.StartedAt)
			ends = append(ends, *t.FinishedAt)
		}
		slices.SortFunc(starts, time.Time.Compare)
		slices.SortFunc(ends, time.Time.Compare)
		for k := p; k < len(starts); k++ {
			lags = append(lags, starts[k].Sub(ends[k-p]))
		}
	}
	return lags
}

// quantile is the q-th quantile (0..1) of sorted samples, nearest rank.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// printBreakdown fetches the rollout and its Upgrades and prints where the
// tenants' time went.
func printBreakdown(ctx context.Context, env *benchEnv, name string) error {
	var ro domain.Rollout
	code, b, err := env.request(ctx, http.MethodGet, "/api/v1/rollouts/"+name, "", "")
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("reading rollout %s: %d %s", name, code, b)
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &ro); err != nil {
		return err
	}
	code, b, err = env.request(ctx, http.MethodGet, "/api/v1/upgrades?labelSelector="+domain.LabelRollout+"%3D"+name, "", "")
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("listing upgrades: %d %s", code, b)
	}
	if err != nil {
		return err
	}
	var l struct{ Items []domain.Upgrade }
	if err := json.Unmarshal(b, &l); err != nil {
		return err
	}
	for i, w := range ro.Status.Waves {
		if w.StartedAt != nil && w.FinishedAt != nil {
			fmt.Printf("    wave %d: %d tenants in %s\n", i+1, w.Size, w.FinishedAt.Sub(*w.StartedAt).Round(100*time.Millisecond))
		}
	}
	fmt.Printf("    where the tenants' time went (%d upgrades): p50 / p95 / max / sum\n", len(l.Items))
	for _, r := range rolloutBreakdown(&ro, l.Items, fleetEmulatedDelay) {
		s := slices.Clone(r.Samples)
		slices.Sort(s)
		var sum time.Duration
		for _, d := range s {
			sum += d
		}
		fmt.Printf("      %-50s %8s %8s %8s %10s (%d)\n", r.Stretch, round(quantile(s, .5)), round(quantile(s, .95)), round(quantile(s, 1)), sum.Round(time.Second), len(s))
	}
	return nil
}

func round(d time.Duration) time.Duration {
	if d < 10*time.Second && d > -10*time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}
