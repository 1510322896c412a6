package tfrunner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

var errTimeout = errors.New("the apply took longer than its timeout")

// Files a run writes into a tenant's work dir, besides MainFileName and
// VarsFileName (the machine configs: secrets, present only while tofu runs).
const (
	mainFile    = MainFileName
	varsFile    = VarsFileName
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
	obj, ok := w.cfg.Cache.GetObject(domain.Ref{Kind: domain.TenantKind.Kind, Name: tenant})
	if !ok {
		// Gone without a destroy: it never had infrastructure (the finalizer
		// is added before the first apply). Drop what may be left.
		w.forget(ctx, tenant)
		return true
	}
	destroy := obj.Terminating()
	if destroy && !slices.Contains(obj.Metadata.Finalizers, InfraFinalizer) {
		return true
	}
	if !destroy && !slices.Contains(obj.Metadata.Finalizers, InfraFinalizer) && !w.hasNodeGroups(tenant) {
		// Never applied and nothing to build: no infrastructure, nothing to record.
		return true
	}
	if !destroy && w.cfg.Upgrades != nil && w.cfg.Upgrades.ActiveUpgrade(tenant) {
		log.Info("apply worker: an upgrade of the tenant is running; the apply waits for it")
		w.mu.Lock()
		run.deferred = true
		w.mu.Unlock()
		return false
	}
	if !destroy {
		if err := w.ensureFinalizer(ctx, tenant); err != nil {
			log.Warn("apply worker: adding the infrastructure finalizer", "err", err)
			return false
		}
	}

	spec := domain.ApplySpec{Operation: domain.OperationApply, Trigger: domain.TriggerChange,
		Generation: obj.Metadata.Generation, Sources: entry.Sources}
	switch {
	case destroy:
		spec.Operation, spec.Trigger = domain.OperationDestroy, domain.TriggerDelete
	case attempt > 1:
		spec.Trigger = domain.TriggerRetry
	case len(entry.Sources) == 1 && entry.Sources[0] == "resync":
		spec.Trigger = domain.TriggerResync
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

	logw := w.cfg.Logs.Writer(ctx, tenant, name)
	start := w.cfg.Now().UTC()
	status := domain.ApplyStatus{Phase: domain.ApplyPlanning, StartTime: &start, Attempt: attempt, Holder: w.cfg.Holder}
	var statusMu sync.Mutex
	setPhase := func(phase string) {
		statusMu.Lock()
		defer statusMu.Unlock()
		if status.Phase != phase {
			status.Phase = phase
			w.writeApplyStatus(ctx, tenant, name, status)
		}
	}
	w.writeApplyStatus(ctx, tenant, name, status)
	tenantPhase := "Provisioning"
	if destroy {
		tenantPhase = "Deleting"
	}
	w.updateTenantStatus(ctx, tenant, func(s *domain.TenantStatus, gen int64) {
		s.Phase = tenantPhase
		setCondition(s, domain.Condition{Type: "Reconciled", Status: "Unknown", Reason: "Applying",
			Message: "apply " + name + " is running", ObservedGeneration: gen}, w.cfg.Now())
	})
	logw.Printf("%s of tenant %s (trigger %s, attempt %d) on %s", spec.Operation, tenant, spec.Trigger, attempt, w.cfg.Holder)

	var res runResult
	if destroy {
		res, err = w.destroy(ctx, tenant, name, logw, setPhase)
	} else {
		res, err = w.apply(ctx, tenant, name, obj, logw, setPhase)
	}
	end := w.cfg.Now().UTC()
	statusMu.Lock()
	status.EndTime, status.Resources = &end, res.resources
	status.TofuMilliseconds = res.tofu.Milliseconds()
	canceled := errors.Is(context.Cause(ctx), errCanceledByUser)
	switch {
	case err == nil:
		status.Phase = domain.ApplySucceeded
		logw.Printf("%s succeeded in %s: %d added, %d changed, %d destroyed", spec.Operation,
			end.Sub(start).Round(time.Millisecond), res.resources.Added, res.resources.Changed, res.resources.Destroyed)
	case canceled:
		status.Phase, status.Error = domain.ApplyCanceled, "canceled by a user"
		logw.Printf("canceled by a user")
	case ctx.Err() != nil && !errors.Is(context.Cause(ctx), errTimeout):
		status.Phase, status.Error = domain.ApplyFailed, "interrupted: the server stopped or lost the worker lease; the tenant stays queued"
		logw.Printf("interrupted: %v", err)
	default:
		status.Phase, status.Error = domain.ApplyFailed, truncate(err.Error(), domain.MaxApplyErrorBytes)
		logw.Printf("%s failed: %v", spec.Operation, err)
	}
	final := status
	statusMu.Unlock()
	if cerr := logw.Close(); cerr != nil {
		log.Warn("apply worker: storing the log", "err", cerr)
	}
	// The run's own context may be over (canceled, timed out); the record must still be written.
	wctx := context.WithoutCancel(ctx)
	w.writeApplyStatus(wctx, tenant, name, final)
	if destroy && err == nil {
		w.finishDestroy(wctx, tenant)
		return true
	}
	w.updateTenantStatus(wctx, tenant, func(s *domain.TenantStatus, gen int64) {
		switch {
		case err == nil:
			s.Phase = "Ready"
			s.ObservedGeneration = spec.Generation
			s.EndpointAddress = res.endpoint
			setCondition(s, domain.Condition{Type: "Reconciled", Status: "True", Reason: "ApplySucceeded",
				Message: "apply " + name + " succeeded", ObservedGeneration: spec.Generation}, w.cfg.Now())
		case canceled:
			setCondition(s, domain.Condition{Type: "Reconciled", Status: "False", Reason: "ApplyCanceled",
				Message: "apply " + name + " was canceled", ObservedGeneration: spec.Generation}, w.cfg.Now())
		default:
			if destroy {
				s.Phase = "Deleting"
			} else {
				s.Phase = "Failed"
			}
			setCondition(s, domain.Condition{Type: "Reconciled", Status: "False", Reason: "ApplyFailed",
				Message: truncate(final.Error, 1024), ObservedGeneration: spec.Generation}, w.cfg.Now())
		}
		s.Machines = w.machineCounts(tenant)
	})
	w.prune(wctx, tenant)
	if err != nil {
		log.Warn("apply worker: run failed", "operation", spec.Operation, "err", err, "canceled", canceled)
	} else {
		log.Info("apply worker: run succeeded", "operation", spec.Operation, "took", end.Sub(start).Round(time.Millisecond))
	}
	return err == nil
}

type runResult struct {
	resources domain.ApplyResources
	// tofu is the time spent in tofu processes.
	tofu time.Duration
	// endpoint is the control-plane endpoint address the state holds ("" when none).
	endpoint string
}

// apply renders, generates and applies the tenant's infrastructure, then
// projects the resulting state into Machine objects.
func (w *Worker) apply(ctx context.Context, tenant, name string, tobj *domain.Object, logw *LogWriter, setPhase func(string)) (runResult, error) {
	var res runResult
	in, extra, err := w.inputs(ctx, tenant, tobj)
	if err != nil {
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
		if err := w.applyMetal(ctx, tenant, in.Tenant, extra.metal, extra.metalInputs, logw); err != nil {
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
	return res, nil
}

// applyTofu applies the tofu-built node groups and projects the state into machines.
func (w *Worker) applyTofu(ctx context.Context, tenant, name string, in GenerateInput, logw *LogWriter, setPhase func(string), res *runResult) error {
	x, err := w.prepare(ctx, tenant, name, logw, &res.tofu)
	if err != nil {
		return err
	}
	defer x.cleanup()
	used, err := x.providersInState(ctx)
	if err != nil {
		return err
	}
	for _, n := range used {
		if _, ok := in.Providers[n]; !ok {
			p, err := w.provider(n)
			if err != nil {
				return fmt.Errorf("the state holds resources of provider %q, which is needed to remove them: %w", n, err)
			}
			in.Providers[n] = p
		}
	}
	files, err := Generate(in)
	if err != nil {
		return err
	}
	if err := x.writeConfig(files); err != nil {
		return err
	}
	if err := x.init(ctx, files.Main); err != nil {
		return err
	}
	sum, err := x.applyJSON(ctx, setPhase, "apply", "-auto-approve", "-input=false", "-json")
	res.resources = sum
	if err != nil {
		return err
	}
	state, err := x.statePull(ctx)
	if err != nil {
		return err
	}
	x.rememberProviders(state)
	observed, err := ProjectState(state)
	if err != nil {
		return fmt.Errorf("projecting the state into machines: %w", err)
	}
	endpoint, _, err := StateEndpoint(state)
	if err != nil {
		return fmt.Errorf("reading the endpoint from the state: %w", err)
	}
	res.endpoint = endpoint
	if err := w.syncMachines(ctx, tenant, observed, logw); err != nil {
		return fmt.Errorf("updating machines: %w", err)
	}
	return nil
}

// destroy removes everything in the tenant's state. The node groups may be
// gone already (the tenant finalizer deletes them), so the configuration is
// built from the state: the providers it names and no instances.
func (w *Worker) destroy(ctx context.Context, tenant, name string, logw *LogWriter, setPhase func(string)) (runResult, error) {
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
	names, err := ProvidersInState(state)
	if err != nil {
		return res, fmt.Errorf("reading the state: %w", err)
	}
	if len(names) == 0 {
		logw.Printf("the state holds no resources: nothing to destroy")
		return res, nil
	}
	tobj, ok := w.cfg.Cache.GetObject(domain.Ref{Kind: domain.TenantKind.Kind, Name: tenant})
	if !ok {
		return res, fmt.Errorf("tenant %s is gone", tenant)
	}
	t, err := decodeAs[domain.Tenant](tobj)
	if err != nil {
		return res, err
	}
	in := GenerateInput{Tenant: t, Providers: map[string]*domain.Provider{}}
	for _, n := range names {
		p, err := w.provider(n)
		if err != nil {
			return res, fmt.Errorf("the state names provider %q: %w", n, err)
		}
		in.Providers[n] = p
	}
	files, err := Generate(in)
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

// inputs gathers what Generate needs: the tenant's node groups with their
// machines' rendered configs, and the providers they name.
// runInputs is what a run needs besides Generate's input.
type runInputs struct {
	bundle      *secrets.Bundle
	metal       []*domain.NodeGroup
	metalInputs metalInputs
}

func (w *Worker) inputs(ctx context.Context, tenant string, tobj *domain.Object) (GenerateInput, runInputs, error) {
	t, err := decodeAs[domain.Tenant](tobj)
	if err != nil {
		return GenerateInput{}, runInputs{}, err
	}
	groups, err := listAs[domain.NodeGroup](w.cfg.Cache, domain.NodeGroupKind.Kind, tenant)
	if err != nil {
		return GenerateInput{}, runInputs{}, err
	}
	patches, err := listAs[domain.ConfigPatch](w.cfg.Cache, domain.ConfigPatchKind.Kind, tenant)
	if err != nil {
		return GenerateInput{}, runInputs{}, err
	}
	machines, err := listAs[domain.Machine](w.cfg.Cache, domain.MachineKind.Kind, tenant)
	if err != nil {
		return GenerateInput{}, runInputs{}, err
	}
	bundle, err := w.cfg.Bundles.Bundle(ctx, tenant)
	if err != nil {
		return GenerateInput{}, runInputs{}, fmt.Errorf("loading the tenant's PKI: %w", err)
	}
	in := GenerateInput{Tenant: t, Providers: map[string]*domain.Provider{}}
	extra := runInputs{bundle: bundle}
	providers := map[string]*domain.Provider{}
	for _, ng := range groups {
		if _, ok := providers[ng.Spec.Provider]; ok {
			continue
		}
		p, err := w.provider(ng.Spec.Provider)
		if err != nil {
			return GenerateInput{}, runInputs{}, fmt.Errorf("node group %s: %w", ng.Metadata.Name, err)
		}
		providers[ng.Spec.Provider] = p
	}
	cpAddress := t.Status.EndpointAddress
	if cpAddress == "" {
		cpAddress = firstControlPlaneAddress(machines)
	}
	if cpAddress == "" && t.Spec.ControlPlane.Endpoint == "" {
		cpAddress = metalControlPlaneAddress(groups, providers, machines)
	}
	if t.Spec.ControlPlane.Endpoint == "" && cpAddress == "" {
		in.PlaceholderEndpoint = true
		cpAddress = EndpointPlaceholder
	}
	byName := map[string]*domain.Machine{}
	for i := range machines {
		byName[machines[i].Metadata.Name] = &machines[i]
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].Metadata.Name < groups[j].Metadata.Name })
	for i := range groups {
		ng := &groups[i]
		if ng.Metadata.DeletionTimestamp != nil {
			continue
		}
		if isMetal(providers[ng.Spec.Provider]) {
			extra.metal = append(extra.metal, ng)
			continue
		}
		in.Providers[ng.Spec.Provider] = providers[ng.Spec.Provider]
		g := GroupInput{NodeGroup: ng}
		for idx := 0; idx < ng.Spec.Count; idx++ {
			mname := MachineName(ng.Metadata.Name, idx)
			m := byName[mname]
			if m == nil {
				m = &domain.Machine{Metadata: domain.ObjectMeta{Name: mname, Tenant: tenant},
					Spec: domain.MachineSpec{NodeGroup: ng.Metadata.Name, Role: ng.Spec.Role}}
			}
			cfg, err := talos.Render(talos.RenderInput{Tenant: t, NodeGroup: ng, Machine: m,
				ControlPlaneAddress: cpAddress, Patches: patches, Bundle: bundle})
			if err != nil {
				return GenerateInput{}, runInputs{}, fmt.Errorf("rendering the config of machine %s: %w", mname, err)
			}
			g.Machines = append(g.Machines, MachineInput{Name: mname, Config: cfg})
		}
		in.Groups = append(in.Groups, g)
	}
	extra.metalInputs = metalInputs{bundle: bundle, patches: patches, cpAddress: cpAddress}
	return in, extra, nil
}

func (w *Worker) hasNodeGroups(tenant string) bool {
	return w.cfg.Cache.Count(domain.NodeGroupKind.Kind, tenant) > 0
}

// MachineName is the name of machine idx (0-based) of a node group.
func MachineName(nodeGroup string, idx int) string {
	return nodeGroup + "-" + strconv.Itoa(idx)
}

// firstControlPlaneAddress is the address of the first control-plane machine
// (by name), for tenants applied before the endpoint was recorded in status.
func firstControlPlaneAddress(ms []domain.Machine) string {
	sort.Slice(ms, func(i, j int) bool { return ms[i].Metadata.Name < ms[j].Metadata.Name })
	for _, m := range ms {
		if m.Spec.Role == domain.RoleControlPlane && m.Spec.Address != "" {
			return m.Spec.Address
		}
	}
	return ""
}

func (w *Worker) provider(name string) (*domain.Provider, error) {
	o, ok := w.cfg.Cache.GetObject(domain.Ref{Kind: domain.ProviderKind.Kind, Name: name})
	if !ok {
		return nil, domain.NewNotFound(domain.ProviderKind.Kind, name)
	}
	return decodeAs[domain.Provider](o)
}

// execution is one run's use of the tenant's work dir.
type execution struct {
	w    *Worker
	dir  string
	env  []string
	logw *LogWriter
	// spent is the time spent in tofu so far.
	spent *time.Duration
}

// tofu runs tofu in the work dir with the run's environment, timing it.
func (x *execution) tofu(ctx context.Context, out io.Writer, args ...string) error {
	start := time.Now()
	err := x.w.cfg.Tofu.exec(ctx, x.dir, x.env, out, args...)
	*x.spent += time.Since(start)
	return err
}

// prepare makes the work dir and the environment of a run: nothing inherited
// from the server's environment, only what tofu and the providers need.
func (w *Worker) prepare(ctx context.Context, tenant, apply string, logw *LogWriter, spent *time.Duration) (*execution, error) {
	if _, err := w.cfg.Tofu.Path(); err != nil {
		return nil, err
	}
	dir := filepath.Join(w.cfg.WorkDir, "tenants", tenant)
	home := filepath.Join(w.cfg.WorkDir, "home")
	cache := filepath.Join(w.cfg.WorkDir, "plugin-cache")
	for _, d := range []string{dir, home, cache} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	cli, err := w.cfg.Tofu.CLIConfig(cache)
	if err != nil {
		return nil, err
	}
	cliPath := filepath.Join(w.cfg.WorkDir, "tofurc")
	if err := writeIfChanged(cliPath, []byte(cli), 0o600); err != nil {
		return nil, err
	}
	if err := w.recoverLock(ctx, tenant, apply, logw); err != nil {
		return nil, err
	}
	user, pass, err := w.cfg.Credentials.IssueStateCredentials(tenant, apply, w.cfg.Timeout+5*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("issuing state credentials: %w", err)
	}
	env := []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + home,
		"TMPDIR=" + os.TempDir(),
		"TF_CLI_CONFIG_FILE=" + cliPath,
		"TF_IN_AUTOMATION=1",
		"TF_INPUT=0",
		"CHECKPOINT_DISABLE=1",
		"TF_HTTP_USERNAME=" + user,
		"TF_HTTP_PASSWORD=" + pass,
	}
	if w.cfg.StatePassphrase != "" {
		enc, err := EncryptionConfig(w.cfg.StatePassphrase)
		if err != nil {
			return nil, err
		}
		env = append(env, "TF_ENCRYPTION="+enc)
	}
	creds, err := w.providerEnv(ctx, tenant)
	if err != nil {
		return nil, err
	}
	env = append(env, creds...)
	x := &execution{w: w, dir: dir, env: env, logw: logw, spent: spent}
	if err := writeIfChanged(filepath.Join(dir, backendFile), w.backendConfig(tenant), 0o600); err != nil {
		return nil, err
	}
	return x, nil
}

// providerEnv is the credentials of the providers the tenant's node groups name.
func (w *Worker) providerEnv(ctx context.Context, tenant string) ([]string, error) {
	groups, err := listAs[domain.NodeGroup](w.cfg.Cache, domain.NodeGroupKind.Kind, tenant)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var env []string
	for _, ng := range groups {
		if seen[ng.Spec.Provider] {
			continue
		}
		seen[ng.Spec.Provider] = true
		p, err := w.provider(ng.Spec.Provider)
		if err != nil || p.Spec.CredentialsRef == nil {
			continue
		}
		if w.cfg.ProviderCredentials == nil {
			return nil, fmt.Errorf("provider %s names credentials %q but this server has no credential store", p.Metadata.Name, p.Spec.CredentialsRef.Name)
		}
		vals, err := w.cfg.ProviderCredentials.ProviderCredentials(ctx, p.Spec.CredentialsRef.Name)
		if err != nil {
			return nil, fmt.Errorf("provider %s: credentials %q: %w", p.Metadata.Name, p.Spec.CredentialsRef.Name, err)
		}
		keys := make([]string, 0, len(vals))
		for k := range vals {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			env = append(env, k+"="+vals[k])
		}
	}
	return env, nil
}

// recoverLock drops a state lock left by a run that is not running: this
// replica holds the worker lease and runs a tenant's applies one at a time,
// so a lock taken by any other apply's credentials belongs to a dead process.
func (w *Worker) recoverLock(ctx context.Context, tenant, apply string, logw *LogWriter) error {
	holder, err := w.cfg.State.LockHolderApply(ctx, tenant)
	if err != nil {
		return fmt.Errorf("checking the state lock: %w", err)
	}
	if holder == "" || holder == apply {
		return nil
	}
	logw.Printf("the state lock is held by apply %s, which is not running: releasing it", holder)
	w.cfg.Log.Warn("apply worker: releasing a stale state lock", "tenant", tenant, "holder", holder)
	return w.cfg.State.ForceUnlock(ctx, tenant)
}

func (w *Worker) backendConfig(tenant string) []byte {
	base := strings.TrimSuffix(w.cfg.BackendURL, "/") + "/tfstate/" + tenant
	http := map[string]any{
		"address": base, "lock_address": base + "/lock", "unlock_address": base + "/lock",
		"lock_method": "LOCK", "unlock_method": "UNLOCK", "retry_max": 3,
	}
	if w.cfg.BackendCAPEM != "" {
		http["client_ca_certificate_pem"] = w.cfg.BackendCAPEM
	}
	b, _ := json.MarshalIndent(map[string]any{"terraform": map[string]any{"backend": map[string]any{"http": http}}}, "", "  ")
	return append(b, '\n')
}

func (x *execution) writeConfig(f Files) error {
	if err := writeIfChanged(filepath.Join(x.dir, mainFile), f.Main, 0o600); err != nil {
		return err
	}
	if len(f.Vars) == 0 {
		return nil
	}
	return os.WriteFile(filepath.Join(x.dir, varsFile), f.Vars, 0o600)
}

// cleanup removes the secrets the run wrote.
func (x *execution) cleanup() {
	_ = os.Remove(filepath.Join(x.dir, varsFile))
}

// init runs `tofu init` unless the providers and backend are those of the
// last successful init in this dir.
func (x *execution) init(ctx context.Context, main []byte) error {
	h := sha256.New()
	if main != nil {
		var top map[string]json.RawMessage
		if err := json.Unmarshal(main, &top); err != nil {
			return fmt.Errorf("generator bug: %s is not JSON: %w", mainFile, err)
		}
		h.Write(top["terraform"])
		h.Write(top["provider"])
	}
	backend, _ := os.ReadFile(filepath.Join(x.dir, backendFile))
	h.Write(backend)
	for _, kv := range x.env {
		if strings.HasPrefix(kv, "TF_CLI_CONFIG_FILE=") || strings.HasPrefix(kv, "TF_ENCRYPTION=") {
			h.Write([]byte(kv))
		}
	}
	sum := hex.EncodeToString(h.Sum(nil))
	marker := filepath.Join(x.dir, initHash)
	if old, err := os.ReadFile(marker); err == nil && string(old) == sum {
		if _, err := os.Stat(filepath.Join(x.dir, ".terraform")); err == nil {
			return nil
		}
	}
	x.logw.Printf("tofu init")
	// The shared plugin cache is not safe for concurrent inits (OpenTofu
	// documents this); inits are rare (only when providers change), so one at a time.
	x.w.initMu.Lock()
	err := x.tofu(ctx, x.logw, "init", "-input=false", "-no-color", "-reconfigure")
	x.w.initMu.Unlock()
	if err != nil {
		return err
	}
	return os.WriteFile(marker, []byte(sum), 0o600)
}

// providersInState is the Provider names the tenant's state uses: from the
// note the last successful run left, else (a new work dir: another replica
// ran before) from the state itself.
func (x *execution) providersInState(ctx context.Context) ([]string, error) {
	if b, err := os.ReadFile(filepath.Join(x.dir, providersFile)); err == nil {
		var names []string
		if json.Unmarshal(b, &names) == nil {
			return names, nil
		}
	}
	_ = os.Remove(filepath.Join(x.dir, mainFile))
	if err := x.init(ctx, nil); err != nil {
		return nil, err
	}
	state, err := x.statePull(ctx)
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(state)) == 0 {
		return nil, nil
	}
	names, err := ProvidersInState(state)
	if err != nil {
		return nil, fmt.Errorf("reading the state: %w", err)
	}
	return names, nil
}

// rememberProviders notes the Provider names a state uses for the next run.
func (x *execution) rememberProviders(state []byte) {
	names, err := ProvidersInState(state)
	if err != nil {
		return
	}
	b, _ := json.Marshal(names)
	_ = writeIfChanged(filepath.Join(x.dir, providersFile), b, 0o600)
}

// statePull returns the tenant's current state, decrypted.
func (x *execution) statePull(ctx context.Context) ([]byte, error) {
	var out, errs bytes.Buffer
	err := x.tofu(ctx, &teeErr{out: &out, err: &errs}, "state", "pull")
	if err != nil {
		x.logw.Printf("tofu state pull failed: %s", errs.String())
		return nil, err
	}
	return out.Bytes(), nil
}

// teeErr keeps stdout and stderr together (Tofu.exec writes both to one
// writer); state pull prints only the state on success.
type teeErr struct {
	out, err *bytes.Buffer
}

func (t *teeErr) Write(p []byte) (int, error) { t.err.Write(p); return t.out.Write(p) }

// applyJSON runs tofu with -json, writes its messages to the log as text,
// moves the phase to Applying when tofu starts changing things, and returns
// the change summary. A failure's error is tofu's error diagnostics.
func (x *execution) applyJSON(ctx context.Context, setPhase func(string), args ...string) (domain.ApplyResources, error) {
	x.logw.Printf("tofu %s", strings.Join(args, " "))
	ui := &uiWriter{log: x.logw, setPhase: setPhase}
	err := x.tofu(ctx, ui, append(args, "-no-color")...)
	ui.flush()
	if err != nil && len(ui.errors) > 0 {
		return ui.summary, fmt.Errorf("%s", strings.Join(ui.errors, "; "))
	}
	return ui.summary, err
}

// uiWriter reads tofu's machine-readable UI (one JSON object per line).
type uiWriter struct {
	log      io.Writer
	setPhase func(string)
	buf      []byte
	summary  domain.ApplyResources
	errors   []string
}

func (u *uiWriter) Write(p []byte) (int, error) {
	u.buf = append(u.buf, p...)
	for {
		i := bytes.IndexByte(u.buf, '\n')
		if i < 0 {
			break
		}
		u.line(u.buf[:i])
		u.buf = u.buf[i+1:]
	}
	return len(p), nil
}

func (u *uiWriter) flush() {
	if len(u.buf) > 0 {
		u.line(u.buf)
		u.buf = nil
	}
}

func (u *uiWriter) line(b []byte) {
	var m struct {
		Message    string `json:"@message"`
		Type       string `json:"type"`
		Diagnostic *struct {
			Severity string `json:"severity"`
			Summary  string `json:"summary"`
			Detail   string `json:"detail"`
			Address  string `json:"address"`
		} `json:"diagnostic"`
		Changes *struct {
			Add       int    `json:"add"`
			Change    int    `json:"change"`
			Remove    int    `json:"remove"`
			Operation string `json:"operation"`
		} `json:"changes"`
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Message == "" && m.Type == "" {
		_, _ = u.log.Write(append(b, '\n'))
		return
	}
	line := m.Message
	switch m.Type {
	case "apply_start":
		u.setPhase(domain.ApplyApplying)
	case "change_summary":
		if m.Changes != nil && m.Changes.Operation != "plan" {
			u.summary = domain.ApplyResources{Added: m.Changes.Add, Changed: m.Changes.Change, Destroyed: m.Changes.Remove}
		}
	case "diagnostic":
		if d := m.Diagnostic; d != nil {
			if d.Detail != "" {
				line += "\n  " + strings.ReplaceAll(d.Detail, "\n", "\n  ")
			}
			if d.Severity == "error" {
				msg := d.Summary
				if d.Address != "" {
					msg = d.Address + ": " + msg
				}
				if d.Detail != "" {
					msg += ": " + d.Detail
				}
				u.errors = append(u.errors, msg)
			}
		}
	}
	_, _ = io.WriteString(u.log, line+"\n")
}

// forget drops what a tenant that is gone left behind.
func (w *Worker) forget(ctx context.Context, tenant string) {
	if err := w.cfg.State.DeleteState(ctx, tenant); err != nil {
		w.cfg.Log.Warn("apply worker: deleting the state of a gone tenant", "tenant", tenant, "err", err)
	}
	_ = os.RemoveAll(filepath.Join(w.cfg.WorkDir, "tenants", tenant))
}

// finishDestroy removes the tenant's machines, state and work dir, and then
// its infrastructure finalizer, so the tenant finalizer can delete it.
func (w *Worker) finishDestroy(ctx context.Context, tenant string) {
	ms, _ := listAs[domain.Machine](w.cfg.Cache, domain.MachineKind.Kind, tenant)
	for _, m := range ms {
		w.deleteObject(ctx, domain.Ref{Kind: domain.MachineKind.Kind, Tenant: tenant, Name: m.Metadata.Name})
	}
	w.forget(ctx, tenant)
	ref := domain.Ref{Kind: domain.TenantKind.Kind, Name: tenant}
	_, err := w.cfg.Store.Update(ctx, ref, eventstore.UpdateOptions{Retries: 5}, func(state *domain.Object) ([]domain.Event, error) {
		if state == nil || !slices.Contains(state.Metadata.Finalizers, InfraFinalizer) {
			return nil, nil
		}
		next := state.DeepCopy()
		next.Metadata.Finalizers = slices.DeleteFunc(next.Metadata.Finalizers, func(f string) bool { return f == InfraFinalizer })
		return domain.Decide(state, domain.Command{Op: domain.OpUpdate, Ref: ref, Object: next, Actor: WorkerActor,
			Now: w.cfg.Now(), Dependents: len(w.cfg.Cache.Children(tenant))})
	})
	if err != nil && !domain.IsNotFound(err) {
		w.cfg.Log.Warn("apply worker: removing the infrastructure finalizer", "tenant", tenant, "err", err)
	}
}

// ensureFinalizer puts the infrastructure finalizer on a tenant before its
// first apply, so deleting the tenant waits for `tofu destroy`.
func (w *Worker) ensureFinalizer(ctx context.Context, tenant string) error {
	ref := domain.Ref{Kind: domain.TenantKind.Kind, Name: tenant}
	_, err := w.cfg.Store.Update(ctx, ref, eventstore.UpdateOptions{Retries: 5, Hint: w.cfg.Cache}, func(state *domain.Object) ([]domain.Event, error) {
		if state == nil {
			return nil, domain.NewNotFound(domain.TenantKind.Kind, tenant)
		}
		if slices.Contains(state.Metadata.Finalizers, InfraFinalizer) {
			return nil, nil
		}
		next := state.DeepCopy()
		next.Metadata.Finalizers = append(next.Metadata.Finalizers, InfraFinalizer)
		return domain.Decide(state, domain.Command{Op: domain.OpUpdate, Ref: ref, Object: next, Actor: WorkerActor, Now: w.cfg.Now()})
	})
	return err
}

func (w *Worker) createApply(ctx context.Context, tenant string, spec domain.ApplySpec) (string, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	for i := 0; ; i++ {
		name := spec.Operation + "-" + strconv.FormatInt(w.cfg.Now().UnixMilli()+int64(i), 10)
		ref := domain.Ref{Kind: domain.ApplyKind.Kind, Tenant: tenant, Name: name}
		_, err := w.cfg.Store.Execute(ctx, domain.Command{Op: domain.OpCreate, Ref: ref, Actor: WorkerActor, Now: w.cfg.Now(),
			NewUID: newUID(), Object: &domain.Object{Metadata: domain.ObjectMeta{Name: name, Tenant: tenant}, Spec: raw}},
			eventstore.UpdateOptions{})
		if domain.IsAlreadyExists(err) && i < 10 {
			continue
		}
		return name, err
	}
}

func (w *Worker) writeApplyStatus(ctx context.Context, tenant, name string, st domain.ApplyStatus) {
	raw, err := json.Marshal(st)
	if err != nil {
		return
	}
	ref := domain.Ref{Kind: domain.ApplyKind.Kind, Tenant: tenant, Name: name}
	if _, err := w.cfg.Store.Execute(ctx, domain.Command{Op: domain.OpUpdateStatus, Ref: ref, Actor: WorkerActor, Now: w.cfg.Now(),
		Object: &domain.Object{Status: raw}}, eventstore.UpdateOptions{Retries: 5, Hint: w.cfg.Cache}); err != nil && !domain.IsNotFound(err) {
		w.cfg.Log.Warn("apply worker: writing apply status", "tenant", tenant, "apply", name, "err", err)
	}
}

// updateTenantStatus rewrites the tenant's status through mutate.
func (w *Worker) updateTenantStatus(ctx context.Context, tenant string, mutate func(s *domain.TenantStatus, generation int64)) {
	updateStatus(ctx, w, domain.Ref{Kind: domain.TenantKind.Kind, Name: tenant}, mutate)
}

// updateStatus rewrites an object's status (of type S) through mutate, which
// also gets the object's generation; a missing object is left alone.
func updateStatus[S any](ctx context.Context, w *Worker, ref domain.Ref, mutate func(s *S, generation int64)) {
	_, err := w.cfg.Store.Update(ctx, ref, eventstore.UpdateOptions{Retries: 5, Hint: w.cfg.Cache}, func(state *domain.Object) ([]domain.Event, error) {
		if state == nil {
			return nil, nil
		}
		var s S
		if len(state.Status) > 0 {
			if err := json.Unmarshal(state.Status, &s); err != nil {
				return nil, err
			}
		}
		mutate(&s, state.Metadata.Generation)
		raw, err := json.Marshal(s)
		if err != nil {
			return nil, err
		}
		return domain.Decide(state, domain.Command{Op: domain.OpUpdateStatus, Ref: ref, Actor: WorkerActor, Now: w.cfg.Now(),
			Object: &domain.Object{Status: raw}})
	})
	if err != nil && !domain.IsNotFound(err) {
		w.cfg.Log.Warn("apply worker: writing status", "object", ref.String(), "err", err)
	}
}

// setCondition sets a condition, keeping its transition time unless its status changed.
func setCondition(s *domain.TenantStatus, c domain.Condition, now time.Time) {
	c.LastTransitionTime = now.UTC().Truncate(time.Second)
	for i, old := range s.Conditions {
		if old.Type == c.Type {
			if old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			}
			s.Conditions[i] = c
			return
		}
	}
	s.Conditions = append(s.Conditions, c)
}

func (w *Worker) machineCounts(tenant string) domain.MachineCounts {
	var c domain.MachineCounts
	ms, _ := listAs[domain.Machine](w.cfg.Cache, domain.MachineKind.Kind, tenant)
	for _, m := range ms {
		c.Total++
		if m.Status.Ready {
			c.Ready++
		}
		if m.Spec.Role == domain.RoleControlPlane {
			c.ControlPlane++
		} else {
			c.Workers++
		}
	}
	return c
}

// prune keeps the newest KeepApplies finished applies of a tenant (and their logs).
func (w *Worker) prune(ctx context.Context, tenant string) {
	as, err := listAs[domain.Apply](w.cfg.Cache, domain.ApplyKind.Kind, tenant)
	if err != nil {
		return
	}
	var done []domain.Apply
	for _, a := range as {
		if a.Status.Final() {
			done = append(done, a)
		}
	}
	if len(done) <= w.cfg.KeepApplies {
		return
	}
	sort.Slice(done, func(i, j int) bool {
		return done[i].Metadata.CreationTimestamp.Before(*done[j].Metadata.CreationTimestamp)
	})
	for _, a := range done[:len(done)-w.cfg.KeepApplies] {
		w.deleteObject(ctx, domain.Ref{Kind: domain.ApplyKind.Kind, Tenant: tenant, Name: a.Metadata.Name})
		if err := w.cfg.Logs.Delete(ctx, tenant, a.Metadata.Name); err != nil {
			w.cfg.Log.Warn("apply worker: deleting an old log", "tenant", tenant, "apply", a.Metadata.Name, "err", err)
		}
	}
}

func (w *Worker) deleteObject(ctx context.Context, ref domain.Ref) {
	_, err := w.cfg.Store.Execute(ctx, domain.Command{Op: domain.OpDelete, Ref: ref, Actor: WorkerActor, Now: w.cfg.Now()},
		eventstore.UpdateOptions{Retries: 3, Hint: w.cfg.Cache})
	if err != nil && !domain.IsNotFound(err) {
		w.cfg.Log.Warn("apply worker: deleting", "object", ref.String(), "err", err)
	}
}

func decodeAs[T any](o *domain.Object) (*T, error) {
	raw, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

func listAs[T any](cache *projections.Cache, kind, tenant string) ([]T, error) {
	res, err := cache.List(kind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(res.Items))
	for _, raw := range res.Items {
		var v T
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func writeIfChanged(path string, b []byte, mode os.FileMode) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

func newUID() string { return uuid.NewString() }
