package configsync

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/internal/controller"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// item is one machine of a pass with what it needs.
type item struct {
	m    *domain.Machine
	ref  domain.Ref
	cfg  []byte
	hash string
	act  action
}

// pass is one reconcile of a tenant.
type pass struct {
	c      *Controller
	tenant string
	bundle *secrets.Bundle
	log    *slog.Logger
	// controlPlanes are every control plane a wave may apply to, to check
	// the others are up before one is given a config.
	controlPlanes []*domain.Machine
	// maintenance is the tenant's windows; windowOpen whether one is open
	// now, else opens when the next one does. A config that would reboot
	// its machine waits for a window (in-place ones do not).
	maintenance *domain.Maintenance
	windowOpen  bool
	opens       time.Time
	// deferred is set when a machine's config waits for a window.
	deferred atomic.Bool
}

// reconcile brings a tenant's machines to their rendered configs. Done when
// every machine holds its config, when the tenant is gone, and while an
// upgrade of the tenant is in flight (its end queues the tenant again);
// Retry when a machine did not take its config, after the others were given
// theirs.
func (c *Controller) reconcile(ctx context.Context, tenant string, attempt int) controller.Result {
	log := c.cfg.Log.With("tenant", tenant)
	t, ok, err := projections.Get[domain.Tenant](c.cfg.Cache, domain.TenantRef(tenant))
	if err != nil {
		log.Warn("config controller: reading the tenant", "err", err)
		return controller.Retry()
	}
	if !ok || t.Metadata.DeletionTimestamp != nil {
		return controller.Done()
	}
	if name, ok := upgradeInFlight(c.cfg.Cache, tenant); ok {
		log.Info("config controller: holding back while an upgrade runs", "upgrade", name)
		return controller.Done()
	}
	d, err := c.cfg.Talos.Desired(ctx, tenant)
	if domain.IsNotFound(err) {
		return controller.Done()
	}
	if err != nil {
		log.Warn("config controller: loading the render inputs", "err", err)
		return controller.Retry()
	}
	machines := d.Machines()
	if !endpointKnown(t, machines) {
		// The apply that builds the machines records the endpoint; that
		// status event queues the tenant again.
		return controller.Done()
	}
	bundle, err := c.cfg.Talos.PKI().Bundle(ctx, tenant)
	if err != nil {
		log.Warn("config controller: loading the tenant's PKI", "err", err)
		return controller.Retry()
	}
	groups := map[string]*domain.NodeGroup{}
	for _, m := range machines {
		if ng, ok := d.NodeGroup(m.Spec.NodeGroup); ok {
			groups[ng.Metadata.Name] = ng
		}
	}
	waves := planWaves(groups, machines)
	p := &pass{c: c, tenant: tenant, bundle: bundle, log: log, maintenance: t.Spec.Maintenance}
	p.windowOpen, p.opens = domain.MaintenanceOpen(t.Spec.Maintenance, c.cfg.Now())
	ok = true
	// Decide for every machine first, so that the machines a rollout has
	// not reached yet say so (pending) while it runs.
	items := make([][]item, len(waves))
	for i, w := range waves {
		for j := range w.machines {
			m := &w.machines[j]
			if w.controlPlane {
				p.controlPlanes = append(p.controlPlanes, m)
			}
			if it := p.decide(ctx, d, m); it.act == actApply {
				items[i] = append(items[i], it)
			}
		}
	}
	pending := map[string]bool{}
	for _, its := range items {
		for _, it := range its {
			pending[it.m.Metadata.Name] = true
		}
	}
	// A wait a stopped controller left (recorded on its machine) goes on
	// with its deadline before anything else is applied.
	if m, err := p.resumeWaits(ctx, waves); err != nil {
		if m != nil && ctx.Err() == nil {
			p.log.Warn("config controller: a control plane is not back after its reboot; the others wait", "machine", m.Metadata.Name, "err", err)
			for _, its := range items {
				for _, it := range its {
					p.record(c.rec.Pending(ctx, it.ref, "waiting for the control planes"))
				}
			}
		}
		return controller.Retry()
	}
	p.sweepDrained(ctx, machines, pending)
	p.sweepProviderIDs(ctx, machines)
	for i, w := range waves {
		if ctx.Err() != nil {
			return controller.Retry()
		}
		if len(items[i]) == 0 {
			continue
		}
		goOn, retry := afterWave(p.wave(ctx, w, items[i]))
		ok = ok && !retry
		if !goOn {
			// A control plane is down: the groups after it wait too.
			for _, rest := range items[i+1:] {
				for _, it := range rest {
					p.record(c.rec.Pending(ctx, it.ref, "waiting for the control planes"))
				}
			}
			break
		}
	}
	if ok && p.deferred.Load() {
		log.Info("config controller: configs that reboot wait for the maintenance window", "opens", p.opens)
		return controller.Until(later(p.opens, c.cfg.Now().Add(time.Second)))
	}
	if !ok {
		log.Info("config controller: a machine does not hold its config; retrying", "attempt", attempt)
		return controller.Retry()
	}
	return controller.Done()
}

// later is the later of two instants.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// upgradeInFlight names the tenant's upgrade that is Pending or Running, if
// any: configs wait for it, as the upgrade changes what machines run.
func upgradeInFlight(cache *projections.Cache, tenant string) (string, bool) {
	ups, err := projections.List[domain.Upgrade](cache, domain.UpgradeKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return "", false
	}
	for _, u := range ups {
		if u.Status.HoldsBack() {
			return u.Metadata.Name, true
		}
	}
	return "", false
}

// decide renders a machine's config and records what needs no call to the
// node: a render failure, a status that lags behind, a pending apply.
func (p *pass) decide(ctx context.Context, d *talos.Desired, m *domain.Machine) item {
	c := p.c
	it := item{m: m, ref: domain.ObjectRef(domain.MachineKind, p.tenant, m.Metadata.Name)}
	cfg, err := d.Config(m, "")
	if err != nil {
		// Retrying cannot help: the change that fixes it queues the tenant.
		p.record(c.rec.Failed(ctx, it.ref, talos.ReasonRenderFailed, err.Error()))
		return it
	}
	it.cfg, it.hash = cfg, talos.ConfigHash(cfg)
	cond := domain.FindCondition(m.Status.Conditions, domain.ConditionConfigApplied)
	ng, _ := d.NodeGroup(m.Spec.NodeGroup)
	declared := talos.RenderInput{Tenant: d.Tenant(), NodeGroup: ng}.TalosVersion()
	it.act = decideMachine(machineFacts{Held: m.Metadata.Annotations[domain.AnnotationConfigHash], Rendered: it.hash,
		UpToDate: m.Status.ConfigUpToDate, Condition: cond, Running: m.Status.TalosVersion, Declared: declared})
	switch it.act {
	case actWait:
		p.record(c.rec.Pending(ctx, it.ref, fmt.Sprintf("its config is rendered for Talos %s; it runs %s: waiting for the upgrade", declared, m.Status.TalosVersion)))
	case actRecord:
		p.record(c.rec.Applied(ctx, it.ref, it.hash, recordReason(cond), "the machine holds its rendered config"))
	case actCheckBack:
		p.checkBack(ctx, it)
	case actApply:
		if m.Status.ConfigUpToDate || cond == nil || cond.Status == "True" {
			p.record(c.rec.Pending(ctx, it.ref, "its rendered config changed; waiting for its turn"))
		}
	}
	return it
}

func (p *pass) record(err error) {
	if err != nil && !domain.IsNotFound(err) {
		p.log.Warn("config controller: recording a machine's config status", "err", err)
	}
}

// wave applies the configs of one node group's machines: control planes one
// at a time, each only while the other control planes are up, and after a
// reboot only once it is back; workers up to the group's parallelism at
// once. It says how that went (afterWave decides what follows).
func (p *pass) wave(ctx context.Context, w wave, items []item) waveEnd {
	var end waveEnd
	if w.controlPlane {
		for i, it := range items {
			if problem := p.othersDown(ctx, it.m); problem != "" {
				p.log.Info("config controller: holding back a control plane", "machine", it.m.Metadata.Name, "why", problem)
				for _, rest := range items[i:] {
					p.record(p.c.rec.Pending(ctx, rest.ref, "waiting for the other control planes: "+problem))
				}
				end.heldBack = true
				return end
			}
			res, good, back := p.apply(ctx, it)
			if !good {
				end.failed = true
				continue
			}
			if res.Reboot() {
				err := back
				if !res.waited {
					err = p.waitBack(ctx, it.m, nil)
				}
				if err != nil {
					p.log.Warn("config controller: a control plane is not back after its reboot; the others wait", "machine", it.m.Metadata.Name, "err", err)
					end.notBack = true
					return end
				}
			}
		}
		return end
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		slot = make(chan struct{}, w.parallelism)
	)
	for _, it := range items {
		select {
		case slot <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			end.failed = true
			return end
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slot }()
			if _, good, _ := p.apply(ctx, it); !good {
				mu.Lock()
				end.failed = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return end
}

// waitsForWindow holds a config that would reboot its machine while the
// tenant's maintenance window is closed (Talos's dry-run answer decides):
// the machine says so and the pass comes again when the window opens. A
// node that does not answer the dry run is not held here: the apply says why.
func (p *pass) waitsForWindow(ctx context.Context, it item) bool {
	if p.windowOpen {
		return false
	}
	dry, err := p.c.cfg.Nodes.ApplyConfigDryRun(ctx, p.bundle, it.m.Spec.Address, it.cfg)
	if err != nil || !dry.Reboot() {
		return false
	}
	p.deferred.Store(true)
	p.record(p.c.rec.Pending(ctx, it.ref, "its config reboots it: "+domain.MaintenanceWaiting(p.maintenance, p.opens)))
	return true
}

// applied is how a machine took its config: waited is true when the
// controller already waited for the rebooted machine to be back (a drained
// one, to uncordon it).
type applied struct {
	talos.ApplyResult
	waited bool
}

// apply gives one machine its config (mode AUTO) and records how it went.
// A config that reboots the machine is applied after its Node is drained;
// the Node is uncordoned once the machine is back (back: why it is not).
func (p *pass) apply(ctx context.Context, it item) (res applied, good bool, back error) {
	c := p.c
	if p.waitsForWindow(ctx, it) {
		// Not applied: nothing rebooted, nothing to wait for.
		res.waited = true
		return res, true, nil
	}
	d, node, ok := p.drainBeforeReboot(ctx, it)
	if !ok {
		return res, false, nil
	}
	r, err := c.cfg.Nodes.ApplyConfig(ctx, p.bundle, it.m.Spec.Address, it.cfg, false)
	res.ApplyResult = r
	if err != nil {
		if d != nil {
			p.release(ctx, d, node)
		}
		if ctx.Err() == nil {
			p.log.Info("config controller: a machine did not take its config", "machine", it.m.Metadata.Name, "err", err)
			p.record(c.rec.Failed(ctx, it.ref, talos.ReasonApplyFailed, err.Error()))
		}
		return res, false, nil
	}
	defer func() {
		switch {
		case d == nil:
		case !res.Reboot():
			p.release(ctx, d, node)
		default:
			res.waited = true
			if back = p.waitBack(ctx, it.m, nil); back == nil {
				p.uncordonWhenReady(ctx, d, it.m, node, nil)
			}
		}
	}()
	reason := talos.ReasonAppliedInPlace
	if res.Reboot() {
		reason = talos.ReasonAppliedWithReboot
	}
	msg := fmt.Sprintf("applied with mode %s", res.Mode)
	if res.Details != "" {
		msg += ": " + res.Details
	}
	p.log.Info("config controller: config applied", "machine", it.m.Metadata.Name, "mode", res.Mode.String(), "hash", it.hash)
	if err := c.rec.Applied(ctx, it.ref, it.hash, reason, msg); err != nil {
		p.record(err)
		return res, false, nil
	}
	return res, true, nil
}

// othersDown says which other control plane is not up ("" when all are),
// so that no control plane is given a config (which may reboot it) while
// another one is down.
func (p *pass) othersDown(ctx context.Context, m *domain.Machine) string {
	for _, o := range p.controlPlanes {
		if o.Metadata.Name == m.Metadata.Name {
			continue
		}
		problem, err := p.c.cfg.Nodes.Ready(ctx, p.bundle, o.Spec.Address)
		if err != nil {
			return fmt.Sprintf("%s does not answer: %v", o.Metadata.Name, err)
		}
		if problem != "" {
			return o.Metadata.Name + ": " + problem
		}
	}
	return ""
}

func (p *pass) pause(ctx context.Context) error {
	clock := p.c.cfg.Clock
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-clock.At(clock.Now().Add(p.c.cfg.PollInterval)):
		return nil
	}
}
