package apply

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// Drift checks. The resync queues a tenant when its check is due
// (domain.DriftDue); the run, seeing the resync as its only source, plans
// instead of applying (decideRun): `tofu plan -detailed-exitcode` under the
// state lock for the plan's length only, and the machines' running configs
// compared with the declared ones (ConfigDrift). The result is the tenant's
// status.drift and Drifted condition. With action correct, infrastructure
// drift becomes an apply in the same run (trigger drift) and each drifted
// machine is handed back to the config controller, which applies its
// declared config again.

// ConfigDrift finds machines whose running config differs from the declared
// one and hands them back to the config controller (talos.ConfigDriftChecker).
type ConfigDrift interface {
	ConfigDrift(ctx context.Context, tenant string) ([]talos.ConfigDrift, error)
	CorrectConfigDrift(ctx context.Context, tenant string, d talos.ConfigDrift) error
}

// driftSchedule is the drift check in force for t.
func (w *Worker) driftSchedule(t *domain.Tenant) domain.DriftSchedule {
	return domain.DriftScheduleOf(t.Spec.DriftCheck, w.cfg.DriftInterval, w.cfg.DriftMinInterval)
}

// appliedCurrent reports whether t's current spec was applied successfully:
// its Reconciled condition is True for its generation.
func appliedCurrent(t *domain.Tenant) bool {
	c := domain.FindCondition(t.Status.Conditions, "Reconciled")
	return c != nil && c.Status == "True" && t.Status.ObservedGeneration == t.Metadata.Generation
}

// resyncKeys are the tenants the resync queues at now: those being deleted
// with infrastructure (their destroy is retried) and those whose drift
// check is due.
func (w *Worker) resyncKeys(tenants []domain.Tenant, now time.Time) []string {
	var out []string
	for i := range tenants {
		t := &tenants[i]
		if !slices.Contains(t.Metadata.Finalizers, InfraFinalizer) {
			continue
		}
		if t.Metadata.DeletionTimestamp != nil {
			out = append(out, t.Metadata.Name)
			continue
		}
		var last *time.Time
		if t.Status.Drift != nil {
			last = t.Status.Drift.CheckedAt
		}
		if domain.DriftDue(w.driftSchedule(t), appliedCurrent(t), last, now) {
			out = append(out, t.Metadata.Name)
		}
	}
	return out
}

// driftFound is what a drift check found.
type driftFound struct {
	status domain.DriftStatus
	// correctInfra: action correct and the plan has changes: an apply follows.
	correctInfra bool
}

// checkDrift runs a tenant's drift check and records what it found unless an
// apply follows (the run records it with the apply's name). A check that
// fails is recorded too (Drifted Unknown) and waits for the next interval:
// it never turns into an apply.
func (w *Worker) checkDrift(ctx context.Context, tenant string, t *domain.Tenant) driftFound {
	log := w.cfg.Log.With("tenant", tenant)
	sched := w.driftSchedule(t)
	st := domain.DriftStatus{Interval: sched.Every.String(), Action: sched.Action}
	plan, err := w.planDrift(ctx, tenant, t)
	if err == nil {
		st.Add, st.Change, st.Destroy = plan.resources.Added, plan.resources.Changed, plan.resources.Destroyed
		st.Resources = plan.changes[:min(len(plan.changes), domain.MaxDriftResources)]
	}
	var configs []talos.ConfigDrift
	if err == nil && w.cfg.ConfigDrift != nil {
		configs, err = w.cfg.ConfigDrift.ConfigDrift(ctx, tenant)
		for _, c := range configs[:min(len(configs), domain.MaxDriftMachines)] {
			st.Machines = append(st.Machines, domain.MachineDrift{Name: c.Machine, Reason: c.Reason})
		}
	}
	now := w.cfg.Now().UTC()
	st.CheckedAt = &now
	if err != nil {
		if ctx.Err() != nil {
			// The server stops: the check is not recorded and comes again.
			return driftFound{}
		}
		st = domain.DriftStatus{CheckedAt: &now, Interval: st.Interval, Action: st.Action, Error: domain.Truncate(err.Error(), 1024)}
		log.Warn("apply worker: drift check failed", "err", err)
		w.recordDrift(ctx, tenant, st)
		return driftFound{status: st}
	}
	st.Summary = domain.DriftSummary(st.Add, st.Change, st.Destroy, st.Machines)
	if sched.Action == domain.DriftCorrect {
		for _, c := range configs {
			if err := w.cfg.ConfigDrift.CorrectConfigDrift(ctx, tenant, c); err != nil {
				log.Warn("apply worker: handing a drifted machine back to the config controller", "machine", c.Machine, "err", err)
			}
		}
	}
	f := driftFound{status: st, correctInfra: sched.Action == domain.DriftCorrect && st.Add+st.Change+st.Destroy > 0}
	if st.Drifted() {
		log.Info("apply worker: drift found", "summary", st.Summary, "action", sched.Action)
	}
	if !f.correctInfra {
		w.recordDrift(ctx, tenant, st)
	}
	return f
}

// recordDrift writes a check's result into the tenant's status.
func (w *Worker) recordDrift(ctx context.Context, tenant string, st domain.DriftStatus) {
	w.updateTenantStatus(context.WithoutCancel(ctx), tenant, func(s *domain.TenantStatus, _ int64) {
		s.Drift = &st
		setCondition(s, domain.DriftCondition(&st), w.cfg.Now())
	})
}

// driftAfterApply is the drift status after a successful apply of the
// current spec: the infrastructure is as declared, and that counts as a
// check (the next one is an interval later). What an apply that corrected
// drift found stays in the summary.
func driftAfterApply(s *domain.TenantStatus, apply string, sched domain.DriftSchedule, now time.Time) {
	at := now.UTC()
	prev := s.Drift
	s.Drift = &domain.DriftStatus{CheckedAt: &at, Interval: sched.Every.String(), Action: sched.Action,
		Summary: "applied by " + apply}
	msg := "apply " + apply + " built the declared infrastructure"
	if prev != nil && prev.Correction == apply {
		s.Drift.Summary = "corrected by " + apply + " (found: " + prev.Summary + ")"
		msg = "apply " + apply + " corrected the drift found (" + prev.Summary + ")"
	}
	setCondition(s, domain.Condition{Type: domain.ConditionDrifted, Status: "False", Reason: domain.ReasonApplied, Message: msg}, now)
}

// driftPlan is what `tofu plan` would change.
type driftPlan struct {
	resources domain.ApplyResources
	changes   []domain.DriftResource
	tofu      time.Duration
}

// planDrift plans the tenant's infrastructure as an apply would build it,
// changing nothing: a machine deleted behind RezusCloud's back is a resource
// to add, one changed a resource to change or replace.
func (w *Worker) planDrift(ctx context.Context, tenant string, t *domain.Tenant) (driftPlan, error) {
	var plan driftPlan
	in, _, err := w.inputs(ctx, tenant, t)
	if err != nil {
		return plan, err
	}
	hasState, err := w.cfg.State.HasState(ctx, tenant)
	if err != nil {
		return plan, fmt.Errorf("checking the state: %w", err)
	}
	if len(in.Groups) == 0 && !hasState {
		return plan, nil
	}
	logw := tofu.MemoryLog()
	defer logw.Close()
	// The check's state credentials are named like an apply, so the lock
	// it takes for the plan is known as this run's (recoverLock).
	name := "drift-" + strconv.FormatInt(w.cfg.Now().UnixMilli(), 10)
	x, err := w.prepare(ctx, tenant, name, logw, &plan.tofu)
	if err != nil {
		return plan, err
	}
	defer x.cleanup()
	if _, err := w.configure(ctx, x, &in); err != nil {
		return plan, err
	}
	ui := &tofu.UIWriter{Log: logw, SetPhase: func(string) {}}
	err = x.tofu(ctx, ui, "plan", "-detailed-exitcode", "-input=false", "-json", "-no-color", "-lock-timeout=30s")
	ui.Flush()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.ExitCode() == 2 && ctx.Err() == nil:
		// -detailed-exitcode: the plan has changes.
	case len(ui.Errors) > 0:
		// Stored in the tenant's drift status, which its viewers read:
		// tofu's own words only, never what a module computed.
		return plan, fmt.Errorf("tofu plan: %s", tofu.RedactForReaders(ui.Errors[0], tofu.ConfigFiles(x.dir, tofu.MaxConfigText)))
	default:
		return plan, err
	}
	plan.resources, plan.changes = ui.Plan, ui.Changes
	return plan, nil
}

// driftCheckSpec is the Apply of a drift check's correction.
func driftCheckSpec(t *domain.Tenant, sources []string) domain.ApplySpec {
	return domain.ApplySpec{Operation: domain.OperationApply, Trigger: domain.TriggerDrift, Generation: t.Metadata.Generation, Sources: sources}
}

// tenants decodes the tenants of the read model.
func (w *Worker) tenants() ([]domain.Tenant, error) {
	return projections.List[domain.Tenant](w.cfg.Cache, domain.TenantKind, projections.ListOptions{})
}
