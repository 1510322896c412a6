package upgrade

// A rotation run (spec.rotate) takes every machine of a tenant through the
// stages of its rotation (domain.RotationStages): at each stage the PKI
// renders configs with the stage's issuing and accepted CAs
// (talos.Rotation.Apply), and the machines take them one at a time,
// control planes first, as a Kubernetes run's configs: ApplyConfiguration
// in place, recorded through talos.ConfigRecorder, then a check that the
// node really took the stage before the next one is touched. The stage a
// run is at is in its status (status.rotation) and in the PKI's rotation
// record; the PKI moves first, so a run resumed after a crash finds the
// machines of a finished stage Done and moves the record again, which is a
// no-op. A failed step is not rolled back: at every stage every machine
// trusts every other (accept: all trust the old CA, which issues; swap: all
// accept both; drop: all were swapped), and a new rotation of the same
// secrets takes the record up where it stopped.

import (
	"context"
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/talos"
)

// Rotator moves a tenant's PKI through a rotation (a *talos.PKI).
type Rotator interface {
	StartRotation(ctx context.Context, tenant, upgrade string, secrets []string) (*talos.Rotation, error)
	Rotation(ctx context.Context, tenant string) (*talos.Rotation, error)
	SetRotationStage(ctx context.Context, tenant, stage string) error
	FinishRotation(ctx context.Context, tenant string) error
}

// planRotation starts the tenant's rotation in its PKI (or takes up the
// one under way for the same secrets) and plans the steps of its stage.
func (r *upgradeRun) planRotation(ctx context.Context) error {
	refuse := func(why string) error {
		return r.record(ctx, func(st *domain.UpgradeStatus) {
			st.Phase, st.StartTime, st.EndTime = domain.UpgradeFailed, r.now(), r.now()
			st.Reason = clipBytes("refused: "+why, domain.MaxUpgradeReasonBytes)
		})
	}
	if r.s.cfg.Configs == nil || r.s.cfg.Rotations == nil {
		return refuse("this server renders no machine configs or holds no PKI to rotate")
	}
	rot, err := r.s.cfg.Rotations.StartRotation(ctx, r.ref.Tenant, r.ref.Name, r.spec.Rotate)
	if domain.IsConflict(err) || domain.IsNotFound(err) {
		return refuse(err.Error())
	}
	if err != nil {
		return err
	}
	if err := r.rotationClients(ctx); err != nil {
		return err
	}
	steps, p, err := r.rotationSteps(ctx)
	if err != nil {
		return err
	}
	if p != "" {
		return refuse(p)
	}
	r.s.cfg.Log.Info("rotation stage", "tenant", r.ref.Tenant, "upgrade", r.ref.Name, "stage", rot.Stage)
	return r.record(ctx, func(st *domain.UpgradeStatus) {
		st.Phase, st.Machines, st.StartTime, st.Reason = domain.UpgradeRunning, steps, r.now(), ""
		st.Rotation = &domain.RotationProgress{Stages: domain.RotationStages(rot.Secrets), Stage: rot.Stage}
	})
}

// rotationClients loads the render inputs, the Talos clients and the
// rotation record afresh: each stage issues from other CAs.
func (r *upgradeRun) rotationClients(ctx context.Context) error {
	r.mu.Lock()
	r.configs = nil
	r.mu.Unlock()
	b, err := r.s.cfg.Bundles.Bundle(ctx, r.ref.Tenant)
	if err != nil {
		return err
	}
	r.nodes.close()
	if r.nodes, err = newSagaNodes(b, r.ref.Tenant, &r.s.cfg, false); err != nil {
		return err
	}
	if f, ok := r.s.cfg.Kube.(interface{ Forget(string) }); ok {
		f.Forget(r.ref.Tenant)
	}
	rot, err := r.s.cfg.Rotations.Rotation(ctx, r.ref.Tenant)
	if err != nil {
		return err
	}
	r.rotation = rot
	return nil
}

// rotationSteps plans every machine of the tenant for the stage the PKI is
// at, in the saga's order; one that holds the stage's config already is
// Done. It answers a problem that refuses the run.
func (r *upgradeRun) rotationSteps(ctx context.Context) ([]domain.UpgradeMachine, string, error) {
	d, err := r.desired(ctx)
	if err != nil {
		if domain.IsNotFound(err) {
			return nil, err.Error(), nil
		}
		return nil, "", err
	}
	k8s := talos.KubernetesVersionOf(d.Tenant())
	if k8s == "" {
		return nil, "the tenant records no Kubernetes version its machines' configs carry", nil
	}
	machines := d.Machines()
	steps := planUpgrade(machines, k8s, r.leader(ctx, machines), nil)
	for i := range steps {
		m := findMachine(machines, steps[i].Name)
		cfg, err := d.Config(m, k8s)
		if err != nil {
			return nil, fmt.Sprintf("rendering the config of %s: %v", m.Metadata.Name, err), nil
		}
		if m.Metadata.Annotations[domain.AnnotationConfigHash] == talos.ConfigHash(cfg) {
			steps[i].Phase, steps[i].Message = domain.StepDone, "holds the stage's config already"
		}
	}
	return steps, "", nil
}

// carryOutRotation carries out the stage the run is at and moves the PKI
// and the run to the next one, until the last is done.
func (r *upgradeRun) carryOutRotation(ctx context.Context) error {
	if r.rotation == nil {
		if err := r.rotationClients(ctx); err != nil {
			return err
		}
	}
	for {
		if err := r.carryOutMachines(ctx); err != nil {
			return err
		}
		r.mu.Lock()
		progress := r.st.Rotation
		pending := false
		for _, e := range r.st.Machines {
			pending = pending || e.Phase != domain.StepDone
		}
		r.mu.Unlock()
		if pending || r.stopping(ctx) || progress == nil {
			return r.end(ctx)
		}
		next := domain.NextRotationStage(progress.Stages, progress.Stage)
		if next == "" {
			return r.end(ctx)
		}
		if err := r.s.cfg.Rotations.SetRotationStage(ctx, r.ref.Tenant, next); err != nil {
			return err
		}
		if err := r.rotationClients(ctx); err != nil {
			return err
		}
		steps, p, err := r.rotationSteps(ctx)
		if err != nil {
			return err
		}
		if p != "" {
			return r.finish(ctx, domain.UpgradeFailed, "stage "+next+": "+p)
		}
		r.s.cfg.Log.Info("rotation stage", "tenant", r.ref.Tenant, "upgrade", r.ref.Name, "stage", next)
		if err := r.record(ctx, func(st *domain.UpgradeStatus) {
			st.Machines = steps
			st.Rotation = &domain.RotationProgress{Stages: progress.Stages, Stage: next}
		}); err != nil {
			return err
		}
	}
}

// rotationStep brings one machine to the stage's config: Pending →
// Upgrading (the config is applied) → Verifying (the node took it) → Done.
func (r *upgradeRun) rotationStep(ctx context.Context, name string) error {
	m, err := r.machine(name)
	if err != nil {
		r.failed.Store(true)
		return r.recordStep(ctx, name, func(e *domain.UpgradeMachine) {
			e.Phase, e.Finished, e.Error = domain.StepFailed, r.now(), "the machine no longer exists"
		})
	}
	e := r.entry(name)
	if e.Final() {
		return nil
	}
	d, err := r.desired(ctx)
	if err != nil {
		return err
	}
	next, err := d.Config(m, e.To)
	if err != nil {
		return r.refuse(ctx, name, "rendering its config: "+err.Error())
	}
	stage := r.stage()
	if e.Phase == domain.StepPending {
		if _, p := r.awaitReachable(ctx, m, e); p != "" || ctx.Err() != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return r.refuse(ctx, name, p)
		}
		if err := r.recordStep(ctx, name, func(e *domain.UpgradeMachine) {
			e.Phase, e.Started, e.Error, e.Message = domain.StepUpgrading, r.now(), "", "taking stage "+stage
		}); err != nil {
			return err
		}
		if r.canceled.Load() {
			return r.recordStep(ctx, name, func(e *domain.UpgradeMachine) { e.Phase, e.Started = domain.StepPending, nil })
		}
		e = r.entry(name)
	}
	if e.Phase == domain.StepUpgrading {
		var (
			mode    machine.ApplyConfigurationRequest_Mode
			details string
		)
		// As talosctl rotate-ca does, a node that is briefly unavailable
		// (its apid restarting) is asked again, within the verify deadline.
		if p := r.await(ctx, name, domain.StepUpgrading, name+" to take the stage's config", r.deadline("verify"), func(ctx context.Context) (bool, string, string) {
			var err error
			mode, details, err = r.nodes.applyConfig(ctx, m, next)
			switch {
			case err == nil:
				return true, "", ""
			case status.Code(err) == codes.Unavailable || status.Code(err) == codes.DeadlineExceeded:
				return false, describeTalosErr(err), ""
			}
			return false, "", "the node did not take its config: " + describeTalosErr(err)
		}); p != "" || ctx.Err() != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return r.failStep(ctx, m, p)
		}
		ref := domain.ObjectRef(domain.MachineKind, r.ref.Tenant, name)
		msg := fmt.Sprintf("rotation %s, stage %s (%s): %s", r.ref.Name, stage, strings.Join(r.spec.Rotate, ", "), details)
		reason := talos.ReasonAppliedInPlace
		if mode == machine.ApplyConfigurationRequest_REBOOT {
			reason = talos.ReasonAppliedWithReboot
		}
		if err := r.recorder().Applied(ctx, ref, talos.ConfigHash(next), reason, msg); err != nil {
			return err
		}
		if err := r.recordStep(ctx, name, func(e *domain.UpgradeMachine) { e.Phase = domain.StepVerifying }); err != nil {
			return err
		}
	}
	if p := r.awaitRotated(ctx, m, e.To); p != "" {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return r.failStep(ctx, m, p)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return r.recordStep(ctx, name, func(e *domain.UpgradeMachine) {
		e.Phase, e.Finished, e.Message = domain.StepDone, r.now(), "took stage "+stage
	})
}

// stage is the rotation stage the run is at.
func (r *upgradeRun) stage() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st.Rotation == nil {
		return ""
	}
	return r.st.Rotation.Stage
}

// failRotationStep ends a machine's step Failed, without a rollback (see
// the package comment above).
func (r *upgradeRun) failRotationStep(ctx context.Context, m *domain.Machine, why string) error {
	return r.recordStep(ctx, m.Metadata.Name, func(e *domain.UpgradeMachine) {
		e.Phase, e.Finished = domain.StepFailed, r.now()
		e.Error = clipBytes(why+" (not rolled back: every machine still trusts the others; rotate the same secrets again to go on)", domain.MaxUpgradeErrorBytes)
	})
}

// writeBackRotation folds the finished rotation into the tenant's bundle.
func (r *upgradeRun) writeBackRotation(ctx context.Context) error {
	if err := r.s.cfg.Rotations.FinishRotation(ctx, r.ref.Tenant); err != nil {
		return fmt.Errorf("finishing the rotation of tenant %s: %w", r.ref.Tenant, err)
	}
	if f, ok := r.s.cfg.Kube.(interface{ Forget(string) }); ok {
		f.Forget(r.ref.Tenant)
	}
	return nil
}
