package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller"
	"github.com/rezuscloud/rezuscloud/projections"
)

// Controller is the rollout controller; New builds it, Run runs it.
type Controller struct {
	controller.Base
	cfg Config
	sw  eventstore.StatusWriter

	// probedMu guards probed: when this replica last probed a done
	// tenant of a rollout ("rollout/tenant"; dueProbes).
	probedMu sync.Mutex
	probed   map[string]time.Time
	// reprobes is how many probes again of done tenants may start now
	// (dueProbes), as of refilled.
	reprobes float64
	refilled time.Time
}

// New returns the controller of cfg (see Config.Validate); Run starts it.
// Every rollout that is not over is queued when this replica leads and
// every minute, in case a run ended with Done too early.
func New(cfg Config) *Controller {
	cfg.setDefaults()
	c := &Controller{cfg: cfg}
	c.sw = eventstore.StatusWriter{Store: cfg.Store, Actor: Actor, Now: cfg.Clock.Now, Hint: cfg.Cache}
	c.Base = controller.Build(controller.Spec{
		Store: cfg.Store, Holder: cfg.Holder, Name: "rollout controller",
		Lease: Lease, Consumer: Consumer, Queue: Queue, Description: "rollouts under way",
		Kinds:       []*domain.KindInfo{domain.RolloutKind, domain.UpgradeKind},
		Concurrency: cfg.Concurrency, Backoff: controller.Exponential(cfg.Interval, time.Minute),
		Resync: time.Minute, Clock: cfg.Clock, Log: cfg.Log,
		ReadModel: cfg.Cache, Pending: func(context.Context) ([]string, error) { return c.open() },
	}, runtimeController{c})
	return c
}

type runtimeController struct{ c *Controller }

func (c *Controller) open() ([]string, error) {
	ros, err := projections.List[domain.Rollout](c.cfg.Cache, domain.RolloutKind, projections.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ro := range ros {
		if !ro.Status.Finished() {
			out = append(out, ro.Metadata.Name)
		}
	}
	return out, nil
}

// Keys queues a rollout on a change of its own (not the controller's status
// writes) and on any event of an Upgrade it wrote.
func (r runtimeController) Keys(ctx context.Context, ev *domain.Event, seq uint64) ([]string, error) {
	if ev.Object == nil {
		return nil, nil
	}
	var key string
	switch ev.Object.Kind {
	case domain.RolloutKind.Kind:
		if ev.Actor == Actor || ev.Action == domain.ActionDeleted {
			return nil, nil
		}
		key = ev.Object.Metadata.Name
	default:
		if !movesRollout(ev) {
			return nil, nil
		}
		key = ev.Object.Metadata.Labels[domain.LabelRollout]
	}
	if key == "" {
		return nil, nil
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.c.cfg.Cache.WaitFor(wctx, seq); err != nil {
		return nil, err
	}
	return []string{key}, nil
}

// movesRollout reports whether an event of an Upgrade a rollout wrote can
// move the rollout on: any but a status write of a run still under way.
// Those come several times a machine (each step, each change of what it
// waits for) from every running tenant at once; the rollout looks at its
// running tenants' progress every Interval anyway, and taking each write
// as a round was the rollout's largest CPU cost (issue 49: a 1,000-tenant
// rollout's status decoded and written again for each).
func movesRollout(ev *domain.Event) bool {
	if ev.Object.Kind != domain.UpgradeKind.Kind || !strings.HasSuffix(ev.Type, "StatusUpdated") {
		return true
	}
	var st struct {
		Phase string `json:"phase"`
	}
	if err := json.Unmarshal(ev.Object.Status, &st); err != nil {
		return true
	}
	return (&domain.UpgradeStatus{Phase: st.Phase}).Final()
}

// Due runs a rollout as soon as it is queued.
func (runtimeController) Due(_ string, e controller.Entry) time.Time { return e.Last }

// Reconcile takes one step of the rollout.
func (r runtimeController) Reconcile(ctx context.Context, name string, _ controller.Entry, _ int) controller.Result {
	return r.c.reconcile(ctx, name)
}

func (c *Controller) reconcile(ctx context.Context, name string) controller.Result {
	log := c.cfg.Log.With("rollout", name)
	ref := domain.ObjectRef(domain.RolloutKind, "", name)
	ro, ok, err := projections.Get[domain.Rollout](c.cfg.Cache, ref)
	if err != nil {
		log.Warn("rollout: reading", "err", err)
		return controller.Retry()
	}
	if !ok || ro.Status.Finished() || ro.Metadata.DeletionTimestamp != nil {
		c.forgetProbes(name)
		return controller.Done()
	}
	var selected []string
	if ro.Status.StartedAt == nil {
		if selected, err = c.selected(&ro.Spec); err != nil {
			log.Warn("rollout: selecting tenants", "err", err)
			return controller.Retry()
		}
	}
	obs := c.observe(ctx, ro, selected)
	now := c.cfg.Clock.Now()
	var d domain.RolloutDecision
	_, err = eventstore.UpdateStatus(ctx, c.sw, ref, func(obj *domain.Object, st *domain.RolloutStatus) (bool, error) {
		var spec domain.RolloutSpec
		if err := json.Unmarshal(obj.Spec, &spec); err != nil {
			return false, err
		}
		before, _ := json.Marshal(st)
		d = domain.DecideRollout(domain.RolloutInput{Spec: spec, Generation: obj.Metadata.Generation, Status: *st,
			Selected: selected, Observed: obs, Now: now})
		after, _ := json.Marshal(&d.Status)
		*st = d.Status
		return !bytes.Equal(before, after), nil
	})
	if err != nil {
		if domain.IsNotFound(err) {
			return controller.Done()
		}
		log.Warn("rollout: recording the status", "err", err)
		return controller.Retry()
	}
	if d.Status.Phase != ro.Status.Phase || (d.Status.Halt != nil && ro.Status.Halt == nil) {
		log.Info("rollout: "+strings.ToLower(d.Status.Phase), "message", d.Status.Message)
	}
	// Write what the stored status says runs: the new starts, and any
	// Running tenant whose change is not found (a restart between the
	// status and the change). Writes are idempotent by name.
	failed := false
	for _, t := range d.Status.Tenants {
		if t.State != domain.RolloutTenantRunning || obs[t.Name].Change != "" && !startedNow(d.Start, t.Name) {
			continue
		}
		if err := c.write(ctx, ro, t); err != nil {
			log.Warn("rollout: writing a tenant's change", "tenant", t.Name, "err", err)
			failed = true
		}
	}
	for _, tenant := range d.Cancel {
		if err := c.cancel(ctx, ro, tenant, attemptOf(d.Status.Tenants, tenant)); err != nil {
			log.Warn("rollout: canceling a tenant's upgrade", "tenant", tenant, "err", err)
			failed = true
		}
	}
	switch {
	case failed:
		return controller.Retry()
	case d.Status.Finished():
		c.forgetProbes(name)
		return controller.Done()
	}
	next := c.cfg.Interval
	if !d.RecheckAt.IsZero() {
		next = min(next, max(d.RecheckAt.Sub(now), 100*time.Millisecond))
	}
	return controller.Later(next)
}

func startedNow(starts []domain.RolloutStart, tenant string) bool {
	for _, s := range starts {
		if s.Tenant == tenant {
			return true
		}
	}
	return false
}

func attemptOf(ts []domain.RolloutTenantStatus, tenant string) int {
	for _, t := range ts {
		if t.Name == tenant {
			return t.Attempt
		}
	}
	return 0
}

// selected are the tenants the rollout's selector picks, not being
// deleted, in name order.
func (c *Controller) selected(spec *domain.RolloutSpec) ([]string, error) {
	sel, err := domain.ParseSelector(spec.TenantSelector)
	if err != nil {
		return nil, err
	}
	tenants, err := projections.List[domain.Tenant](c.cfg.Cache, domain.TenantKind, projections.ListOptions{Selector: sel})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(tenants))
	for _, t := range tenants {
		if t.Metadata.DeletionTimestamp == nil {
			out = append(out, t.Metadata.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}
