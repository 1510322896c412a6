package upgrade

import (
	"context"
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// A Kubernetes run does what `talosctl upgrade-k8s` does, through each
// machine's config: the next config (new kube-apiserver, controller-manager,
// scheduler and kubelet images) is rendered as the day-2 config controller
// renders it (talos.Desired) and applied with mode AUTO — in place, as only
// those sections change — control planes one at a time, then workers by
// maxParallelism. A step is Pending → Upgrading (the config is being applied)
// → Verifying (waiting for the node's services to be healthy) → Done; a step
// that fails applies the previous config back (RollingBack → RolledBack). Each
// config a machine takes is recorded through talos.ConfigRecorder, whose
// annotation write is the machine's MachineConfigApplied event; recording a
// hash the machine has already is no event, so a step resumed in Upgrading
// re-applies the same bytes (harmless) and records nothing twice.

// desired loads the tenant's render inputs once per run.
func (r *upgradeRun) desired(ctx context.Context) (*talos.Desired, error) {
	r.mu.Lock()
	d := r.configs
	r.mu.Unlock()
	if d != nil {
		return d, nil
	}
	d, err := r.s.cfg.Configs.Desired(ctx, r.ref.Tenant)
	if err != nil {
		return nil, fmt.Errorf("loading the configs of tenant %s: %w", r.ref.Tenant, err)
	}
	r.mu.Lock()
	r.configs = d
	r.mu.Unlock()
	return d, nil
}

// recorder records the configs machines take, as the saga.
func (r *upgradeRun) recorder() talos.ConfigRecorder {
	return talos.ConfigRecorder{Store: r.s.cfg.Store, Actor: Actor, Now: r.s.cfg.Now, Hint: r.s.cfg.Cache}
}

// planKubernetes checks the run against what the machines report — the
// Kubernetes version their configs carry (the tenant's
// status.kubernetesVersion) may move to the target (no downgrade, no minor
// skip) and every machine's Talos version runs the target — and starts it,
// or fails it before any machine is touched. A machine that holds the
// target's config already is Done from the start.
func (r *upgradeRun) planKubernetes(ctx context.Context) error {
	to := r.spec.KubernetesVersion
	refuse := func(steps []domain.UpgradeMachine, why string) error {
		return r.record(ctx, func(st *domain.UpgradeStatus) {
			st.Phase, st.Machines, st.StartTime, st.EndTime = domain.UpgradeFailed, steps, r.now(), r.now()
			st.Reason = clipBytes("refused: "+why, domain.MaxUpgradeReasonBytes)
		})
	}
	if len(r.spec.NodeGroups) > 0 {
		return refuse(nil, "a Kubernetes upgrade covers every machine of the tenant; leave nodeGroups out")
	}
	if r.s.cfg.Configs == nil {
		return refuse(nil, "this server renders no machine configs for upgrades (no config source)")
	}
	ngs, err := projections.List[domain.NodeGroup](r.s.cfg.Cache, domain.NodeGroupKind, projections.ListOptions{Tenant: r.ref.Tenant})
	if err != nil {
		return err
	}
	if p := r.providerProblem(ngs); p != "" {
		return refuse(nil, p)
	}
	d, err := r.desired(ctx)
	if err != nil {
		if domain.IsNotFound(err) {
			return refuse(nil, err.Error())
		}
		return err
	}
	from := d.Tenant().Status.KubernetesVersion
	if from == "" {
		return refuse(nil, "the tenant records no Kubernetes version its machines' configs carry (status.kubernetesVersion is set by its first successful apply)")
	}
	machines := d.Machines()
	if len(machines) == 0 {
		if err := r.writeBack(ctx); err != nil {
			return err
		}
		return r.record(ctx, func(st *domain.UpgradeStatus) {
			st.Phase, st.StartTime, st.EndTime, st.Reason = domain.UpgradeSucceeded, r.now(), r.now(), "no machines to upgrade"
		})
	}
	talosOf, _, unreachable := r.versions(ctx, machines)
	if len(unreachable) > 0 {
		return refuse(nil, "cannot read the Talos version of "+strings.Join(unreachable, "; "))
	}
	froms := make(map[string]string, len(machines))
	var talosVersions []string
	for _, m := range machines {
		froms[m.Metadata.Name] = from
		talosVersions = append(talosVersions, talosOf[m.Metadata.Name])
	}
	steps := planUpgrade(machines, to, r.leader(ctx, machines), froms)
	for i := range steps {
		m := findMachine(machines, steps[i].Name)
		cfg, err := d.Config(m, to)
		if err != nil {
			return refuse(steps, fmt.Sprintf("rendering the config of %s: %v", m.Metadata.Name, err))
		}
		if m.Metadata.Annotations[domain.AnnotationConfigHash] == talos.ConfigHash(cfg) {
			steps[i].Phase = domain.StepDone
		}
	}
	if p := talos.KubernetesUpgradeProblem(from, to, talosVersions); p != "" {
		return refuse(steps, p)
	}
	return r.record(ctx, func(st *domain.UpgradeStatus) {
		st.Phase, st.Machines, st.StartTime, st.Reason = domain.UpgradeRunning, steps, r.now(), ""
	})
}

func findMachine(machines []domain.Machine, name string) *domain.Machine {
	for i := range machines {
		if machines[i].Metadata.Name == name {
			return &machines[i]
		}
	}
	return nil
}

// kubernetesStep takes one machine to the target's config from its recorded
// phase; safe to run again after a restart.
func (r *upgradeRun) kubernetesStep(ctx context.Context, name string) error {
	m, err := r.machine(name)
	if err != nil {
		r.failed.Store(true)
		return r.recordStep(ctx, name, func(e *domain.UpgradeMachine) {
			e.Phase, e.Finished, e.Error = domain.StepFailed, r.now(), "the machine no longer exists"
		})
	}
	e := r.entry(name)
	switch e.Phase {
	case domain.StepDone, domain.StepRolledBack, domain.StepFailed:
		return nil
	case domain.StepRollingBack:
		return r.kubernetesRollback(ctx, m, e.Error)
	}
	d, err := r.desired(ctx)
	if err != nil {
		return err
	}
	next, err := d.Config(m, e.To)
	if err != nil {
		return r.refuse(ctx, name, "rendering its config: "+err.Error())
	}
	if e.Phase == domain.StepPending {
		_, p := r.awaitReachable(ctx, m, e)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if p != "" {
			return r.refuse(ctx, name, p)
		}
		if err := r.recordStep(ctx, name, func(e *domain.UpgradeMachine) {
			e.Phase, e.Started, e.Error = domain.StepUpgrading, r.now(), ""
		}); err != nil {
			return err
		}
		// The write above read the latest spec: a cancel that came before it
		// stops the run before this machine is touched.
		if r.canceled.Load() {
			return r.recordStep(ctx, name, func(e *domain.UpgradeMachine) { e.Phase, e.Started = domain.StepPending, nil })
		}
		e = r.entry(name)
	}
	if e.Phase == domain.StepUpgrading {
		mode, details, err := r.nodes.applyConfig(ctx, m, next)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return r.failStep(ctx, m, "the node did not take its config: "+describeTalosErr(err))
		}
		reason := talos.ReasonAppliedInPlace
		if mode == machine.ApplyConfigurationRequest_REBOOT {
			reason = talos.ReasonAppliedWithReboot
		}
		ref := domain.ObjectRef(domain.MachineKind, r.ref.Tenant, name)
		msg := fmt.Sprintf("Kubernetes %s by upgrade %s: %s", e.To, r.ref.Name, details)
		if err := r.recorder().Applied(ctx, ref, talos.ConfigHash(next), reason, msg); err != nil {
			return err
		}
		if err := r.recordStep(ctx, name, func(e *domain.UpgradeMachine) { e.Phase = domain.StepVerifying }); err != nil {
			return err
		}
	}
	if p := r.awaitKubernetes(ctx, m, e.To); p != "" {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return r.failStep(ctx, m, p)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return r.recordStep(ctx, name, func(e *domain.UpgradeMachine) { e.Phase, e.Finished = domain.StepDone, r.now() })
}

// kubernetesRollback applies the machine's config at the version it came
// from, waiting out a node that does not answer up to the reboot deadline, records
// it and waits for the node's services.
func (r *upgradeRun) kubernetesRollback(ctx context.Context, m *domain.Machine, why string) error {
	r.failed.Store(true)
	e := r.entry(m.Metadata.Name)
	d, err := r.desired(ctx)
	if err != nil {
		return err
	}
	prev, err := d.Config(m, e.From)
	if err != nil {
		return r.rollbackFailed(ctx, m, why, "rendering its previous config: "+err.Error())
	}
	var details string
	p := r.await(ctx, m.Metadata.Name, domain.StepRollingBack, fmt.Sprintf("%s to take its config of Kubernetes %s back", m.Metadata.Name, e.From), r.deadline("reboot"),
		func(ctx context.Context) (bool, string, string) {
			_, det, err := r.nodes.applyConfig(ctx, m, prev)
			switch {
			case err == nil:
				details = det
				return true, "", ""
			case ctx.Err() == nil && !talosUnreachable(err):
				return false, "", "the node refused its previous config: " + describeTalosErr(err)
			}
			return false, describeTalosErr(err), ""
		})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if p != "" {
		return r.rollbackFailed(ctx, m, why, p)
	}
	ref := domain.ObjectRef(domain.MachineKind, r.ref.Tenant, m.Metadata.Name)
	if err := r.recorder().Applied(ctx, ref, talos.ConfigHash(prev), talos.ReasonAppliedInPlace,
		fmt.Sprintf("rolled back to Kubernetes %s by upgrade %s: %s", e.From, r.ref.Name, details)); err != nil {
		return err
	}
	note := "rolled back to Kubernetes " + e.From
	if p := r.awaitHealthy(ctx, m, "", domain.StepRollingBack, r.deadline("verify")); p != "" {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		note += ", but it is not healthy: " + p
	}
	if err := r.recordStep(ctx, m.Metadata.Name, func(e *domain.UpgradeMachine) {
		e.Phase, e.Finished, e.Error = domain.StepRolledBack, r.now(), clipBytes(why+"; "+note, domain.MaxUpgradeErrorBytes)
	}); err != nil {
		return err
	}
	r.observeMachine(ctx, m)
	return nil
}
