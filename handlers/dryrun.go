package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/talos"
)

// Dry runs (?dryRun=All on POST, PUT and PATCH, as Kubernetes has): the
// write is decided exactly as it would be — admission, validation,
// defaulting, the resourceVersion precondition — and nothing is stored. The
// answer is the object as it would be stored and, for tenants, node groups
// and config patches, its "impact": what the change would do to each
// machine (talos.Service.Impact).

// ChangePlanner plans a pending change of a tenant or node group with tofu
// (apply.Worker.PlanChange).
type ChangePlanner func(ctx context.Context, tenant string, ch talos.Change) (*domain.ImpactPlan, error)

// dryRunParam reads ?dryRun: false when absent, true for All; any other
// value is refused rather than taken as a write.
func dryRunParam(c echo.Context) (bool, error) {
	switch v := c.QueryParam("dryRun"); v {
	case "":
		return false, nil
	case "All":
		return true, nil
	default:
		return false, domain.NewBadRequest(fmt.Sprintf("dryRun must be All, got %q", v),
			domain.Cause{Field: "dryRun", Type: domain.CauseNotSupported, Message: `supported values: "All"`})
	}
}

// impactTimeout bounds the dry-run applies a dry run asks the nodes for.
const impactTimeout = 15 * time.Second

// planTimeout bounds tofu's plan of a dry run, apart from the nodes' dry
// runs: it runs tofu (an init in a scratch directory, then the plan) on the
// server, which takes a few CPU-seconds and far longer on a busy server. A
// plan cut short is said to be (planError); the rest of the impact stands.
const planTimeout = time.Minute

// dryRunAnswer answers a dry run whose write decided events on state.
func (r *resource) dryRunAnswer(c echo.Context, code int, state *domain.Object, seq uint64, events []domain.Event) error {
	next := state
	for i := range events {
		next = domain.Evolve(next, &events[i], seq)
	}
	if next == nil {
		return domain.NewBadRequest("the write would change nothing")
	}
	raw, err := json.Marshal(next)
	if err != nil {
		return err
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return err
	}
	if impact, err := r.impact(c.Request().Context(), next); err != nil {
		out["impactError"] = err.Error()
	} else if impact != nil {
		out["impact"] = impact
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(code, out)
}

// impact is what next, stored, would do to its tenant's machines (nil for
// other kinds, or a tenant not built yet).
func (r *resource) impact(ctx context.Context, next *domain.Object) (*domain.ChangeImpact, error) {
	a := r.api
	if a.talos == nil {
		return nil, nil
	}
	raw, err := json.Marshal(next)
	if err != nil {
		return nil, err
	}
	var ch talos.Change
	tenant := next.Metadata.Tenant
	switch r.kind {
	case domain.TenantKind:
		ch.Tenant = &domain.Tenant{}
		err = json.Unmarshal(raw, ch.Tenant)
		tenant = next.Metadata.Name
	case domain.NodeGroupKind:
		ch.NodeGroup = &domain.NodeGroup{}
		err = json.Unmarshal(raw, ch.NodeGroup)
	case domain.ConfigPatchKind:
		ch.Patch = &domain.ConfigPatch{}
		err = json.Unmarshal(raw, ch.Patch)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if a.cache.Count(domain.MachineKind.Kind, tenant) == 0 && r.kind != domain.NodeGroupKind {
		return &domain.ChangeImpact{Summary: domain.ImpactSummary(nil), Machines: []domain.MachineImpact{}}, nil
	}
	nctx, cancel := context.WithTimeout(ctx, impactTimeout)
	defer cancel()
	nodes := a.dryRunner
	if nodes == nil {
		nodes = talos.NodeAPI{Timeout: 5 * time.Second}
	}
	imp, err := a.talos.Impact(nctx, tenant, ch, nodes)
	if err != nil {
		return nil, err
	}
	if a.planChange != nil && ch.Patch == nil {
		// Config patches change configs, which tofu leaves to the config
		// controller (user data is ignored after day 0): no plan for them.
		pctx, cancel := context.WithTimeoutCause(ctx, planTimeout, fmt.Errorf("tofu's plan did not finish within %s", planTimeout))
		defer cancel()
		if imp.Plan, err = a.planChange(pctx, tenant, ch); err != nil {
			imp.PlanError = err.Error()
		}
	}
	return &imp, nil
}

// dryRunCreate answers POST ?dryRun=All.
func (r *resource) dryRunCreate(c echo.Context, cmd domain.Command) error {
	events, err := domain.Decide(nil, cmd)
	if err != nil {
		return err
	}
	return r.dryRunAnswer(c, http.StatusCreated, nil, 0, events)
}

// dryRunUpdate answers PUT ?dryRun=All.
func (r *resource) dryRunUpdate(c echo.Context, cmd domain.Command) error {
	return r.dryRunPatch(c, cmd.Ref, func(state *domain.Object) ([]domain.Event, error) { return domain.Decide(state, cmd) })
}

// dryRunPatch answers PATCH (and PUT) ?dryRun=All: decide is the write's
// decision on the stored state, which is read as the write would read it.
func (r *resource) dryRunPatch(c echo.Context, ref domain.Ref, decide func(*domain.Object) ([]domain.Event, error)) error {
	rec, err := r.api.store.Load(c.Request().Context(), ref)
	if err != nil {
		return err
	}
	var state *domain.Object
	var seq uint64
	if rec != nil {
		state, seq = rec.State(), rec.Seq
	}
	events, err := decide(state)
	if err != nil {
		return err
	}
	return r.dryRunAnswer(c, http.StatusOK, state, seq, events)
}
