package rollout

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
)

// observe reads what the decision needs of each tenant: for a waiting one
// whether it is gone or at the target, for a running one how its change
// goes, and for a done one of the wave under way its health since. Tenants
// in waves passed are not looked at.
func (c *Controller) observe(ctx context.Context, ro *domain.Rollout, selected []string) map[string]domain.RolloutObservation {
	obs := make(map[string]domain.RolloutObservation, max(len(ro.Status.Tenants), len(selected)))
	if ro.Status.StartedAt == nil {
		for _, name := range selected {
			obs[name] = c.observeWaiting(ctx, ro, name)
		}
		return obs
	}
	cur := ro.Status.CurrentWave()
	// The waiting tenants of the wave under way that may start this round
	// are looked at in full (and as many again, for those at the target
	// already); the rest only for whether they are gone.
	look := lookAhead(ro, cur)
	var probe []domain.RolloutTenantStatus
	moving := false
	for _, t := range ro.Status.Tenants {
		if t.Wave == cur && (t.State == domain.RolloutTenantWaiting || t.State == domain.RolloutTenantRunning) {
			moving = true
		}
		switch t.State {
		case domain.RolloutTenantWaiting:
			if t.Wave == cur && look > 0 {
				look--
				obs[t.Name] = c.observeWaiting(ctx, ro, t.Name)
			} else if c.gone(t.Name) {
				obs[t.Name] = domain.RolloutObservation{Gone: true}
			}
		case domain.RolloutTenantRunning:
			obs[t.Name] = c.observeRunning(ctx, ro, t)
		case domain.RolloutTenantDone:
			if t.Wave == cur && t.FinishedAt != nil {
				probe = append(probe, t)
			}
		}
	}
	if moving {
		// While the wave still starts and runs tenants, this round must
		// not wait for the health of every tenant done so far (900 at
		// a time in a 1,000-tenant rollout's last wave): each done tenant
		// is probed once after its change and then every reprobeEvery,
		// a few a round. A soaking wave probes every tenant every round.
		probe = c.dueProbes(ro.Metadata.Name, probe)
	}
	c.probe(ctx, probe, obs)
	return obs
}

// reprobeEvery is how often a done tenant of a wave still under way is
// probed again (its first probe after its change comes at once).
const reprobeEvery = time.Minute

// dueProbes picks the done tenants of the wave under way whose probe is
// due this round (dueProbes) and notes them as probed now.
func (c *Controller) dueProbes(rollout string, done []domain.RolloutTenantStatus) []domain.RolloutTenantStatus {
	now := c.cfg.Clock.Now()
	c.probedMu.Lock()
	defer c.probedMu.Unlock()
	if c.probed == nil {
		c.probed = map[string]time.Time{}
	}
	last := func(tenant string) time.Time { return c.probed[rollout+"/"+tenant] }
	due := duePicks(done, last, now, reprobeEvery, 2*c.cfg.Probes)
	for _, t := range due {
		c.probed[rollout+"/"+t.Name] = now
	}
	return due
}

// forgetProbes drops what dueProbes noted of a rollout that is over.
func (c *Controller) forgetProbes(rollout string) {
	c.probedMu.Lock()
	defer c.probedMu.Unlock()
	for k := range c.probed {
		if strings.HasPrefix(k, rollout+"/") {
			delete(c.probed, k)
		}
	}
}

// duePicks is the pure choice of dueProbes: the done tenants never probed
// since their change finished, then those last probed every or longer
// ago, the longest ago first, at most limit of them.
func duePicks(done []domain.RolloutTenantStatus, last func(string) time.Time, now time.Time, every time.Duration, limit int) []domain.RolloutTenantStatus {
	var due []domain.RolloutTenantStatus
	for _, t := range done {
		at := last(t.Name)
		if at.IsZero() || t.FinishedAt != nil && at.Before(*t.FinishedAt) || now.Sub(at) >= every {
			due = append(due, t)
		}
	}
	slices.SortStableFunc(due, func(a, b domain.RolloutTenantStatus) int {
		la, lb := last(a.Name), last(b.Name)
		if t := a.FinishedAt; t != nil && la.Before(*t) {
			la = time.Time{}
		}
		if t := b.FinishedAt; t != nil && lb.Before(*t) {
			lb = time.Time{}
		}
		return la.Compare(lb)
	})
	if len(due) > limit {
		due = due[:limit]
	}
	return due
}

// lookAhead is how many waiting tenants of wave w are looked at: twice the
// places free in it, and at least 16.
func lookAhead(ro *domain.Rollout, w int) int {
	if w >= len(ro.Status.Waves) || w >= len(ro.Spec.Waves) {
		return 0
	}
	limit := ro.Spec.Waves[w].MaxParallel
	if limit == 0 {
		limit = ro.Status.Waves[w].Size
	}
	for _, t := range ro.Status.Tenants {
		if t.Wave == w && t.State == domain.RolloutTenantRunning {
			limit--
		}
	}
	return max(2*limit, 16)
}

func (c *Controller) gone(tenant string) bool {
	t, ok, err := projections.Get[domain.Tenant](c.cfg.Cache, domain.TenantRef(tenant))
	return err == nil && (!ok || t.Metadata.DeletionTimestamp != nil)
}

// observeWaiting says whether a tenant is gone or runs the change already
// (never, for a rotation).
func (c *Controller) observeWaiting(ctx context.Context, ro *domain.Rollout, tenant string) domain.RolloutObservation {
	t, ok, err := projections.Get[domain.Tenant](c.cfg.Cache, domain.TenantRef(tenant))
	if err != nil {
		return domain.RolloutObservation{}
	}
	if !ok || t.Metadata.DeletionTimestamp != nil {
		return domain.RolloutObservation{Gone: true, Looked: true}
	}
	ch := ro.Spec.Change
	switch {
	case ch.TalosVersion != "":
		machines, err := projections.List[domain.Machine](c.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: tenant})
		at := err == nil && len(machines) > 0 && !slices.ContainsFunc(machines, func(m domain.Machine) bool {
			return m.Metadata.DeletionTimestamp == nil && m.Status.TalosVersion != ch.TalosVersion
		})
		return domain.RolloutObservation{Looked: err == nil, AtTarget: at}
	case ch.KubernetesVersion != "":
		return domain.RolloutObservation{Looked: true, AtTarget: t.Status.KubernetesVersion == ch.KubernetesVersion}
	case ch.ConfigPatch != nil:
		p, ok, err := projections.Get[domain.ConfigPatch](c.cfg.Cache, domain.ObjectRef(domain.ConfigPatchKind, tenant, ch.ConfigPatch.Name))
		if err != nil || !ok || !samePatch(&p.Spec, &ch.ConfigPatch.Spec) {
			return domain.RolloutObservation{Looked: err == nil}
		}
		prog, err := c.cfg.Configs.ConfigProgress(ctx, tenant, time.Time{})
		return domain.RolloutObservation{Looked: err == nil, AtTarget: err == nil && len(prog.Pending) == 0}
	case len(ch.Rotate) > 0:
		// A rotation leaves nothing to compare with: every tenant takes it,
		// and is done when its rotation Upgrade Succeeded.
		return domain.RolloutObservation{Looked: true}
	}
	return domain.RolloutObservation{}
}

// observeRunning reads how a running tenant's change goes, and whether it
// waits for the tenant's maintenance window (which the wave's progress
// deadline does not count).
func (c *Controller) observeRunning(ctx context.Context, ro *domain.Rollout, rt domain.RolloutTenantStatus) domain.RolloutObservation {
	tenant, ok, err := projections.Get[domain.Tenant](c.cfg.Cache, domain.TenantRef(rt.Name))
	if err == nil && (!ok || tenant.Metadata.DeletionTimestamp != nil) {
		return domain.RolloutObservation{Gone: true}
	}
	if p := ro.Spec.Change.ConfigPatch; p != nil {
		o := c.observeConfig(ctx, ro, rt, p)
		if o.Change == domain.RolloutTenantRunning && tenant != nil {
			open, _ := domain.MaintenanceOpen(tenant.Spec.Maintenance, c.cfg.Clock.Now())
			o.WindowWait = !open
		}
		return o
	}
	return c.observeUpgrade(ro, rt)
}

// observeConfig reads how a running tenant's config patch goes: done once
// every machine holds its rendered config.
func (c *Controller) observeConfig(ctx context.Context, ro *domain.Rollout, rt domain.RolloutTenantStatus, p *domain.RolloutConfigPatch) domain.RolloutObservation {
	cp, ok, err := projections.Get[domain.ConfigPatch](c.cfg.Cache, domain.ObjectRef(domain.ConfigPatchKind, rt.Name, p.Name))
	if err != nil || !ok || !samePatch(&cp.Spec, &p.Spec) {
		return domain.RolloutObservation{}
	}
	since := rt.StartedAt
	if since == nil {
		since = ro.Status.StartedAt
	}
	prog, err := c.cfg.Configs.ConfigProgress(ctx, rt.Name, *since)
	switch {
	case err != nil:
		return domain.RolloutObservation{Change: domain.RolloutTenantRunning, Message: "reading its configs: " + err.Error()}
	case len(prog.Failed) > 0:
		var parts []string
		for _, m := range prog.Pending {
			if msg, bad := prog.Failed[m]; bad {
				parts = append(parts, m+": "+msg)
			}
		}
		return domain.RolloutObservation{Change: domain.RolloutTenantFailed, Message: "the config did not apply: " + strings.Join(parts, "; ")}
	case len(prog.Pending) > 0:
		return domain.RolloutObservation{Change: domain.RolloutTenantRunning,
			Message: fmt.Sprintf("%d of %d machines take the patch: %s", len(prog.Pending), prog.Machines, strings.Join(firstN(prog.Pending, 5), ", "))}
	}
	return domain.RolloutObservation{Change: domain.RolloutTenantDone, Message: fmt.Sprintf("every machine (%d) holds the patch", prog.Machines)}
}

// observeUpgrade reads how a running tenant's Upgrade goes: its phase,
// reason, and what the machine under way waits for.
func (c *Controller) observeUpgrade(ro *domain.Rollout, rt domain.RolloutTenantStatus) domain.RolloutObservation {
	up, ok, err := projections.Get[domain.Upgrade](c.cfg.Cache, domain.ObjectRef(domain.UpgradeKind, rt.Name, upgradeName(ro.Metadata.Name, rt.Attempt)))
	if err != nil || !ok {
		return domain.RolloutObservation{}
	}
	st := up.Status
	switch st.Phase {
	case domain.UpgradeSucceeded:
		return domain.RolloutObservation{Change: domain.RolloutTenantDone, Message: "upgrade " + up.Metadata.Name + " succeeded"}
	case domain.UpgradeFailed, domain.UpgradeCanceled:
		msg := "upgrade " + up.Metadata.Name + " " + strings.ToLower(st.Phase)
		if st.Reason != "" {
			msg += ": " + st.Reason
		}
		return domain.RolloutObservation{Change: domain.RolloutTenantFailed, Message: msg}
	}
	msg := "upgrade " + up.Metadata.Name + " " + strings.ToLower(st.Phase)
	if st.Reason != "" {
		msg += ": " + st.Reason
	}
	// What the machine under way waits for, without its running time: the
	// message changes with the answer, not with the clock.
	for _, m := range st.Machines {
		if w := m.Wait; w != nil && w.For != "" && !m.Final() {
			msg += "; " + m.Name + ": waiting for " + w.For
			if w.LastError != "" {
				msg += ": " + w.LastError
			}
			break
		}
	}
	return domain.RolloutObservation{Change: domain.RolloutTenantRunning, Message: msg,
		WindowWait: st.MaintenanceOpensAt != nil && st.Current == ""}
}

// probe asks the health of the done tenants of the wave under way (a probe
// younger than the health service's cache TTL counts) and records it where
// the probe began after the tenant's change finished.
func (c *Controller) probe(ctx context.Context, ts []domain.RolloutTenantStatus, obs map[string]domain.RolloutObservation) {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, c.cfg.Probes)
	)
	for _, t := range ts {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			h, err := c.cfg.Prober.Probe(ctx, t.Name, false)
			if err != nil || !h.ObservedAt.After(*t.FinishedAt) {
				return
			}
			o := domain.RolloutObservation{Change: domain.RolloutTenantDone, Health: h.State}
			if len(h.Reasons) > 0 {
				o.HealthReason = strings.Join(firstN(h.Reasons, 3), "; ")
			}
			mu.Lock()
			obs[t.Name] = o
			mu.Unlock()
		}()
	}
	wg.Wait()
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
