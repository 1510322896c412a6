package apply

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/providers"
)

// ReasonUnchanged is the Reconciled condition's reason after a run that
// found nothing for tofu to act on (unchanged.go) and ran no tofu.
const ReasonUnchanged = "NothingToApply"

// tofuUnchanged gathers decideTofu's facts for a run of tenant and answers
// whether it may skip tofu (and the Apply), with the reason either way.
func (w *Worker) tofuUnchanged(ctx context.Context, tenant string, t *domain.Tenant, drift bool) (skip bool, reason string) {
	dir := w.tenantDir(tenant)
	f := tofuFacts{Last: readApplied(dir), Drift: drift}
	if f.Drift || f.Last == nil {
		run, why := decideTofu(f) // nothing else is read: the run follows
		return !run, why
	}
	in, extra, err := w.inputs(ctx, tenant, t)
	if err == nil {
		f.Metal = len(extra.metal) > 0
		if reps, err := w.pendingReplacements(tenant, in); err == nil {
			f.Replacements = len(reps)
		} else {
			f.Replacements = -1 // unknown: decideTofu runs tofu on any count but 0
		}
		f.Inputs = w.currentDigest(tenant, dir, in)
	}
	if rev, err := w.cfg.State.StateRevision(ctx, tenant); err == nil {
		f.StateRevision = rev
	} else {
		f.Inputs = "" // unknown state: run
	}
	ms, err := projections.List[domain.Machine](w.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		f.Inputs = ""
	}
	f.Machines = machinesDigest(recordedKeys(ms))
	run, why := decideTofu(f)
	return !run, why
}

// currentDigest is the inputsDigest of the configuration a run would
// write now, from the providers and modules the last run's state used (its
// note); "" when it cannot be made without tofu.
func (w *Worker) currentDigest(tenant, dir string, in providers.GenerateInput) string {
	b, err := os.ReadFile(filepath.Join(dir, providersFile))
	if err != nil {
		return ""
	}
	var used stateUses
	if json.Unmarshal(b, &used) != nil {
		return ""
	}
	if err := w.addStateUses(&in, used); err != nil {
		return ""
	}
	files, err := providers.Generate(in)
	if err != nil {
		return ""
	}
	cli, err := w.cfg.Tofu.CLIConfig(w.pluginCache())
	if err != nil {
		return ""
	}
	d, err := inputsDigest(files, w.backendConfig(tenant), []byte(cli))
	if err != nil {
		return ""
	}
	return d
}

// tenantDir is a tenant's work dir.
func (w *Worker) tenantDir(tenant string) string {
	return filepath.Join(w.cfg.WorkDir, "tenants", tenant)
}

// pluginCache is the plugin cache every run shares.
func (w *Worker) pluginCache() string { return filepath.Join(w.cfg.WorkDir, "plugin-cache") }

// readApplied reads a work dir's appliedFile (nil: none or unreadable).
func readApplied(dir string) *appliedRecord {
	b, err := os.ReadFile(filepath.Join(dir, appliedFile))
	if err != nil {
		return nil
	}
	var r appliedRecord
	if json.Unmarshal(b, &r) != nil || r.Inputs == "" {
		return nil
	}
	return &r
}

// writeApplied records a successful run's appliedRecord.
func writeApplied(dir string, r *appliedRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return writeIfChanged(filepath.Join(dir, appliedFile), b, 0o600)
}

// forgetApplied removes the record before a run changes anything.
func forgetApplied(dir string) error {
	if err := os.Remove(filepath.Join(dir, appliedFile)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// tenantUnchanged is the tenant's status after a run that ran no tofu:
// its generation is reconciled, by the infrastructure as it is.
func tenantUnchanged(s *domain.TenantStatus, generation int64, reason string, now time.Time) {
	s.Phase = "Ready"
	s.ObservedGeneration = generation
	setCondition(s, domain.Condition{Type: "Reconciled", Status: "True", Reason: ReasonUnchanged,
		Message: "no tofu run: " + reason, ObservedGeneration: generation}, now)
}
