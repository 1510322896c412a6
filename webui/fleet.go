package webui

import (
	"cmp"
	"slices"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// fleetView is the dashboard's fleet at a glance: the tenants by phase and
// health, the Talos and Kubernetes versions they run, their machines, the
// tenants that need a look, and the rollouts under way.
type fleetView struct {
	Tenants         int
	Phases          []countOf
	Healthy         int
	Unhealthy       int
	HealthUnknown   int
	MachinesTotal   int
	MachinesReady   int
	Talos           []countOf
	Kubernetes      []countOf
	Attention       []domain.Tenant
	AttentionMore   int
	Rollouts        []domain.Rollout
	CanReadRollouts bool
	// CertificatesEnding counts the tenants with a CA that ends (or has
	// ended) within domain.CertificateUrgentWindow.
	CertificatesEnding int
}

// countOf is one bar of a chart: a label and how many.
type countOf struct {
	Label string
	N     int
}

// maxAttention bounds the tenants listed as needing a look.
const maxAttention = 12

// summarizeFleet counts the tenants (one pass; no per-tenant reads), lists
// the ones not Ready or not healthy (failed first, then by name), counts
// those with a certificate ending within 30 days of now, and keeps the
// rollouts not finished.
func summarizeFleet(ts []domain.Tenant, ros []domain.Rollout, now time.Time) fleetView {
	v := fleetView{Tenants: len(ts)}
	phases, talos, kube := map[string]int{}, map[string]int{}, map[string]int{}
	var attention []domain.Tenant
	for _, t := range ts {
		phase := tenantPhase(t)
		phases[phase]++
		v.MachinesTotal += t.Status.Machines.Total
		v.MachinesReady += t.Status.Machines.Ready
		talos[cmp.Or(t.Spec.TalosVersion, domain.DefaultTalosVersion)]++
		kube[cmp.Or(t.Status.KubernetesVersion, t.Spec.KubernetesVersion, "–")]++
		healthy := domain.FindCondition(t.Status.Conditions, domain.ConditionHealthy)
		switch {
		case healthy == nil || healthy.Status == "Unknown":
			v.HealthUnknown++
		case healthy.Status == "True":
			v.Healthy++
		default:
			v.Unhealthy++
		}
		if endsWithin(t.Status.Certificates, now, domain.CertificateUrgentWindow) {
			v.CertificatesEnding++
		}
		if phase != "Ready" || (healthy != nil && healthy.Status == "False") {
			attention = append(attention, t)
		}
	}
	rank := map[string]int{"Failed": 0, "Degraded": 1, "Deleting": 3}
	slices.SortFunc(attention, func(a, b domain.Tenant) int {
		ra, ok := rank[tenantPhase(a)]
		if !ok {
			ra = 2
		}
		rb, ok := rank[tenantPhase(b)]
		if !ok {
			rb = 2
		}
		return cmp.Or(cmp.Compare(ra, rb), cmp.Compare(a.Metadata.Name, b.Metadata.Name))
	})
	if len(attention) > maxAttention {
		v.AttentionMore = len(attention) - maxAttention
		attention = attention[:maxAttention]
	}
	v.Attention = attention
	v.Phases = sortedCounts(phases)
	v.Talos = sortedCounts(talos)
	v.Kubernetes = sortedCounts(kube)
	for _, ro := range ros {
		if !ro.Status.Finished() {
			v.Rollouts = append(v.Rollouts, ro)
		}
	}
	return v
}

// sortedCounts orders a chart's bars by count, then label.
func sortedCounts(m map[string]int) []countOf {
	out := make([]countOf, 0, len(m))
	for k, n := range m {
		out = append(out, countOf{k, n})
	}
	slices.SortFunc(out, func(a, b countOf) int { return cmp.Or(cmp.Compare(b.N, a.N), cmp.Compare(a.Label, b.Label)) })
	return out
}
