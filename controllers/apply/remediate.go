package apply

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/providers"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// Remediation: the remediation controller (controllers/remediation) decides that
// an unhealthy machine is replaced and records a Remediation; its creation
// queues a run of the tenant, and the run replaces the machine in the same
// tofu apply as the rest of the tenant's changes. Each step is recorded in
// the Remediation's status, so a run that dies part-way is seen and
// resumed: a Remediation still Pending or Replacing is taken up again by the
// next run (drain, etcd and Node deletion are safe to repeat).
//
//	Pending -> Replacing: drained (pods already deleted on an unreachable
//	node are not waited for), a control plane's etcd member removed through
//	a healthy one (refused when quorum would be lost), the Node deleted;
//	then `tofu apply -replace=` of every resource instance of the machine
//	(providers.ReplaceAddresses) builds a new machine of the same name with
//	a fresh day-0 config -> Joining (the controller waits for it to be
//	healthy) or Failed.

// What a run does for a Remediation, by what the state says.
const (
	// replaceNow: take the machine out and replace it in this apply.
	replaceNow = iota
	// replaceWritten: a run that died before recording it replaced the
	// machine already (the state was written since the replacement
	// began): the new machine is left alone.
	replaceWritten
	// replaceDestroyed: a run that died destroyed the old machine and did
	// not build the new one: this apply builds it (it is in the config).
	replaceDestroyed
	// replaceGone: the machine is not in the state and no replacement
	// began: nothing to replace.
	replaceGone
)

// decideReplacement decides from the state's serial when the replacement
// began (0: it has not), the state's serial now, and whether the machine
// is in the state.
func decideReplacement(began, now int64, inState bool) int {
	switch {
	case began == 0 && !inState:
		return replaceGone
	case began == 0:
		return replaceNow
	case !inState:
		return replaceDestroyed
	case now > began:
		return replaceWritten
	}
	return replaceNow
}

// replacement is one machine a run replaces for a Remediation.
type replacement struct {
	rem     domain.Remediation
	machine domain.Machine
}

// pendingReplacements are the tenant's Remediations a run carries out:
// Pending or Replacing, of a tofu-built machine of a group in the run.
func (w *Worker) pendingReplacements(tenant string, in providers.GenerateInput) ([]replacement, error) {
	rems, err := projections.List[domain.Remediation](w.cfg.Cache, domain.RemediationKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return nil, err
	}
	var out []replacement
	for _, r := range rems {
		if r.Status.Phase != domain.RemediationPending && r.Status.Phase != domain.RemediationReplacing {
			continue
		}
		inRun := slices.ContainsFunc(in.Groups, func(g providers.GroupInput) bool { return g.NodeGroup.Metadata.Name == r.Spec.NodeGroup })
		if !inRun {
			if _, exists := w.cfg.Cache.Get(domain.ObjectRef(domain.NodeGroupKind, tenant, r.Spec.NodeGroup)); exists {
				continue // a metal group's: the metal path's (pendingMetalReplacements)
			}
		}
		m, ok, err := projections.Get[domain.Machine](w.cfg.Cache, domain.ObjectRef(domain.MachineKind, tenant, r.Spec.Machine))
		if err != nil {
			return nil, err
		}
		switch {
		case !ok || !inRun:
			w.remediationEnds(context.Background(), tenant, r.Metadata.Name, domain.RemediationFailed, "Failed",
				fmt.Sprintf("machine %s of node group %s is not in the tenant's infrastructure any more", r.Spec.Machine, r.Spec.NodeGroup))
			continue
		case m.Metadata.Labels[ManagedByLabel] != managedByValue:
			w.remediationEnds(context.Background(), tenant, r.Metadata.Name, domain.RemediationFailed, "Failed",
				fmt.Sprintf("machine %s is not built with OpenTofu: it cannot be replaced with tofu", r.Spec.Machine))
			continue
		}
		out = append(out, replacement{rem: r, machine: *m})
	}
	return out, nil
}

// prepareReplacements takes each machine out of the cluster and answers the
// -replace arguments of the apply. A machine that cannot be taken out (a
// drain that stays blocked, etcd quorum) fails its Remediation and is not
// replaced; the run goes on with the others.
func (w *Worker) prepareReplacements(ctx context.Context, x *execution, tenant string, reps []replacement, logw *tofu.LogWriter) ([]string, []replacement, error) {
	if len(reps) == 0 {
		return nil, nil, nil
	}
	state, err := x.statePull(ctx)
	if err != nil {
		return nil, nil, err
	}
	bundle, err := w.cfg.Bundles.Bundle(ctx, tenant)
	if err != nil {
		return nil, nil, fmt.Errorf("loading the tenant's PKI: %w", err)
	}
	serial, err := providers.StateSerial(state)
	if err != nil {
		return nil, nil, err
	}
	var args []string
	var kept []replacement
	for _, r := range reps {
		name, m := r.rem.Metadata.Name, r.machine
		addrs, err := providers.ReplaceAddresses(state, m.Spec.NodeGroup, m.Metadata.Name)
		if err != nil && !errors.Is(err, providers.ErrMachineNotInState) {
			return nil, nil, err
		}
		switch decideReplacement(r.rem.Status.StateSerial, serial, err == nil) {
		case replaceGone:
			w.remediationEnds(ctx, tenant, name, domain.RemediationFailed, "Failed", err.Error())
			continue
		case replaceWritten:
			logw.Printf("remediation %s: machine %s was replaced by a run that ended before recording it (state serial %d, then %d)",
				name, m.Metadata.Name, r.rem.Status.StateSerial, serial)
			kept = append(kept, r)
			continue
		case replaceDestroyed:
			logw.Printf("remediation %s: machine %s was destroyed by a run that ended before building it again: this apply builds it", name, m.Metadata.Name)
			kept = append(kept, r)
			continue
		}
		now := w.cfg.Now()
		w.updateRemediation(ctx, tenant, name, func(s *domain.RemediationStatus) {
			s.Phase = domain.RemediationReplacing
			if s.StateSerial == 0 {
				s.StateSerial = serial
			}
			s.AddStep("Replacing", "the apply worker takes "+m.Metadata.Name+" out of the cluster", now)
		})
		logw.Printf("remediation %s: replacing machine %s (%s)", name, m.Metadata.Name, r.rem.Spec.Reason)
		if !w.takeOutReplaced(ctx, tenant, name, m, bundle, logw) {
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			continue
		}
		for _, a := range addrs {
			args = append(args, "-replace="+a)
		}
		kept = append(kept, r)
	}
	if len(args) > 0 {
		logw.Printf("remediation: tofu replaces %s", strings.Join(args, " "))
	}
	return args, kept, nil
}

// takeOutReplaced takes the machine of remediation name out of the cluster
// as a scale-down does (drained, a control plane's etcd member removed, a
// worker reset when it answers), for a replacement (the control planes may
// be an even number meanwhile), then deletes its Node, recording each step.
// It answers false, the Remediation failed, when the machine cannot be
// taken out.
func (w *Worker) takeOutReplaced(ctx context.Context, tenant, name string, m domain.Machine, bundle *secrets.Bundle, logw *tofu.LogWriter) bool {
	if err := w.takeOut(ctx, tenant, bundle, []domain.Machine{m}, true, logw); err != nil {
		if ctx.Err() == nil {
			w.remediationEnds(ctx, tenant, name, domain.RemediationFailed, "Failed", "taking the machine out of the cluster: "+err.Error())
		}
		return false
	}
	step := "Drained"
	if m.Spec.Role == domain.RoleControlPlane {
		step = "EtcdMemberRemoved"
	}
	w.remediationStep(ctx, tenant, name, domain.RemediationReplacing, step, "")
	w.deleteNodes(ctx, tenant, []domain.Machine{m}, logw)
	w.remediationStep(ctx, tenant, name, domain.RemediationReplacing, "NodeDeleted", "")
	return true
}

// finishReplacements records how the apply went for the replaced machines:
// a new machine starts with a clean health status (remediation's
// startupTimeout runs from now), its Remediation goes on to Joining; a
// failed apply fails them.
func (w *Worker) finishReplacements(ctx context.Context, tenant, apply string, reps []replacement, applyErr error) {
	for _, r := range reps {
		if applyErr != nil {
			w.remediationEnds(ctx, tenant, r.rem.Metadata.Name, domain.RemediationFailed, "Failed", "the apply failed: "+applyErr.Error())
			continue
		}
		updateStatus(ctx, w, domain.ObjectRef(domain.MachineKind, tenant, r.machine.Metadata.Name), func(s *domain.MachineStatus, _ int64) {
			s.Ready, s.FirstHealthy, s.Node, s.Stage = false, nil, "", "Unknown"
			s.Conditions = slices.DeleteFunc(s.Conditions, func(c domain.Condition) bool { return c.Type == domain.ConditionHealthy })
		})
		now := w.cfg.Now()
		w.updateRemediation(ctx, tenant, r.rem.Metadata.Name, func(s *domain.RemediationStatus) {
			s.Phase, s.Apply, s.ReplacedAt = domain.RemediationJoining, apply, &now
			s.AddStep("Replaced", "apply "+apply+" built a new "+r.machine.Metadata.Name, now)
		})
	}
}

// updateRemediation rewrites a Remediation's status through mutate, naming
// this replica as the one that ran its current step.
func (w *Worker) updateRemediation(ctx context.Context, tenant, name string, mutate func(s *domain.RemediationStatus)) {
	updateStatus(ctx, w, domain.ObjectRef(domain.RemediationKind, tenant, name), func(s *domain.RemediationStatus, _ int64) {
		mutate(s)
		s.Replica = w.cfg.Holder
	})
}

// remediationStep records a step of a Remediation.
func (w *Worker) remediationStep(ctx context.Context, tenant, name, phase, step, msg string) {
	now := w.cfg.Now()
	w.updateRemediation(ctx, tenant, name, func(s *domain.RemediationStatus) {
		s.Phase = phase
		s.AddStep(step, msg, now)
	})
}

// remediationEnds finishes a Remediation.
func (w *Worker) remediationEnds(ctx context.Context, tenant, name, phase, step, msg string) {
	now := w.cfg.Now()
	w.updateRemediation(ctx, tenant, name, func(s *domain.RemediationStatus) {
		s.Phase, s.Message, s.FinishedAt = phase, msg, &now
		s.AddStep(step, msg, now)
	})
}

// Metal machines are not rebuilt but reinstalled: the run takes the machine
// out of the cluster as for any other, resets it through the Talos API
// (back to maintenance mode, its disk wiped), forgets the config it had,
// and the metal path's apply gives it its day-0 config again. A machine
// that does not answer cannot be reset from here (no power control): its
// Remediation fails with the reason.

// pendingMetalReplacements are the tenant's Remediations a run carries out
// for metal machines of groups: Pending or Replacing.
func (w *Worker) pendingMetalReplacements(ctx context.Context, tenant string, groups []*domain.NodeGroup) ([]replacement, error) {
	rems, err := projections.List[domain.Remediation](w.cfg.Cache, domain.RemediationKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return nil, err
	}
	var out []replacement
	for _, r := range rems {
		if r.Status.Phase != domain.RemediationPending && r.Status.Phase != domain.RemediationReplacing {
			continue
		}
		if !slices.ContainsFunc(groups, func(ng *domain.NodeGroup) bool { return ng.Metadata.Name == r.Spec.NodeGroup }) {
			continue
		}
		m, ok, err := projections.Get[domain.Machine](w.cfg.Cache, domain.ObjectRef(domain.MachineKind, tenant, r.Spec.Machine))
		if err != nil {
			return nil, err
		}
		if !ok {
			w.remediationEnds(ctx, tenant, r.Metadata.Name, domain.RemediationFailed, "Failed",
				fmt.Sprintf("machine %s of node group %s is gone", r.Spec.Machine, r.Spec.NodeGroup))
			continue
		}
		out = append(out, replacement{rem: r, machine: *m})
	}
	return out, nil
}

// reinstallMetal takes each machine out, resets it and forgets its config,
// so that the metal apply that follows installs it again; it answers the
// ones to mark Joining once that apply went through.
func (w *Worker) reinstallMetal(ctx context.Context, tenant string, reps []replacement, in metalInputs, logw *tofu.LogWriter) []replacement {
	var kept []replacement
	for _, r := range reps {
		name, m := r.rem.Metadata.Name, r.machine
		w.remediationStep(ctx, tenant, name, domain.RemediationReplacing, "Replacing", "the apply worker takes "+m.Metadata.Name+" out of the cluster to reinstall it")
		logw.Printf("remediation %s: reinstalling metal machine %s (%s)", name, m.Metadata.Name, r.rem.Spec.Reason)
		if !w.takeOutReplaced(ctx, tenant, name, m, in.bundle, logw) {
			continue
		}
		if err := w.resetToMaintenance(ctx, in, m, logw); err != nil {
			w.remediationEnds(ctx, tenant, name, domain.RemediationFailed, "Failed", err.Error())
			continue
		}
		w.forgetConfig(ctx, tenant, m.Metadata.Name)
		w.remediationStep(ctx, tenant, name, domain.RemediationReplacing, "Reset", "back in maintenance mode; its config is applied again")
		kept = append(kept, r)
	}
	return kept
}

// metalResetWait bounds the wait for a reset machine to answer in
// maintenance mode.
const metalResetWait = 3 * time.Minute

// resetToMaintenance resets a metal machine (a machine already in
// maintenance mode is left so) and waits until it answers in maintenance
// mode.
func (w *Worker) resetToMaintenance(ctx context.Context, in metalInputs, m domain.Machine, logw *tofu.LogWriter) error {
	if st, err := w.cfg.Metal.Probe(ctx, in.bundle, m.Spec.Address); err == nil && st.Maintenance {
		return nil
	}
	if err := w.cfg.Metal.Reset(ctx, in.bundle, m.Spec.Address); err != nil {
		return fmt.Errorf("resetting %s (%s) through the Talos API: %w (a machine that does not answer needs its power cycled by hand)", m.Metadata.Name, m.Spec.Address, err)
	}
	logw.Printf("remediation: %s reset; waiting for it in maintenance mode", m.Metadata.Name)
	wctx, cancel := context.WithTimeout(ctx, metalResetWait)
	defer cancel()
	for {
		st, err := w.cfg.Metal.Probe(wctx, in.bundle, m.Spec.Address)
		if err == nil && st.Maintenance {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("%s did not come back in maintenance mode within %s after its reset", m.Metadata.Name, metalResetWait)
		case <-time.After(time.Second):
		}
	}
}

// forgetConfig drops the machine's recorded config and health, so the
// metal apply installs it again and its startupTimeout runs anew.
func (w *Worker) forgetConfig(ctx context.Context, tenant, machine string) {
	ref := domain.ObjectRef(domain.MachineKind, tenant, machine)
	_, err := w.cfg.Store.Update(ctx, ref, eventstore.UpdateOptions{Retries: 5, Hint: w.cfg.Cache}, func(state *domain.Object) ([]domain.Event, error) {
		if state == nil || state.Metadata.Annotations[ConfigHashAnnotation] == "" {
			return nil, nil
		}
		next := state.DeepCopy()
		delete(next.Metadata.Annotations, ConfigHashAnnotation)
		return domain.Decide(state, domain.Command{Op: domain.OpUpdate, Ref: ref, Actor: WorkerActor, Now: w.cfg.Now(), Object: next})
	})
	if err != nil {
		w.cfg.Log.Warn("apply worker: forgetting a reset machine's config", "tenant", tenant, "machine", machine, "err", err)
	}
	if err := w.cfg.Cache.Sync(ctx); err != nil {
		w.cfg.Log.Warn("apply worker: syncing the read model", "err", err)
	}
}
