package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// autoscaleCycle is what one cycle observed. Local times (the pod, the
// Node, the scale calls) and the server's (events, applies) are of the
// same host's clock.
type autoscaleCycle struct {
	// PodCreated is when the new pod's ADDED reached the informer.
	PodCreated time.Time
	// Scaled is the NodeGroupScaled event that grew the group.
	Scaled     time.Time
	ApplyStart time.Time
	ApplyEnd   time.Time
	Tofu       time.Duration
	// NodeReady is when the new Node's Ready condition first read True.
	NodeReady  time.Time
	PodRunning time.Time
	// DownStart is the scale of the Deployment back to 1; DownScaled the
	// NodeGroupScaled event that shrank the group; DownDone when the group
	// was back at 1 machine, 2 Nodes and no apply open.
	DownStart, DownScaled, DownDone time.Time
}

// autoscaleSplit is a cycle's figures.
type autoscaleSplit struct {
	Total, Decision, Queue, Tofu, ApplyRest, Boot, Schedule, DownDecision, Down time.Duration
}

// split breaks pod created → Node Ready into its parts, which add up to it.
func (c *autoscaleCycle) split() autoscaleSplit {
	wall := c.ApplyEnd.Sub(c.ApplyStart)
	return autoscaleSplit{
		Total:        c.NodeReady.Sub(c.PodCreated),
		Decision:     c.Scaled.Sub(c.PodCreated),
		Queue:        c.ApplyStart.Sub(c.Scaled),
		Tofu:         c.Tofu,
		ApplyRest:    wall - c.Tofu,
		Boot:         c.NodeReady.Sub(c.ApplyEnd),
		Schedule:     c.PodRunning.Sub(c.NodeReady),
		DownDecision: c.DownScaled.Sub(c.DownStart),
		Down:         c.DownDone.Sub(c.DownStart),
	}
}

// autoscaleRows are the table's rows: a name and the figure of a split.
var autoscaleRows = []struct {
	name string
	of   func(autoscaleSplit) time.Duration
}{
	{"pod created → Node Ready (the figure)", func(s autoscaleSplit) time.Duration { return s.Total }},
	{"· pod created → NodeGroupScaled (the autoscaler's decision)", func(s autoscaleSplit) time.Duration { return s.Decision }},
	{"· NodeGroupScaled → apply start (ours: debounce + queue)", func(s autoscaleSplit) time.Duration { return s.Queue }},
	{"· apply: tofu", func(s autoscaleSplit) time.Duration { return s.Tofu }},
	{"· apply: the rest (ours)", func(s autoscaleSplit) time.Duration { return s.ApplyRest }},
	{"· apply end → Node Ready (emulator boot, kubelet, config push)", func(s autoscaleSplit) time.Duration { return s.Boot }},
	{"Node Ready → pod Running (scheduler, kubelet)", func(s autoscaleSplit) time.Duration { return s.Schedule }},
	{"scale to 1 → NodeGroupScaled (unneeded time + decision)", func(s autoscaleSplit) time.Duration { return s.DownDecision }},
	{"scale to 1 → 1 machine, 2 Nodes (the scale-down)", func(s autoscaleSplit) time.Duration { return s.Down }},
}

// nearestRank is the p-th percentile of ds by nearest rank: the smallest
// value with at least p% of the values at or below it (p95 of 10 values is
// the largest; p50 of 2 the smaller).
func nearestRank(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.999999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// autoscaleTable is the figures over the cycles as a Markdown table.
func autoscaleTable(splits []autoscaleSplit) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| step (%d cycles) | p50 | p95 | max |\n|---|---|---|---|\n", len(splits))
	for _, r := range autoscaleRows {
		var ds []time.Duration
		for _, s := range splits {
			ds = append(ds, r.of(s))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.name, secs(nearestRank(ds, 50)), secs(nearestRank(ds, 95)), secs(nearestRank(ds, 100)))
	}
	return b.String()
}
