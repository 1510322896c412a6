package remediation

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller"
	"github.com/rezuscloud/rezuscloud/projections"
)

// Controller is the remediation controller; New builds it, Run runs it.
type Controller struct {
	controller.Base
	cfg Config
	sw  eventstore.StatusWriter
}

// New returns the controller of cfg (see Config.Validate); Run starts it.
// Every tenant with a node group that asks for remediation, or with a
// remediation that is not over, is queued when this replica leads and
// every minute, in case a run ended with Done too early.
func New(cfg Config) *Controller {
	cfg.setDefaults()
	c := &Controller{cfg: cfg}
	c.sw = eventstore.StatusWriter{Store: cfg.Store, Actor: Actor, Now: cfg.Clock.Now, Hint: cfg.Cache}
	c.Base = controller.Build(controller.Spec{
		Store: cfg.Store, Holder: cfg.Holder, Tenants: cfg.Tenants, Name: "remediation controller",
		Lease: Lease, Consumer: Consumer, Queue: Queue, Description: "tenants whose machines are remediated",
		Kinds:       []*domain.KindInfo{domain.NodeGroupKind, domain.RemediationKind},
		Concurrency: cfg.Concurrency, Backoff: controller.Exponential(cfg.Interval, 5*time.Minute),
		Resync: time.Minute, Clock: cfg.Clock, Log: cfg.Log,
		ReadModel: cfg.Cache, Pending: func(context.Context) ([]string, error) { return c.tenants() },
	}, runtimeController{c})
	return c
}

type runtimeController struct{ c *Controller }

func (c *Controller) tenants() ([]string, error) {
	set := map[string]bool{}
	groups, err := projections.List[domain.NodeGroup](c.cfg.Cache, domain.NodeGroupKind, projections.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, ng := range groups {
		if ng.Spec.Remediation != nil {
			set[ng.Metadata.Tenant] = true
		}
	}
	rems, err := projections.List[domain.Remediation](c.cfg.Cache, domain.RemediationKind, projections.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, r := range rems {
		if !r.Status.Finished() {
			set[r.Metadata.Tenant] = true
		}
	}
	out := make([]string, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	slices.Sort(out)
	return out, nil
}

// Keys queues the tenant of a node group that asks for remediation, and of
// a remediation the apply worker moved on.
func (r runtimeController) Keys(ctx context.Context, ev *domain.Event, seq uint64) ([]string, error) {
	if ev.Actor == Actor || ev.Object == nil || ev.Object.Metadata.Tenant == "" {
		return nil, nil
	}
	if ev.Object.Kind == domain.NodeGroupKind.Kind {
		if strings.HasSuffix(ev.Type, "StatusUpdated") {
			return nil, nil
		}
		var spec domain.NodeGroupSpec
		if ev.Action != domain.ActionDeleted && (json.Unmarshal(ev.Object.Spec, &spec) != nil || spec.Remediation == nil) {
			return nil, nil
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.c.cfg.Cache.WaitFor(wctx, seq); err != nil {
		return nil, err
	}
	return []string{ev.Object.Metadata.Tenant}, nil
}

// Due runs a tenant as soon as it is queued.
func (runtimeController) Due(_ string, e controller.Entry) time.Time { return e.Last }

// Reconcile probes the tenant's machines, finishes the remediations whose
// new machine is healthy (or late), and decides each group's next one.
func (r runtimeController) Reconcile(ctx context.Context, tenant string, _ controller.Entry, _ int) controller.Result {
	return r.c.reconcile(ctx, tenant)
}

func (c *Controller) reconcile(ctx context.Context, tenant string) controller.Result {
	log := c.cfg.Log.With("tenant", tenant)
	groups, err := projections.List[domain.NodeGroup](c.cfg.Cache, domain.NodeGroupKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		log.Warn("remediation: listing node groups", "err", err)
		return controller.Retry()
	}
	groups = slices.DeleteFunc(groups, func(ng domain.NodeGroup) bool {
		return ng.Spec.Remediation == nil || ng.Metadata.DeletionTimestamp != nil
	})
	rems, err := projections.List[domain.Remediation](c.cfg.Cache, domain.RemediationKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		log.Warn("remediation: listing remediations", "err", err)
		return controller.Retry()
	}
	open := slices.ContainsFunc(rems, func(r domain.Remediation) bool { return !r.Status.Finished() })
	if len(groups) == 0 && !open {
		return controller.Done()
	}
	h, err := c.cfg.Prober.Probe(ctx, tenant, true)
	if err != nil {
		log.Warn("remediation: probing the machines", "err", err)
		return controller.Retry()
	}
	if err := c.cfg.Cache.Sync(ctx); err != nil {
		return controller.Retry()
	}
	machines, err := projections.List[domain.Machine](c.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return controller.Retry()
	}
	now := c.cfg.Clock.Now()
	rems, joinDeadline := c.finishJoined(ctx, tenant, groups, machines, rems, now)
	var maintenance *domain.Maintenance
	if t, ok, err := projections.Get[domain.Tenant](c.cfg.Cache, domain.TenantRef(tenant)); err == nil && ok {
		maintenance = t.Spec.Maintenance
	}
	windowOpen, opens := domain.MaintenanceOpen(maintenance, now)
	next := c.cfg.Interval
	if !joinDeadline.IsZero() {
		next = min(next, max(joinDeadline.Sub(now), time.Second))
	}
	for i := range groups {
		ng := &groups[i]
		in := groupInput(ng, machines, rems, h, now)
		in.WindowOpen, in.WindowOpens = windowOpen, opens
		if !windowOpen {
			in.WindowWaiting = domain.MaintenanceWaiting(maintenance, opens)
		}
		d := domain.DecideRemediation(in)
		c.writeAllowed(ctx, ng, d)
		if d.Replace != "" {
			rem, err := c.start(ctx, tenant, ng, d, now)
			if err != nil {
				log.Warn("remediation: recording a remediation", "machine", d.Replace, "err", err)
				return controller.Retry()
			}
			log.Info("remediation: replacing an unhealthy machine", "machine", d.Replace, "remediation", rem.Metadata.Name, "reason", d.Reason)
			rems = append(rems, *rem)
		}
		if !d.RecheckAt.IsZero() {
			next = min(next, max(d.RecheckAt.Sub(now), time.Second))
		}
	}
	return controller.Later(next)
}

// finishJoined ends the Joining remediations: Succeeded once the new
// machine was found healthy, Failed when it was not by the deadline of its
// wait (its group's startupTimeout from when it was built, as recorded).
// Meanwhile it records the wait, with the probe's last answer. It answers
// the remediations as they are now, and the earliest deadline still ahead.
func (c *Controller) finishJoined(ctx context.Context, tenant string, groups []domain.NodeGroup, machines []domain.Machine, rems []domain.Remediation, now time.Time) ([]domain.Remediation, time.Time) {
	var recheck time.Time
	for i := range rems {
		r := &rems[i]
		if r.Status.Phase != domain.RemediationJoining || r.Status.ReplacedAt == nil {
			continue
		}
		in := joinInput(r, groups, machines, now)
		d := domain.DecideRemediationJoin(in)
		if d.Phase == "" {
			if recheck.IsZero() || d.Wait.Deadline.Before(recheck) {
				recheck = d.Wait.Deadline
			}
			if !d.Record {
				continue
			}
		}

		ref := domain.ObjectRef(domain.RemediationKind, tenant, r.Metadata.Name)
		_, err := eventstore.UpdateStatus(ctx, c.sw, ref, func(_ *domain.Object, s *domain.RemediationStatus) (bool, error) {
			if s.Phase != domain.RemediationJoining || s.ReplacedAt == nil {
				return false, nil
			}
			// Decided again on the stored status: the recorded wait is what
			// keeps the deadline.
			in.Wait, in.ReplacedAt = s.Wait, *s.ReplacedAt
			d = domain.DecideRemediationJoin(in)
			if d.Phase == "" {
				if !d.Record {
					return false, nil
				}
				s.Wait, s.Replica = d.Wait, c.cfg.Holder
				return true, nil
			}
			s.Phase, s.Message, s.FinishedAt, s.Wait, s.Replica = d.Phase, d.Message, &now, nil, c.cfg.Holder
			s.AddStep(d.Step, d.Message, now)
			return true, nil
		})
		if err != nil {
			c.cfg.Log.Warn("remediation: recording a joining remediation", "tenant", tenant, "remediation", r.Metadata.Name, "err", err)
			continue
		}
		if d.Phase != "" {
			r.Status.Phase, r.Status.FinishedAt, r.Status.Wait = d.Phase, &now, nil
			continue
		}
		r.Status.Wait = d.Wait
	}
	return rems, recheck
}

// joinInput is what DecideRemediationJoin reads of a Joining remediation:
// its group's startupTimeout (the default when the group is gone) and its
// new machine's health.
func joinInput(r *domain.Remediation, groups []domain.NodeGroup, machines []domain.Machine, now time.Time) domain.RemediationJoinInput {
	in := domain.RemediationJoinInput{Machine: r.Spec.Machine, Wait: r.Status.Wait, ReplacedAt: *r.Status.ReplacedAt,
		StartupTimeout: domain.DefaultStartupTimeout, Now: now}
	if j := slices.IndexFunc(groups, func(ng domain.NodeGroup) bool { return ng.Metadata.Name == r.Spec.NodeGroup }); j >= 0 {
		_, in.StartupTimeout = groups[j].Spec.Remediation.Durations()
	}
	j := slices.IndexFunc(machines, func(m domain.Machine) bool { return m.Metadata.Name == r.Spec.Machine })
	if j < 0 {
		in.Problem = "machine " + r.Spec.Machine + " is not in the read model"
		return in
	}
	m := &machines[j]
	in.FirstHealthy = m.Status.FirstHealthy
	if c := domain.FindCondition(m.Status.Conditions, domain.ConditionHealthy); c != nil && c.Status != "True" {
		in.Problem = c.Reason
		if c.Message != "" {
			in.Problem += ": " + c.Message
		}
	}
	return in
}

// writeAllowed keeps the group's RemediationAllowed condition.
func (c *Controller) writeAllowed(ctx context.Context, ng *domain.NodeGroup, d domain.RemediationDecision) {
	status := "True"
	if !d.Allowed {
		status = "False"
	}
	cond := domain.Condition{Type: domain.ConditionRemediationAllowed, Status: status, Reason: d.AllowedReason, Message: d.Message}
	if cur := domain.FindCondition(ng.Status.Conditions, cond.Type); cur != nil && cur.Status == cond.Status && cur.Reason == cond.Reason && cur.Message == cond.Message {
		return
	}
	now := c.cfg.Clock.Now()
	_, err := eventstore.UpdateStatus(ctx, c.sw, domain.ObjectRef(domain.NodeGroupKind, ng.Metadata.Tenant, ng.Metadata.Name), func(_ *domain.Object, s *domain.NodeGroupStatus) (bool, error) {
		s.Conditions = domain.SetCondition(s.Conditions, cond, now)
		return true, nil
	})
	if err != nil && !domain.IsNotFound(err) {
		c.cfg.Log.Warn("remediation: writing RemediationAllowed", "tenant", ng.Metadata.Tenant, "nodegroup", ng.Metadata.Name, "err", err)
	}
}

// start records the Remediation of the decided machine; its creation
// queues the apply worker.
func (c *Controller) start(ctx context.Context, tenant string, ng *domain.NodeGroup, d domain.RemediationDecision, now time.Time) (*domain.Remediation, error) {
	name := remediationName(d.Replace, now)
	role := ng.Spec.Role
	spec, _ := json.Marshal(domain.RemediationSpec{NodeGroup: ng.Metadata.Name, Machine: d.Replace, Role: role, Reason: clip(d.Reason, 1024), UnhealthySince: d.Since.UTC()})
	ref := domain.ObjectRef(domain.RemediationKind, tenant, name)
	_, err := c.cfg.Store.Update(ctx, ref, eventstore.UpdateOptions{Hint: c.cfg.Cache}, func(state *domain.Object) ([]domain.Event, error) {
		if state != nil {
			return nil, nil
		}
		return domain.Decide(nil, domain.Command{Op: domain.OpCreate, Ref: ref, Actor: Actor, Now: now, NewUID: uuid.NewString(),
			Object: &domain.Object{Metadata: domain.ObjectMeta{Name: name, Tenant: tenant,
				Labels: map[string]string{"rezuscloud.io/nodegroup": ng.Metadata.Name, "rezuscloud.io/machine": d.Replace}}, Spec: spec}})
	})
	if err != nil {
		return nil, err
	}
	_, err = eventstore.UpdateStatus(ctx, c.sw, ref, func(_ *domain.Object, s *domain.RemediationStatus) (bool, error) {
		if len(s.Steps) > 0 {
			return false, nil
		}
		s.AddStep("Detected", fmt.Sprintf("%s unhealthy since %s: %s", d.Replace, d.Since.UTC().Format(time.RFC3339), d.Reason), now)
		s.Replica = c.cfg.Holder
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	rem, _, err := projections.Get[domain.Remediation](c.cfg.Cache, ref)
	if err != nil || rem == nil {
		return &domain.Remediation{Metadata: domain.ObjectMeta{Name: name, Tenant: tenant}, Spec: domain.RemediationSpec{NodeGroup: ng.Metadata.Name, Machine: d.Replace, Role: role}}, err
	}
	return rem, nil
}

// remediationName names a machine's remediation by when it began: the
// machine's name (a label) and the time in seconds, hexadecimal.
func remediationName(machine string, now time.Time) string {
	suffix := "-" + strings.ToLower(fmt.Sprintf("%x", now.Unix()))
	if len(machine)+len(suffix) > 63 {
		machine = strings.TrimRight(machine[:63-len(suffix)], "-")
	}
	return machine + suffix
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
