package modulecheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// The module validator runs `tofu validate` on every module provider's module
// after each change of its spec, asynchronously (write-time checks are only
// what hcl can tell), and records the outcome as the Provider's Validated
// condition. Runs of tenants that use a module whose Validated is False fail
// at once, naming the Provider (Worker.checkModules).
const (
	ValidatorLease    = "module-validator"
	ValidatorConsumer = "module-validator"
	ValidatorQueue    = "rezus-module-validate-queue"
	ValidatorActor    = "system:module-validator"
)

// maxDiagnostics bounds the diagnostics a condition keeps.
const maxDiagnostics = 20

// ValidatorConfig configures the module validator.
type ValidatorConfig struct {
	Store *eventstore.Store
	Cache *projections.Cache
	Tofu  tofu.Binary
	// WorkDir holds a scratch dir per validation (and tofu's home and plugin
	// cache, shared with the apply worker when it is its WorkDir).
	WorkDir string
	Holder  string
	Log     *slog.Logger
	// Timeout bounds one validation (init and validate); default 5m.
	Timeout time.Duration
	// Concurrency is how many modules validate at once; default 2.
	Concurrency int
	Clock       controller.Clock
}

// Validate checks the required fields.
func (c ValidatorConfig) Validate() error {
	if err := controller.Required("module validator", controller.Need("Store", c.Store), controller.Need("Cache", c.Cache),
		controller.Need("WorkDir", c.WorkDir), controller.Need("Holder", c.Holder)); err != nil {
		return err
	}
	if errs := c.Tofu.CheckPaths(c.WorkDir); len(errs) > 0 {
		return fmt.Errorf("module validator: %w", errors.Join(errs...))
	}
	return nil
}

// ModuleValidator is the controller; NewModuleValidator builds it, Run runs it.
type ModuleValidator struct {
	cfg ValidatorConfig
	controller.Base
	sw eventstore.StatusWriter
	// initMu makes inits one at a time: the plugin cache is not safe for
	// concurrent inits (OpenTofu documents this).
	initMu sync.Mutex
}

// NewModuleValidator returns the validator of cfg.
func NewModuleValidator(cfg ValidatorConfig) *ModuleValidator {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Minute
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 2
	}
	if cfg.Clock == nil {
		cfg.Clock = controller.RealClock(nil)
	}
	v := &ModuleValidator{cfg: cfg}
	v.sw = eventstore.StatusWriter{Store: cfg.Store, Actor: ValidatorActor, Now: cfg.Clock.Now, Hint: cfg.Cache}
	v.Base = controller.Build(controller.Spec{
		Store: cfg.Store, Holder: cfg.Holder, Name: "module validator",
		Lease: ValidatorLease, Consumer: ValidatorConsumer, Queue: ValidatorQueue, Description: "module providers to validate with tofu",
		Kinds: []*domain.KindInfo{domain.ProviderKind}, MaxSources: 4,
		Concurrency: cfg.Concurrency, Backoff: controller.Exponential(5*time.Second, 5*time.Minute),
		Clock: cfg.Clock, Log: cfg.Log,
		// Every module provider whose module was not validated at its
		// current generation (changed while no replica led) is queued when
		// this replica leads.
		ReadModel: cfg.Cache, Pending: v.unvalidated,
	}, validatorRuntime{v})
	return v
}

type validatorRuntime struct{ v *ModuleValidator }

func (v *ModuleValidator) unvalidated(context.Context) ([]string, error) {
	ps, err := projections.List[domain.Provider](v.cfg.Cache, domain.ProviderKind, projections.ListOptions{})
	if err != nil {
		return nil, err
	}
	var names []string
	for i := range ps {
		if needsValidation(&ps[i]) {
			names = append(names, ps[i].Metadata.Name)
		}
	}
	return names, nil
}

// Keys queues a module provider whose spec changed; its own status writes
// queue nothing.
func (r validatorRuntime) Keys(ctx context.Context, ev *domain.Event, seq uint64) ([]string, error) {
	if ev.Actor == ValidatorActor || ev.Object == nil {
		return nil, nil
	}
	var spec domain.ProviderSpec
	if json.Unmarshal(ev.Object.Spec, &spec) != nil || spec.Type != domain.ProviderModule {
		return nil, nil
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.v.cfg.Cache.WaitFor(wctx, seq); err != nil {
		return nil, err
	}
	return []string{ev.Object.Metadata.Name}, nil
}

// Due: at once (a module is validated once per change).
func (validatorRuntime) Due(_ string, e controller.Entry) time.Time { return e.Last }

// needsValidation reports whether p is a module provider whose Validated
// condition is not about its current generation.
func needsValidation(p *domain.Provider) bool {
	if p.Spec.Type != domain.ProviderModule || p.Metadata.DeletionTimestamp != nil {
		return false
	}
	c, ok := validatedCondition(p)
	return !ok || c.ObservedGeneration != p.Metadata.Generation || c.Status == "Unknown"
}

func validatedCondition(p *domain.Provider) (domain.Condition, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == domain.ConditionValidated {
			return c, true
		}
	}
	return domain.Condition{}, false
}

func (r validatorRuntime) Reconcile(ctx context.Context, name string, _ controller.Entry, _ int) controller.Result {
	v := r.v
	log := v.cfg.Log.With("provider", name)
	p, ok, err := projections.Get[domain.Provider](v.cfg.Cache, domain.ObjectRef(domain.ProviderKind, "", name))
	if err != nil {
		log.Warn("module validator: reading the provider", "err", err)
		return controller.Retry()
	}
	if !ok || !needsValidation(p) {
		return controller.Done()
	}
	gen := p.Metadata.Generation
	if err := v.setCondition(ctx, name, gen, "Unknown", domain.ReasonModulePending, "tofu validate is running"); err != nil {
		log.Warn("module validator: recording the pending validation", "err", err)
		return controller.Retry()
	}
	vctx, cancel := context.WithTimeout(ctx, v.cfg.Timeout)
	defer cancel()
	status, reason, msg, err := v.validate(vctx, p)
	if err != nil {
		if ctx.Err() != nil {
			return controller.Retry()
		}
		// tofu itself is missing or broke: not the module's fault; retried.
		log.Warn("module validator: running tofu", "err", err)
		_ = v.setCondition(ctx, name, gen, "Unknown", domain.ReasonModulePending, "tofu could not run: "+err.Error())
		return controller.Retry()
	}
	if err := v.setCondition(ctx, name, gen, status, reason, msg); err != nil {
		log.Warn("module validator: recording the validation", "err", err)
		return controller.Retry()
	}
	log.Info("module validated", "generation", gen, "status", status, "reason", reason)
	return controller.Done()
}

// setCondition records Validated for generation gen, unless the spec moved
// on meanwhile (the newer generation gets its own run).
func (v *ModuleValidator) setCondition(ctx context.Context, name string, gen int64, status, reason, msg string) error {
	_, err := eventstore.UpdateStatus(ctx, v.sw, domain.ObjectRef(domain.ProviderKind, "", name), func(obj *domain.Object, st *domain.ProviderStatus) (bool, error) {
		if obj.Metadata.Generation != gen {
			return false, nil
		}
		before, _ := json.Marshal(st.Conditions)
		st.Conditions = domain.SetCondition(st.Conditions, domain.Condition{Type: domain.ConditionValidated, Status: status, Reason: reason,
			Message: msg, ObservedGeneration: gen}, v.cfg.Clock.Now())
		after, _ := json.Marshal(st.Conditions)
		return !bytes.Equal(before, after), nil
	})
	var de *domain.Error
	if errors.As(err, &de) && de.Reason == domain.ReasonNotFound {
		return nil
	}
	return err
}

// tofuDiagnostic is one diagnostic of `tofu validate -json`.
type tofuDiagnostic struct {
	Severity string `json:"severity"`
	Summary  string `json:"summary"`
	Detail   string `json:"detail"`
	Range    *struct {
		Filename string `json:"filename"`
		Start    struct {
			Line   int `json:"line"`
			Column int `json:"column"`
		} `json:"start"`
	} `json:"range"`
}

// validate writes the module to a scratch dir and runs `tofu init` and
// `tofu validate -json` there. It returns the condition's status, reason and
// message; err is tofu failing to run at all.
func (v *ModuleValidator) validate(ctx context.Context, p *domain.Provider) (status, reason, msg string, err error) {
	home := filepath.Join(v.cfg.WorkDir, "home")
	// A plugin cache of its own: the apply worker's inits hold another lock.
	cache := filepath.Join(v.cfg.WorkDir, "validate-plugin-cache")
	scratch := filepath.Join(v.cfg.WorkDir, "validate")
	for _, d := range []string{home, cache, scratch} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", "", "", err
		}
	}
	dir, err := os.MkdirTemp(scratch, p.Metadata.Name+"-")
	if err != nil {
		return "", "", "", err
	}
	defer os.RemoveAll(dir)
	for name, text := range p.Spec.Module.Files {
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(name)), []byte(text), 0o600); err != nil {
			return "", "", "", err
		}
	}
	cli, err := v.cfg.Tofu.CLIConfig(cache)
	if err != nil {
		return "", "", "", err
	}
	cliPath := filepath.Join(dir, ".tofurc")
	if err := os.WriteFile(cliPath, []byte(cli), 0o600); err != nil {
		return "", "", "", err
	}
	env := []string{
		"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "TMPDIR=" + os.TempDir(),
		"TF_CLI_CONFIG_FILE=" + cliPath, "TF_IN_AUTOMATION=1", "TF_INPUT=0", "CHECKPOINT_DISABLE=1",
	}
	if _, err := v.cfg.Tofu.Path(); err != nil {
		return "", "", "", err
	}
	var initOut bytes.Buffer
	v.initMu.Lock()
	err = v.cfg.Tofu.Exec(ctx, dir, env, &initOut, "init", "-backend=false", "-input=false", "-no-color")
	v.initMu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			return "", "", "", ctx.Err()
		}
		return "False", domain.ReasonModuleInitFailed, truncateLines(tofu.RedactForReaders(initErrors(initOut.String()), p.Spec.Module.Files), maxDiagnostics), nil
	}
	var out bytes.Buffer
	err = v.cfg.Tofu.Exec(ctx, dir, env, &out, "validate", "-json", "-no-color")
	var res struct {
		Valid       bool             `json:"valid"`
		Diagnostics []tofuDiagnostic `json:"diagnostics"`
	}
	if jerr := json.Unmarshal(jsonPart(out.Bytes()), &res); jerr != nil {
		if err != nil {
			return "", "", "", fmt.Errorf("tofu validate: %w: %s", err, domain.Truncate(out.String(), 2000))
		}
		return "", "", "", fmt.Errorf("tofu validate printed no JSON: %s", domain.Truncate(out.String(), 2000))
	}
	var lines []string
	for _, d := range res.Diagnostics {
		if d.Severity != "error" {
			continue
		}
		lines = append(lines, tofu.RedactForReaders(formatDiagnostic(d), p.Spec.Module.Files))
	}
	if res.Valid && len(lines) == 0 {
		return "True", domain.ReasonModuleValid, "tofu validate: the module is valid", nil
	}
	return "False", domain.ReasonModuleInvalid, truncateLines(strings.Join(lines, "\n"), maxDiagnostics), nil
}

// formatDiagnostic is "file:line:col: summary: detail".
func formatDiagnostic(d tofuDiagnostic) string {
	var sb strings.Builder
	if d.Range != nil && d.Range.Filename != "" {
		fmt.Fprintf(&sb, "%s:%d:%d: ", d.Range.Filename, d.Range.Start.Line, d.Range.Start.Column)
	}
	sb.WriteString(d.Summary)
	if d.Detail != "" {
		sb.WriteString(": " + strings.Join(strings.Fields(d.Detail), " "))
	}
	return sb.String()
}

// jsonPart skips anything tofu printed before its JSON document.
func jsonPart(b []byte) []byte {
	if i := bytes.IndexByte(b, '{'); i > 0 {
		return b[i:]
	}
	return b
}

// initErrors keeps the error lines of `tofu init` output (its "Error: ..."
// blocks), or all of it when there are none.
func initErrors(out string) string {
	var keep []string
	in := false
	for _, l := range strings.Split(out, "\n") {
		t := strings.TrimSpace(strings.Trim(l, "│╷╵ "))
		if strings.HasPrefix(t, "Error:") {
			in = true
		}
		if in && t != "" {
			keep = append(keep, t)
		}
	}
	if len(keep) == 0 {
		return "tofu init failed: " + strings.TrimSpace(out)
	}
	return "tofu init: " + strings.Join(keep, " ")
}

func truncateLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append(lines[:n], fmt.Sprintf("(%d more)", len(lines)-n))
	}
	return domain.Truncate(strings.Join(lines, "\n"), 8000)
}
