package apply

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// A dry run's plan: what `tofu plan` says a pending change of a tenant or
// node group would do to the infrastructure. It runs on the replica that
// serves the dry run, in a scratch dir of its own (never the tenant's work
// dir, where an apply may be running), without the state lock
// (-lock=false: it writes nothing) and without refreshing (-refresh=false:
// the change's effect, not drift), and the scratch dir goes afterwards.

// maxPlans bounds the dry-run plans running at once on a replica.
const maxPlans = 2

// PlanChange plans the tenant's infrastructure with ch in place of the
// stored object. Metal node groups are not planned (no tofu builds them).
func (w *Worker) PlanChange(ctx context.Context, tenant string, ch talos.Change) (*domain.ImpactPlan, error) {
	select {
	case w.planSlots <- struct{}{}:
		defer func() { <-w.planSlots }()
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a plan slot: %w", ctx.Err())
	}
	t, ok, err := projections.Get[domain.Tenant](w.cfg.Cache, domain.TenantRef(tenant))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, domain.NewNotFound(domain.TenantKind.Kind, tenant)
	}
	if ch.Tenant != nil {
		next := *ch.Tenant
		next.Status = t.Status
		t = &next
	}
	in, _, err := w.inputsWith(ctx, tenant, t, ch)
	if err != nil {
		return nil, err
	}
	hasState, err := w.cfg.State.HasState(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("checking the state: %w", err)
	}
	if len(in.Groups) == 0 && !hasState {
		return &domain.ImpactPlan{Summary: "0 to add, 0 to change, 0 to destroy"}, nil
	}
	scratch := filepath.Join(w.cfg.WorkDir, "plans")
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(scratch, tenant+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// What the tenant's state uses, as its last run noted it (saves an init).
	if b, err := os.ReadFile(filepath.Join(w.cfg.WorkDir, "tenants", tenant, providersFile)); err == nil {
		_ = os.WriteFile(filepath.Join(dir, providersFile), b, 0o600)
	}
	logw := tofu.MemoryLog()
	defer logw.Close()
	var spent time.Duration
	x, err := w.prepareIn(ctx, tenant, "dryrun-"+filepath.Base(dir), dir, false, logw, &spent)
	if err != nil {
		return nil, err
	}
	defer x.cleanup()
	if _, err := w.configure(ctx, x, &in); err != nil {
		return nil, err
	}
	ui := &tofu.UIWriter{Log: logw, SetPhase: func(string) {}}
	err = x.tofu(ctx, ui, "plan", "-lock=false", "-refresh=false", "-detailed-exitcode", "-input=false", "-json", "-no-color")
	ui.Flush()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.ExitCode() == 2 && ctx.Err() == nil:
	case ctx.Err() != nil:
		// tofu was interrupted ("execution halted"): say why.
		return nil, context.Cause(ctx)
	case len(ui.Errors) > 0:
		// The tenant's editors read it (a dry run's planError): tofu's
		// own words only, never what a module computed.
		return nil, fmt.Errorf("tofu plan: %s", tofu.RedactForReaders(ui.Errors[0], tofu.ConfigFiles(dir, tofu.MaxConfigText)))
	default:
		return nil, err
	}
	p := &domain.ImpactPlan{Add: ui.Plan.Added, Change: ui.Plan.Changed, Destroy: ui.Plan.Destroyed,
		Resources: ui.Changes[:min(len(ui.Changes), domain.MaxDriftResources)]}
	p.Summary = domain.DriftSummary(p.Add, p.Change, p.Destroy, nil)
	return p, nil
}
