package apply

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/providers"
	"github.com/rezuscloud/rezuscloud/talos"
	"github.com/rezuscloud/rezuscloud/tofu"
)

var errTimeout = errors.New("the apply took longer than its timeout")

// Files a run writes into a tenant's work dir, besides MainFileName and
// VarsFileName (the machine configs: secrets, present only while tofu runs).
const (
	mainFile    = providers.MainFileName
	varsFile    = providers.VarsFileName
	backendFile = "backend.tf.json"
	initHash    = ".rezus-init"
	// providersFile lists the Provider names the state used after the last
	// successful run, so a provider no group names any more still gets its
	// block (tofu needs it to destroy what it built).
	providersFile = ".rezus-providers"
)

// runTenant runs one apply (or destroy) for tenant and reports whether the
// queued work is done: true on success, or when there is nothing to do.
func (w *Worker) runTenant(ctx context.Context, tenant string, entry queueEntry, attempt int, run *activeRun) bool {
	ctx, cancel := context.WithTimeoutCause(ctx, w.cfg.Timeout, errTimeout)
	defer cancel()
	log := w.cfg.Log.With("tenant", tenant)
	t, ok, err := projections.Get[domain.Tenant](w.cfg.Cache, domain.TenantRef(tenant))
	if err != nil {
		log.Warn("apply worker: reading the tenant", "err", err)
		return false
	}
	facts := runFacts{Exists: ok, Attempt: attempt, Sources: entry.Sources}
	if ok {
		facts.Terminating = t.Metadata.DeletionTimestamp != nil
		facts.HasFinalizer = slices.Contains(t.Metadata.Finalizers, InfraFinalizer)
		facts.HasNodeGroups = w.hasNodeGroups(tenant)
		facts.UpgradeActive = !facts.Terminating && w.cfg.Upgrades != nil && w.cfg.Upgrades.ActiveUpgrade(tenant)
		facts.Generation = t.Metadata.Generation
		facts.Redelivered = sourcesApplied(entry.Sources, w.appliedSources(tenant))
	}
	d := decideRun(facts)
	if facts.Redelivered && d.Action == runNothing {
		log.Info("apply worker: no run", "reason", d.Reason, "sources", entry.Sources)
	}
	var drift *driftFound
	if d.Action == runDriftCheck {
		found := w.checkDrift(ctx, tenant, t)
		if !found.correctInfra {
			return true
		}
		drift = &found
		d = runDecision{Action: runApply, Reason: "the drift check found the infrastructure changed and corrects it",
			Spec: driftCheckSpec(t, entry.Sources)}
	}
	switch d.Action {
	case runForget:
		w.forget(ctx, tenant)
		return true
	case runNothing:
		return true
	case runDefer:
		log.Info("apply worker: " + d.Reason)
		w.mu.Lock()
		run.deferred = true
		w.mu.Unlock()
		return false
	case runApply:
		if err := w.ensureFinalizer(ctx, tenant); err != nil {
			log.Warn("apply worker: adding the infrastructure finalizer", "err", err)
			return false
		}
	}
	destroy, spec := d.Action == runDestroy, d.Spec
	if !destroy {
		if skip, why := w.tofuUnchanged(ctx, tenant, t, drift != nil); skip {
			w.updateTenantStatus(ctx, tenant, func(s *domain.TenantStatus, _ int64) {
				tenantUnchanged(s, spec.Generation, why, w.cfg.Now())
			})
			log.Info("apply worker: no tofu run", "reason", why, "sources", entry.Sources)
			w.mu.Lock()
			w.unchanged++
			w.mu.Unlock()
			return true
		} else if why != "" {
			log.Info("apply worker: tofu runs", "reason", why)
		}
	}
	name, err := w.createApply(ctx, tenant, spec)
	if err != nil {
		log.Warn("apply worker: recording the apply", "err", err)
		return false
	}
	w.mu.Lock()
	run.apply = name
	w.mu.Unlock()
	log = log.With("apply", name)
	if drift != nil {
		drift.status.Correction = name
		w.recordDrift(ctx, tenant, drift.status)
	}

	logw := w.cfg.Logs.Writer(ctx, tenant, name)
	rec := w.newApplyRecord(ctx, tenant, name, attempt)
	w.updateTenantStatus(ctx, tenant, func(s *domain.TenantStatus, gen int64) {
		tenantRunning(s, destroy, name, gen, w.cfg.Now())
	})
	logw.Printf("%s %s of tenant %s (trigger %s, attempt %d) run by replica %s", spec.Operation, name, tenant, spec.Trigger, attempt, w.cfg.Holder)

	var res runResult
	if destroy {
		res, err = w.destroy(ctx, tenant, name, logw, rec.phaseSetter(ctx))
	} else {
		res, err = w.apply(ctx, tenant, name, t, logw, rec.phaseSetter(ctx))
	}
	end := endOf(err, ctx.Err(), context.Cause(ctx))
	final, took := rec.finish(end, err, res, spec.Operation, logw)
	if cerr := logw.Close(); cerr != nil {
		log.Warn("apply worker: storing the log", "err", cerr)
	}
	// The run's own context may be over (canceled, timed out); the record must still be written.
	wctx := context.WithoutCancel(ctx)
	// The record goes before the status: whoever sees the Apply succeeded
	// finds what it applied recorded.
	if end == endSucceeded && !destroy && res.applied != nil {
		res.applied.Generation = spec.Generation
		if err := writeApplied(w.tenantDir(tenant), res.applied); err != nil {
			log.Warn("apply worker: recording what the run applied (the next run runs tofu)", "err", err)
		}
	}
	w.writeApplyStatus(wctx, tenant, name, final)
	if destroy && end == endSucceeded {
		w.finishDestroy(wctx, tenant)
		return true
	}
	rendered := ""
	if t != nil {
		rendered = talos.KubernetesVersionOf(t)
	}
	w.updateTenantStatus(wctx, tenant, func(s *domain.TenantStatus, _ int64) {
		tenantAfterRun(s, end, destroy, name, spec.Generation, res.endpoint, final.Error, w.cfg.Now())
		kubernetesVersionAfterRun(s, end, destroy, rendered)
		if end == endSucceeded && !destroy && t != nil {
			driftAfterApply(s, name, w.driftSchedule(t), w.cfg.Now())
		}
		s.Machines = w.machineCounts(tenant)
	})
	w.prune(wctx, tenant)
	if err != nil {
		log.Warn("apply worker: run failed", "operation", spec.Operation, "err", err, "canceled", end == endCanceled)
	} else {
		log.Info("apply worker: run succeeded", "operation", spec.Operation, "took", took)
	}
	return err == nil
}

type runResult struct {
	resources domain.ApplyResources
	// tofu is the time spent in tofu processes.
	tofu time.Duration
	// endpoint is the control-plane endpoint address the state holds ("" when none).
	endpoint string
	// applied is what the run's tofu apply left, recorded (appliedFile) when
	// the whole run succeeds.
	applied *appliedRecord
}

// apply renders, generates and applies the tenant's infrastructure, then
// projects the resulting state into Machine objects.
func (w *Worker) apply(ctx context.Context, tenant, name string, t *domain.Tenant, logw *tofu.LogWriter, setPhase func(string)) (runResult, error) {
	var res runResult
	in, extra, err := w.inputs(ctx, tenant, t)
	if err != nil {
		return res, err
	}
	if err := w.registerSchematics(ctx, in, extra.metal); err != nil {
		return res, err
	}
	hasState, err := w.cfg.State.HasState(ctx, tenant)
	if err != nil {
		return res, fmt.Errorf("checking the state: %w", err)
	}
	if len(in.Groups) > 0 || hasState {
		if err := w.applyTofu(ctx, tenant, name, in, logw, setPhase, &res); err != nil {
			return res, err
		}
	}
	if len(extra.metal) > 0 {
		setPhase(domain.ApplyApplying)
		if w.cfg.Metal == nil {
			return res, errors.New("metal node groups need the Talos API, which this server does not drive")
		}
		if err := w.applyMetal(ctx, tenant, name, in.Tenant, extra.metal, extra.metalInputs, logw); err != nil {
			return res, err
		}
	}
	if w.cfg.Metal != nil {
		if err := w.cfg.Cache.Sync(ctx); err != nil {
			return res, err
		}
		if err := w.bootstrap(ctx, tenant, extra.bundle, logw); err != nil {
			return res, err
		}
	}
	w.observe(ctx, tenant, logw)
	return res, nil
}

// observe probes the tenant's machines once the apply has built them, so
// their status is there when the apply says Succeeded: a user listing
// machines right after saw stage Unknown and not ready for seconds while a
// health probe already found them running. It probes again, once a second,
// while some machine is not ready yet (a control plane's etcd and API server
// take seconds to start after the bootstrap, and the kubelets register only
// then), for at most ObserveWait. A probe that fails or a machine still not
// ready then is only logged: the next probe records them.
func (w *Worker) observe(ctx context.Context, tenant string, logw *tofu.LogWriter) {
	if w.cfg.Observer == nil || w.machineCounts(tenant).Total == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, w.cfg.ObserveWait)
	defer cancel()
	var (
		h     domain.TenantHealth
		err   error
		ready int
	)
	for {
		h, err = w.cfg.Observer.Probe(ctx, tenant, true)
		ready = 0
		if err == nil {
			for _, m := range h.Machines {
				if m.Ready {
					ready++
				}
			}
		}
		if err == nil && ready == len(h.Machines) {
			break
		}
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
			continue
		}
		break
	}
	if err != nil {
		logw.Printf("observing the machines: %v (their status comes with the next health probe)", err)
		return
	}
	logw.Printf("observed %d machines through the Talos API: %d ready (%s)", len(h.Machines), ready, h.State)
	// The run's own status writes count ready machines from the read model:
	// it has to hold what the probe wrote first.
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer scancel()
	if err := w.cfg.Cache.Sync(sctx); err != nil {
		logw.Printf("observing the machines: %v", err)
	}
}

// applyTofu applies the tofu-built node groups and projects the state into machines.
func (w *Worker) applyTofu(ctx context.Context, tenant, name string, in providers.GenerateInput, logw *tofu.LogWriter, setPhase func(string), res *runResult) error {
	x, err := w.prepare(ctx, tenant, name, logw, &res.tofu)
	if err != nil {
		return err
	}
	defer x.cleanup()
	// Whatever follows may change the infrastructure: until this run
	// succeeds, no record says what it is.
	if err := forgetApplied(x.dir); err != nil {
		return err
	}
	files, err := w.configure(ctx, x, &in)
	if err != nil {
		return err
	}
	inputs, err := inputsDigest(files, w.backendConfig(tenant), x.cli)
	if err != nil {
		return err
	}
	gone, err := w.scaleDownTofu(ctx, tenant, in, logw)
	if err != nil {
		return err
	}
	reps, err := w.pendingReplacements(tenant, in)
	if err != nil {
		return err
	}
	replace, reps, err := w.prepareReplacements(ctx, x, tenant, reps, logw)
	if err != nil {
		return err
	}
	sum, err := x.applyJSON(ctx, setPhase, append([]string{"apply", "-auto-approve", "-input=false", "-json"}, replace...)...)
	res.resources = sum
	w.finishReplacements(context.WithoutCancel(ctx), tenant, name, reps, err)
	if err != nil {
		return err
	}
	state, err := x.statePull(ctx)
	if err != nil {
		return err
	}
	x.rememberProviders(state)
	observed, err := providers.ProjectState(state)
	if err != nil {
		return fmt.Errorf("projecting the state into machines: %w", err)
	}
	endpoint, _, err := providers.StateEndpoint(state)
	if err != nil {
		return fmt.Errorf("reading the endpoint from the state: %w", err)
	}
	res.endpoint = endpoint
	recorded, err := w.syncMachines(ctx, tenant, observed, day0Configs(in, endpoint), logw)
	if err != nil {
		return fmt.Errorf("updating machines: %w", err)
	}
	w.deleteNodes(ctx, tenant, gone, logw)
	rev, err := w.cfg.State.StateRevision(ctx, tenant)
	if err == nil {
		res.applied = &appliedRecord{Inputs: inputs, StateRevision: rev, Machines: machinesDigest(recorded), Apply: name}
	}
	return nil
}

// configure writes the configuration of a run into its work dir (the
// tenant's node groups, plus the providers and modules its state still
// uses, which tofu needs to remove what they built) and inits tofu.
func (w *Worker) configure(ctx context.Context, x *execution, in *providers.GenerateInput) (providers.Files, error) {
	used, err := x.stateUses(ctx)
	if err != nil {
		return providers.Files{}, err
	}
	if err := w.addStateUses(in, used); err != nil {
		return providers.Files{}, err
	}
	files, err := providers.Generate(*in)
	if err != nil {
		return providers.Files{}, err
	}
	if err := x.writeConfig(files); err != nil {
		return providers.Files{}, err
	}
	return files, x.init(ctx, files.Main)
}

// addStateUses adds to in the providers and modules the state still uses:
// tofu needs them to remove what they built.
func (w *Worker) addStateUses(in *providers.GenerateInput, used stateUses) error {
	in.StateModules = used.Modules
	in.Modules = w.cfg.Modules
	for _, n := range used.Providers {
		if _, ok := in.Providers[n]; !ok {
			p, err := w.provider(n)
			if err != nil {
				return fmt.Errorf("the state holds resources of provider %q, which is needed to remove them: %w", n, err)
			}
			in.Providers[n] = p
		}
	}
	return domain.CheckModules(in.Providers)
}

// destroy removes everything in the tenant's state. The node groups may be
// gone already (the tenant finalizer deletes them), so the configuration is
// built from the state: the providers it names and no instances.
func (w *Worker) destroy(ctx context.Context, tenant, name string, logw *tofu.LogWriter, setPhase func(string)) (runResult, error) {
	var res runResult
	if w.cfg.Metal != nil {
		// Machines built through the Talos API go back to maintenance mode.
		if bundle, err := w.cfg.Bundles.Bundle(ctx, tenant); err == nil {
			w.resetMetal(ctx, tenant, bundle, logw)
		} else {
			logw.Printf("cannot reset metal machines without the tenant's PKI: %v", err)
		}
	}
	hasState, err := w.cfg.State.HasState(ctx, tenant)
	if err != nil {
		return res, fmt.Errorf("checking the state: %w", err)
	}
	if !hasState {
		logw.Printf("there is no state: nothing for tofu to destroy")
		return res, nil
	}
	x, err := w.prepare(ctx, tenant, name, logw, &res.tofu)
	if err != nil {
		return res, err
	}
	defer x.cleanup()
	_ = os.Remove(filepath.Join(x.dir, mainFile))
	if err := x.init(ctx, nil); err != nil {
		return res, err
	}
	state, err := x.statePull(ctx)
	if err != nil {
		return res, err
	}
	if len(bytes.TrimSpace(state)) == 0 {
		logw.Printf("there is no state: nothing to destroy")
		return res, nil
	}
	used, err := usesOf(state)
	if err != nil {
		return res, fmt.Errorf("reading the state: %w", err)
	}
	names := used.Providers
	if len(names) == 0 {
		logw.Printf("the state holds no resources: nothing to destroy")
		return res, nil
	}
	t, ok, err := projections.Get[domain.Tenant](w.cfg.Cache, domain.TenantRef(tenant))
	if err != nil {
		return res, err
	}
	if !ok {
		return res, fmt.Errorf("tenant %s is gone", tenant)
	}
	in := providers.GenerateInput{Tenant: t, Providers: map[string]*domain.Provider{}, Modules: w.cfg.Modules, StateModules: used.Modules}
	for _, n := range names {
		p, err := w.provider(n)
		if err != nil {
			return res, fmt.Errorf("the state names provider %q: %w", n, err)
		}
		in.Providers[n] = p
	}
	// The credentials of the providers the state names: the node groups,
	// whose providers prepare gave credentials for, may be gone already.
	creds, err := w.credentialsEnv(ctx, names)
	if err != nil {
		return res, err
	}
	x.env = append(x.env, creds...) // a name given twice: exec keeps the last, the same value
	files, err := providers.Generate(in)
	if err != nil {
		return res, err
	}
	if err := x.writeConfig(files); err != nil {
		return res, err
	}
	if err := x.init(ctx, files.Main); err != nil {
		return res, err
	}
	sum, err := x.applyJSON(ctx, setPhase, "apply", "-destroy", "-auto-approve", "-input=false", "-json")
	res.resources = sum
	return res, err
}

// appliedSources are the sources of the tenant's Applies that succeeded
// (as the read model has them; nil when it cannot say).
func (w *Worker) appliedSources(tenant string) map[string]bool {
	applies, err := projections.List[domain.Apply](w.cfg.Cache, domain.ApplyKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return nil
	}
	applied := map[string]bool{}
	for _, a := range applies {
		if a.Status.Phase != domain.ApplySucceeded {
			continue
		}
		for _, s := range a.Spec.Sources {
			applied[s] = true
		}
	}
	return applied
}
