package rollout

import (
	"bytes"
	"context"
	"encoding/json"
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
	c.probe(ctx, ro, probe, obs)
	return obs
}

// reprobeEvery is how often at most a done tenant of a wave still under way
// is probed again (its first probe after its change comes at once).
const reprobeEvery = time.Minute

// dueProbes picks the done tenants of the wave under way whose probe is
// due this round (duePicks) and notes them as probed now. Probes again of
// tenants probed since their change are bounded across the controller to
// Probes every Interval (the bucket holds two rounds' worth): without a
// bound a 1,000-tenant wave probed its 900 done tenants every minute, 15
// rounds of Talos calls a second beside the tenants it upgraded. A done
// tenant is so probed again every reprobeEvery or, in a wave with more
// done tenants than that rate covers, every done/(Probes/Interval).
func (c *Controller) dueProbes(rollout string, done []domain.RolloutTenantStatus) []domain.RolloutTenantStatus {
	now := c.cfg.Clock.Now()
	c.probedMu.Lock()
	defer c.probedMu.Unlock()
	if c.probed == nil {
		c.probed = map[string]time.Time{}
	}
	rate := float64(c.cfg.Probes) / c.cfg.Interval.Seconds()
	if c.refilled.IsZero() {
		c.reprobes = float64(2 * c.cfg.Probes)
	} else {
		c.reprobes = min(c.reprobes+now.Sub(c.refilled).Seconds()*rate, float64(2*c.cfg.Probes))
	}
	c.refilled = now
	last := func(tenant string) time.Time { return c.probed[rollout+"/"+tenant] }
	due, again := duePicks(done, last, now, reprobeEvery, 2*c.cfg.Probes, int(c.reprobes))
	c.reprobes -= float64(again)
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
// ago, the longest ago first (at most reprobes of those), at most limit in
// all. again is how many of due are probes again.
func duePicks(done []domain.RolloutTenantStatus, last func(string) time.Time, now time.Time, every time.Duration, limit, reprobes int) (due []domain.RolloutTenantStatus, again int) {
	// since is when a tenant was last probed after its change; zero if never.
	since := func(t domain.RolloutTenantStatus) time.Time {
		at := last(t.Name)
		if t.FinishedAt != nil && at.Before(*t.FinishedAt) {
			return time.Time{}
		}
		return at
	}
	var first, later []domain.RolloutTenantStatus
	for _, t := range done {
		switch at := since(t); {
		case at.IsZero():
			first = append(first, t)
		case now.Sub(at) >= every:
			later = append(later, t)
		}
	}
	slices.SortStableFunc(later, func(a, b domain.RolloutTenantStatus) int { return since(a).Compare(since(b)) })
	due = first[:min(len(first), limit)]
	again = max(0, min(len(later), reprobes, limit-len(due)))
	return append(due, later[:again]...), again
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

// gone says whether a tenant was deleted or is being deleted. A round asks
// it of every waiting tenant of the rollout (890 in a 1,000-tenant
// rollout's last wave): a tenant whose JSON does not name a deletion
// timestamp is not decoded at all (a perf recording of such a wave had
// this decode at 4 % of the server), else only that field is.
func (c *Controller) gone(tenant string) bool {
	raw, ok := c.cfg.Cache.Get(domain.TenantRef(tenant))
	if !ok {
		return true
	}
	if !bytes.Contains(raw, []byte(`"deletionTimestamp"`)) {
		return false
	}
	var t struct {
		Metadata struct {
			DeletionTimestamp *time.Time `json:"deletionTimestamp"`
		} `json:"metadata"`
	}
	return json.Unmarshal(raw, &t) == nil && t.Metadata.DeletionTimestamp != nil
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
	if ro.Spec.Change.ConfigPatch == nil {
		if c.gone(rt.Name) {
			return domain.RolloutObservation{Gone: true}
		}
		return c.observeUpgrade(ro, rt)
	}
	tenant, ok, err := projections.Get[domain.Tenant](c.cfg.Cache, domain.TenantRef(rt.Name))
	if err == nil && (!ok || tenant.Metadata.DeletionTimestamp != nil) {
		return domain.RolloutObservation{Gone: true}
	}
	o := c.observeConfig(ctx, ro, rt, ro.Spec.Change.ConfigPatch)
	if o.Change == domain.RolloutTenantRunning && tenant != nil {
		open, _ := domain.MaintenanceOpen(tenant.Spec.Maintenance, c.cfg.Clock.Now())
		o.WindowWait = !open
	}
	return o
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

// settledAt is when a done tenant's change left its machines as they are
// (settled); a probe that began after it is the tenant's health since its
// change.
func (c *Controller) settledAt(ro *domain.Rollout, t domain.RolloutTenantStatus) time.Time {
	ch := ro.Spec.Change
	if ch.TalosVersion == "" && ch.KubernetesVersion == "" {
		return *t.FinishedAt
	}
	up, ok, err := projections.Get[domain.Upgrade](c.cfg.Cache, domain.ObjectRef(domain.UpgradeKind, t.Name, upgradeName(ro.Metadata.Name, t.Attempt)))
	if err != nil || !ok {
		return *t.FinishedAt
	}
	return settled(ch, &up.Status, *t.FinishedAt)
}

// settled is when a change left a tenant's machines as they are: for a
// Talos or Kubernetes version that Succeeded, the end of the last machine's
// step of its Upgrade (the saga asks for a probe of the tenant right then,
// and its version write-back after it changes no machine); else finished,
// when the rollout saw the tenant done. The probe the saga asked for,
// still remembered by the health service, so spares a second round of
// Talos calls a tenant (1,000 in a 1,000-tenant rollout) and the rollout's
// round its wait for them.
func settled(ch domain.RolloutChange, up *domain.UpgradeStatus, finished time.Time) time.Time {
	if ch.TalosVersion == "" && ch.KubernetesVersion == "" || up.Phase != domain.UpgradeSucceeded {
		return finished
	}
	var last time.Time
	for _, m := range up.Machines {
		if m.Finished == nil {
			return finished
		}
		if m.Finished.After(last) {
			last = *m.Finished
		}
	}
	if last.IsZero() || last.After(finished) {
		return finished
	}
	return last
}

// probe asks the health of the done tenants of the wave under way (a probe
// younger than the health service's cache TTL counts) and records it where
// the probe began after the tenant's change finished.
func (c *Controller) probe(ctx context.Context, ro *domain.Rollout, ts []domain.RolloutTenantStatus, obs map[string]domain.RolloutObservation) {
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
			if err != nil || h.ObservedAt.Before(c.settledAt(ro, t)) {
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
