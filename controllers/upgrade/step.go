package upgrade

import (
	"context"
	"fmt"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// step takes one machine through its named stages — precheck, upgrade,
// wait for the reboot, verify — each recorded before the next begins, or
// rolls it back when one fails. What it does first depends on the recorded
// stage and the node's answer now (nextAction), so it is safe to run again
// after a restart. It returns an error only when the saga could not go on.
func (r *upgradeRun) step(ctx context.Context, name string) error {
	if _, err := r.machine(name); domain.IsNotFound(err) && r.entry(name).Phase == domain.StepPending {
		// Removed before its turn (a scale-down while the run waited for a
		// maintenance window): there is nothing left to upgrade.
		return r.recordStep(ctx, name, func(e *domain.UpgradeMachine) {
			e.Phase, e.Finished, e.Message = domain.StepDone, r.now(), "the machine was removed before its turn"
		})
	}
	if r.spec.Rotation() {
		return r.rotationStep(ctx, name)
	}
	if r.spec.Kubernetes() {
		return r.kubernetesStep(ctx, name)
	}
	m, err := r.machine(name)
	if err != nil {
		r.failed.Store(true)
		return r.recordStep(ctx, name, func(e *domain.UpgradeMachine) {
			e.Phase, e.Finished, e.Error = domain.StepFailed, r.now(), "the machine no longer exists"
		})
	}
	e := r.entry(name)
	observed, err := r.build(ctx, m, e)
	if err != nil && e.Phase == domain.StepUpgrading {
		// Whether the upgrade call got through is unknown (the saga stopped
		// around it): a node that is down only because it is itself coming
		// back (say, after a restart of its host) must not pass for one that
		// took the call. Give it a moment to answer before deciding.
		observed = r.settledVersion(ctx, m, e)
	}
	act := nextStepAction(e, observed)
	for act != actNone {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		e = r.entry(name)
		switch act {
		case actUpgrade:
			next, err := r.startUpgrade(ctx, m, e)
			if err != nil {
				return err
			}
			act = next
		case actWait:
			p := r.awaitBoot(ctx, m, e)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if p != "" {
				return r.failStep(ctx, m, p)
			}
			if err := r.recordStep(ctx, name, func(e *domain.UpgradeMachine) { e.Phase = domain.StepVerifying }); err != nil {
				return err
			}
			r.observeMachine(ctx, m)
			act = actVerify
		case actVerify:
			if e.Phase != domain.StepVerifying {
				if err := r.recordStep(ctx, name, func(e *domain.UpgradeMachine) { e.Phase = domain.StepVerifying }); err != nil {
					return err
				}
			}
			if p := r.awaitHealthy(ctx, m, e.To, domain.StepVerifying, r.deadline("verify")); p != "" {
				return r.failStep(ctx, m, p)
			}
			if p := r.uncordonStep(ctx, m); p != "" {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return r.failStep(ctx, m, fmt.Sprintf("back on %s, but its Node: %s", e.To, p))
			}
			if err := r.recordStep(ctx, name, func(e *domain.UpgradeMachine) {
				e.Phase, e.Finished = domain.StepDone, r.now()
			}); err != nil {
				return err
			}
			r.observeMachine(ctx, m)
			act = actNone
		case actRollback:
			return r.rollback(ctx, m, e.Error)
		}
	}
	return ctx.Err()
}

// startUpgrade checks the node can go down and asks it to upgrade. It answers
// the next action: wait for the reboot, verify (the node is on the target
// already), or none (the run stops before touching the node).
func (r *upgradeRun) startUpgrade(ctx context.Context, m *domain.Machine, e domain.UpgradeMachine) (stepAction, error) {
	name := m.Metadata.Name
	untouched := e.Phase == domain.StepPending || e.Phase == domain.StepDraining
	if untouched {
		v, p := r.awaitReachable(ctx, m, e)
		if ctx.Err() != nil {
			return actNone, ctx.Err()
		}
		if p != "" {
			return actNone, r.refuse(ctx, name, p)
		}
		if v == stepTarget(e) {
			return actVerify, nil
		}
		if m.Spec.Role == domain.RoleControlPlane {
			if p := r.awaitQuorum(ctx, m); p != "" {
				if ctx.Err() != nil {
					return actNone, ctx.Err()
				}
				return actNone, r.refuse(ctx, name, p)
			}
		}
	}
	if untouched {
		// Draining: cordon and evict before the node goes down.
		if stopped, err := r.drainStep(ctx, m, e); stopped || err != nil {
			return actNone, err
		}
	}
	if err := r.recordStep(ctx, name, func(e *domain.UpgradeMachine) {
		e.Phase, e.Started, e.Error, e.Message = domain.StepUpgrading, r.now(), "", ""
	}); err != nil {
		return actNone, err
	}
	// The write above read the latest spec: a cancel that came before it
	// stops the run before this machine is touched.
	if untouched && r.canceled.Load() {
		r.uncordonQuietly(ctx, m)
		return actNone, r.recordStep(ctx, name, func(e *domain.UpgradeMachine) { e.Phase, e.Started = domain.StepPending, nil })
	}
	if err := r.register(ctx, m); err != nil {
		// Nothing was touched: the step fails before the node goes down.
		r.uncordonQuietly(ctx, m)
		r.failed.Store(true)
		return actNone, r.recordStep(ctx, name, func(e *domain.UpgradeMachine) {
			e.Phase, e.Finished, e.Error = domain.StepFailed, r.now(), clipBytes(err.Error(), domain.MaxUpgradeErrorBytes)
		})
	}
	err := r.nodes.upgrade(ctx, m, r.installer(m, e.To).Image)
	if err != nil && ctx.Err() != nil {
		return actNone, ctx.Err()
	}
	if err != nil && !talosUnreachable(err) {
		return actNone, r.failStep(ctx, m, "the node refused the upgrade: "+describeTalosErr(err))
	}
	// An unreachable answer may have been taken: waiting tells.
	if err := r.recordStep(ctx, name, func(e *domain.UpgradeMachine) { e.Phase = domain.StepRebooting }); err != nil {
		return actNone, err
	}
	return actWait, nil
}

// refuse stops the run before a machine was touched, saying why.
func (r *upgradeRun) refuse(ctx context.Context, name, why string) error {
	r.failed.Store(true)
	return r.recordStep(ctx, name, func(e *domain.UpgradeMachine) {
		e.Error = clipBytes(why, domain.MaxUpgradeErrorBytes)
		clearWait(e)
	})
}

// failStep records why a step failed and rolls the machine back (a
// Kubernetes step by applying its previous config back).
func (r *upgradeRun) failStep(ctx context.Context, m *domain.Machine, why string) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.failed.Store(true)
	why = clipBytes(why, domain.MaxUpgradeErrorBytes/2)
	if r.spec.Rotation() {
		r.s.cfg.Log.Warn("rotation step failed", "tenant", r.ref.Tenant, "upgrade", r.ref.Name, "machine", m.Metadata.Name, "reason", why)
		return r.failRotationStep(ctx, m, why)
	}
	r.s.cfg.Log.Warn("upgrade step failed; rolling back", "tenant", r.ref.Tenant, "upgrade", r.ref.Name, "machine", m.Metadata.Name, "reason", why)
	if err := r.recordStep(ctx, m.Metadata.Name, func(e *domain.UpgradeMachine) {
		e.Phase, e.Error = domain.StepRollingBack, why
	}); err != nil {
		return err
	}
	if r.spec.Kubernetes() {
		return r.kubernetesRollback(ctx, m, why)
	}
	return r.rollback(ctx, m, why)
}

// rollback brings the machine back to the version it ran: nothing to do when
// it still runs it; else the Talos rollback API (boot the previous
// installation) or, where that is not served, an upgrade to the old version.
func (r *upgradeRun) rollback(ctx context.Context, m *domain.Machine, why string) error {
	r.failed.Store(true)
	e := r.entry(m.Metadata.Name)
	name := m.Metadata.Name
	issued, how := false, ""
	p := r.await(ctx, name, domain.StepRollingBack, fmt.Sprintf("%s to be back on %s", name, e.From), r.deadline("reboot"),
		func(ctx context.Context) (bool, string, string) {
			v, err := r.build(ctx, m, e)
			switch {
			case err == nil && v == stepOrigin(e):
				return true, "", ""
			case err == nil && !issued:
				how = "the rollback API"
				rerr := r.nodes.rollback(ctx, m)
				if talosUnimplemented(rerr) {
					how = "an upgrade to " + e.From
					rerr = r.nodes.upgrade(ctx, m, r.rollbackInstaller(m, e))
				}
				if rerr != nil && ctx.Err() == nil && !talosUnreachable(rerr) {
					return false, "", fmt.Sprintf("the node refused %s: %s", how, describeTalosErr(rerr))
				}
				issued = true
				return false, "asked to go back (" + how + ")", ""
			case err == nil:
				return false, "it runs " + v, ""
			}
			return false, describeTalosErr(err), ""
		})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if p != "" {
		return r.rollbackFailed(ctx, m, why, p)
	}
	note := "it still runs " + e.From
	if issued {
		note = "rolled back to " + e.From + " (" + how + ")"
	}
	healthy := true
	if p := r.awaitHealthy(ctx, m, e.From, domain.StepRollingBack, r.deadline("verify")); p != "" {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		note += ", but it is not healthy: " + p
		healthy = false
	}
	if healthy {
		r.uncordonQuietly(ctx, m)
	}
	if err := r.recordStep(ctx, name, func(e *domain.UpgradeMachine) {
		e.Phase, e.Finished, e.Error = domain.StepRolledBack, r.now(), clipBytes(why+"; "+note, domain.MaxUpgradeErrorBytes)
	}); err != nil {
		return err
	}
	r.observeMachine(ctx, m)
	return nil
}

func (r *upgradeRun) rollbackFailed(ctx context.Context, m *domain.Machine, why, problem string) error {
	if err := r.recordStep(ctx, m.Metadata.Name, func(e *domain.UpgradeMachine) {
		e.Phase, e.Finished, e.Error = domain.StepFailed, r.now(), clipBytes(why+"; rollback failed: "+problem, domain.MaxUpgradeErrorBytes)
	}); err != nil {
		return err
	}
	r.observeMachine(ctx, m)
	return nil
}

// awaitReachable waits, within the precheck deadline, for the node to
// answer Version; p says why it did not. version is the step's build (build).
func (r *upgradeRun) awaitReachable(ctx context.Context, m *domain.Machine, e domain.UpgradeMachine) (version, p string) {
	name := m.Metadata.Name
	p = r.await(ctx, name, "Precheck", name+" to answer the Talos API before its upgrade", r.deadline("precheck"),
		func(ctx context.Context) (bool, string, string) {
			v, err := r.build(ctx, m, e)
			if err != nil {
				return false, describeTalosErr(err), ""
			}
			version = v
			return true, "", ""
		})
	if p == "" && version == "" && ctx.Err() != nil {
		p = ctx.Err().Error()
	}
	return version, p
}

// resumeSettle bounds how long a resumed step waits for a node to answer
// before taking its silence as the sign of a reboot in progress.
const resumeSettle = 30 * time.Second

// settledVersion is the node's version once it answers, or "" when it stays
// silent for resumeSettle.
func (r *upgradeRun) settledVersion(ctx context.Context, m *domain.Machine, e domain.UpgradeMachine) string {
	since := r.s.cfg.Now()
	deadline := since.Add(min(resumeSettle, r.s.cfg.RebootTimeout))
	for {
		v, err := r.build(ctx, m, e)
		if err == nil {
			return v
		}
		if ctx.Err() != nil || r.s.cfg.Now().After(deadline) || r.sleep(ctx, since) != nil {
			return ""
		}
	}
}

// awaitBoot waits, within the reboot deadline, for the node to go down
// and come back on the step's target (version and schematic, stepTarget).
// A node seen down that comes back on another version did not take the
// upgrade.
func (r *upgradeRun) awaitBoot(ctx context.Context, m *domain.Machine, e domain.UpgradeMachine) string {
	to := stepTarget(e)
	seenDown := false
	return r.await(ctx, m.Metadata.Name, domain.StepRebooting, fmt.Sprintf("%s to reboot into %s", m.Metadata.Name, to), r.deadline("reboot"),
		func(ctx context.Context) (bool, string, string) {
			v, err := r.build(ctx, m, e)
			switch {
			case err == nil && v == to:
				return true, "", ""
			case err == nil && seenDown:
				return false, "", fmt.Sprintf("came back on %s: the upgrade to %s did not take", v, to)
			case err == nil:
				return false, "it still runs " + v, ""
			case talosUnreachable(err):
				seenDown = true
			}
			return false, describeTalosErr(err), ""
		})
}

// awaitHealthy waits, within timeout, for the node to be healthy on
// version ("" any); stage names the step in the problem it answers when
// the deadline passes.
func (r *upgradeRun) awaitHealthy(ctx context.Context, m *domain.Machine, version, stage string, timeout time.Duration) string {
	what := m.Metadata.Name + " to be healthy"
	if version != "" {
		what += " on " + version
	}
	return r.await(ctx, m.Metadata.Name, stage, what, timeout, func(ctx context.Context) (bool, string, string) {
		p := r.nodes.health(ctx, m, version)
		return p == "", p, ""
	})
}

// awaitKubernetes waits, within the verify deadline, for the node to be
// healthy with its control-plane static pods on Kubernetes version (a
// worker: healthy), then, through Kubernetes, for its API server (control
// planes) and its Node's kubelet to report version.
func (r *upgradeRun) awaitKubernetes(ctx context.Context, m *domain.Machine, version string) string {
	name := m.Metadata.Name
	what := fmt.Sprintf("the kubelet on %s to run %s and be Ready", name, version)
	if m.Spec.Role == domain.RoleControlPlane {
		what = fmt.Sprintf("kube-apiserver on %s to answer %s", name, version)
	}
	return r.await(ctx, name, domain.StepVerifying, what, r.deadline("verify"), func(ctx context.Context) (bool, string, string) {
		p := r.nodes.health(ctx, m, "")
		if p == "" && m.Spec.Role == domain.RoleControlPlane {
			p = r.nodes.staticPodsProblem(ctx, m, version)
		}
		if p == "" {
			p = r.kubeVersionProblem(ctx, m, version)
		}
		return p == "", p, ""
	})
}

// awaitQuorum waits, within the precheck deadline, until taking a control
// plane down keeps etcd quorum.
func (r *upgradeRun) awaitQuorum(ctx context.Context, m *domain.Machine) string {
	name := m.Metadata.Name
	p := r.await(ctx, name, "Precheck", "etcd to keep quorum without "+name, r.deadline("precheck"), func(ctx context.Context) (bool, string, string) {
		p := r.quorumCheck(ctx, m)
		return p == "", p, ""
	})
	if p == "" && ctx.Err() != nil {
		return ctx.Err().Error()
	}
	return p
}

// quorumCheck reads the members through the node itself and asks every other
// member whether its etcd is healthy.
func (r *upgradeRun) quorumCheck(ctx context.Context, m *domain.Machine) string {
	v, err := r.nodes.etcd(ctx, m)
	if err != nil {
		return "cannot read etcd members: " + describeTalosErr(err)
	}
	self := m.Metadata.Name
	var names []string
	unhealthy := map[string]string{}
	for _, mb := range v.members {
		mm := r.memberMachine(mb.GetHostname(), mb.GetPeerUrls())
		if mm == nil {
			name := mb.GetHostname()
			names = append(names, name)
			unhealthy[name] = "no machine of the tenant is this member"
			continue
		}
		names = append(names, mm.Metadata.Name)
		if mm.Metadata.Name == self {
			continue
		}
		if p := r.nodes.etcdHealthy(ctx, mm); p != "" {
			unhealthy[mm.Metadata.Name] = p
		}
	}
	return etcdQuorumProblem(self, names, unhealthy)
}

// observeMachine asks the Observer to probe the tenant now that a step
// changed m, so its stage, readiness and version follow the node. Those parts
// of Machine status are the health probe's (domain.StatusOwners): the saga
// does not write them, and nothing it decides reads them back (it asks the
// node). A failure is logged: the Upgrade's status is the record.
func (r *upgradeRun) observeMachine(ctx context.Context, m *domain.Machine) {
	obs := r.s.cfg.Observer
	if obs == nil {
		return
	}
	_, err := obs.Probe(ctx, r.ref.Tenant, true)
	if domain.IsNotFound(err) {
		return // the tenant went meanwhile
	}
	if err != nil && ctx.Err() == nil {
		r.s.cfg.Log.Warn("upgrade saga: asking for a probe of the machines", "tenant", r.ref.Tenant, "machine", m.Metadata.Name, "err", err)
	}
}
