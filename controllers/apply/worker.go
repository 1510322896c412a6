package apply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/internal/controller"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/providers"
	"github.com/rezuscloud/rezuscloud/talos"
	"github.com/rezuscloud/rezuscloud/tofu"
)

// WorkerLease makes one replica at a time run applies.
const WorkerLease = "apply-worker"

// InfraFinalizer holds a tenant whose infrastructure may exist until `tofu
// destroy` has removed it.
const InfraFinalizer = "rezuscloud.io/infrastructure"

// Bundles gives a tenant's PKI (talos.PKI).
type Bundles interface {
	Bundle(ctx context.Context, tenant string) (*secrets.Bundle, error)
}

// StateCredentials issues per-apply credentials for the HTTP state backend
// that reach only the tenant's state, and revokes them when the run that
// used them ends (identity.Service).
type StateCredentials interface {
	IssueStateCredentials(ctx context.Context, tenant, applyID string, ttl time.Duration) (username, password string, err error)
	RevokeStateCredentials(ctx context.Context, username, password string) error
}

// StateKeys keeps each tenant's generated state encryption key
// (eventstore.StateKeys), used when no state passphrase is configured.
type StateKeys interface {
	// StateKey returns the tenant's key, generating it on first use; it is
	// the same on every later call until DeleteStateKey.
	StateKey(ctx context.Context, tenant string) ([]byte, error)
	// DeleteStateKey removes the tenant's key, with its state.
	DeleteStateKey(ctx context.Context, tenant string) error
}

// ProviderCredentials gives the environment of a Provider's credentialsRef.
type ProviderCredentials interface {
	ProviderCredentials(ctx context.Context, name string) (map[string]string, error)
}

// UpgradeGate says whether a tenant is being upgraded (upgrade.Saga in controllers/upgrade).
type UpgradeGate interface {
	ActiveUpgrade(tenant string) bool
}

// Observer probes a tenant's machines through the Talos API and records what
// it saw on them: stage, readiness, version (talos/health.Service).
type Observer interface {
	Probe(ctx context.Context, tenant string, refresh bool) (domain.TenantHealth, error)
}

// StateStore is what the worker needs of the TF state storage.
type StateStore interface {
	// LockHolderApply is the apply whose credentials hold the tenant's state
	// lock ("" when it is not locked).
	LockHolderApply(ctx context.Context, tenant string) (string, error)
	// ForceUnlock drops the tenant's state lock.
	ForceUnlock(ctx context.Context, tenant string) error
	// DeleteState removes the tenant's state and its history.
	DeleteState(ctx context.Context, tenant string) error
	// HasState reports whether the tenant has a state.
	HasState(ctx context.Context, tenant string) (bool, error)
	// StateRevision is the revision of the tenant's state (0: none): it
	// changes with every write of the state, by any writer.
	StateRevision(ctx context.Context, tenant string) (uint64, error)
	// State is the tenant's state as tofu last wrote it (encrypted), nil
	// when there is none.
	State(ctx context.Context, tenant string) ([]byte, error)
}

// SchematicRegistrar makes an Image Factory know a schematic (a
// *factory.Client): a factory builds installers only of the schematics it
// was given.
type SchematicRegistrar interface {
	Register(ctx context.Context, s *domain.Schematic) error
}

// Config configures a Worker. Fields without a default are required.
type Config struct {
	Store   *eventstore.Store
	Cache   *projections.Cache
	Bundles Bundles
	Logs    *tofu.Logs
	Tofu    tofu.Binary
	// WorkDir holds one directory per tenant and the shared plugin cache.
	WorkDir string
	// BackendURL is this server's base URL as tofu reaches it, e.g. http://127.0.0.1:8080.
	BackendURL string
	// BackendCAPEM is the CA that signs the server's certificate (https only).
	BackendCAPEM string
	Credentials  StateCredentials
	// ProviderCredentials may be nil when no Provider has a credentialsRef.
	ProviderCredentials ProviderCredentials
	State               StateStore
	// Upgrades, when set, holds back a tenant's applies while a rolling
	// upgrade of it runs, so version-specific configs are not regenerated
	// under the saga's feet.
	Upgrades UpgradeGate
	// Metal drives machines through the Talos API: metal node groups and the
	// bootstrap of etcd on every tenant's first control plane. Nil leaves both out.
	Metal Metal
	// Built, when set, is the Talos API client for machines tofu built (the
	// bootstrap of their first control plane): Metal may refuse addresses
	// (MetalAddresses at dial time) that a provider legitimately uses, as
	// the emulator's loopback. Nil: Metal.
	Built Metal
	// MetalAddresses is the rule for the metal machine addresses a run
	// dials (serve --metal-networks); the zero value is
	// talos.AddressPolicy's default (no loopback, link-local or cloud
	// metadata addresses).
	MetalAddresses talos.AddressPolicy
	// Resolver resolves metal machines' DNS names, so a run checks and
	// dials the addresses they stand for; default net.DefaultResolver.
	Resolver Resolver
	// Nodes takes machines out of the cluster before they are destroyed:
	// control planes leave etcd (one at a time, quorum checked), workers are
	// reset (scaledown.go). Nil destroys them without either.
	Nodes Nodes
	// Kube reaches a tenant's Kubernetes API: machines that go are cordoned
	// and drained first (PDBs honoured), and their Nodes deleted after.
	// Without it they are not.
	Kube KubeSource
	// DrainSkip says why a node group's machines run no Kubernetes to drain
	// ("" when they do); nil: every group's machines do.
	DrainSkip func(*domain.NodeGroup) string
	// DrainPoll is the pause between two looks at a draining node; default
	// drain.DefaultPoll (250ms).
	DrainPoll time.Duration
	// Observer, when set, probes the tenant's machines at the end of each
	// apply, so the machines' stage, readiness and version are recorded by
	// the time the apply says Succeeded, not at the first health request.
	Observer Observer
	// ObserveWait bounds that probe and its repeats while machines are not
	// ready yet; default 60s (a real control plane takes seconds to start
	// after the bootstrap, more on a loaded machine). A probe that fails or
	// machines still not ready then are logged and the apply stands.
	ObserveWait time.Duration
	// BootstrapWait bounds how long a run waits for the first control plane
	// to come up before bootstrapping etcd; default 5m.
	BootstrapWait time.Duration
	// StatePassphrase, when set, encrypts every tenant's state through
	// TF_ENCRYPTION with a key derived from it.
	StatePassphrase string
	// StateKeys gives the per-tenant keys state is encrypted with when
	// StatePassphrase is empty: state is always encrypted, so one of the two
	// is required.
	StateKeys StateKeys
	// Modules checks module providers' modules before every run (the same
	// checks as when they are written); the zero value checks all but the
	// provider sources.
	Modules providers.ModuleChecker
	// ImageFactory is the Image Factory URL the machines' installers come
	// from (serve --image-factory); "" is the public one.
	ImageFactory string
	// Schematics registers the node groups' schematics with that factory
	// before an apply builds machines that install from it; nil: they are
	// not (the factory is told some other way).
	Schematics SchematicRegistrar
	// Holder names this replica in leases, in the status.replica of the
	// applies and remediations it runs, and in the first line of an apply's log.
	Holder string
	// Tenants, when set, shares the tenants' runs out over the replicas:
	// this replica runs only the tenants it holds (controller.Tenants); nil:
	// the lease holder runs every tenant.
	Tenants *controller.Tenants
	Log     *slog.Logger

	// Debounce is the quiet time after a change before an apply; default 2s.
	Debounce time.Duration
	// MaxDelay bounds how long changes that keep coming delay an apply; default 30s.
	MaxDelay time.Duration
	// Concurrency is how many tenants apply at once; default 4.
	Concurrency int
	// Timeout bounds one run; default 30m.
	Timeout time.Duration
	// Resync is how often the worker looks for tenants whose drift check is
	// due (and deleted tenants whose destroy failed); default 1m, <0 off.
	Resync time.Duration
	// DriftInterval is how often a tenant without spec.driftCheck is
	// checked for drift; 0: such tenants are not.
	DriftInterval time.Duration
	// DriftMinInterval raises a tenant's shorter spec.driftCheck.interval
	// (a plan costs CPU seconds); default 5m.
	DriftMinInterval time.Duration
	// ConfigDrift, when set, compares the machines' running configs with the
	// declared ones in each drift check.
	ConfigDrift ConfigDrift
	// BackoffBase and BackoffMax shape retries of failed runs; default 5s and 5m.
	BackoffBase, BackoffMax time.Duration
	// KeepApplies is how many finished applies (with logs) a tenant keeps; default 20.
	KeepApplies int
	// Now is the clock of recorded times; default Clock's Now, else time.Now.
	Now func() time.Time
	// Clock times the debounce, backoffs and resyncs; default the wall
	// clock with Now as its time.
	Clock controller.Clock
}

func (c *Config) setDefaults() {
	if c.Debounce == 0 {
		c.Debounce = 2 * time.Second
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = 30 * time.Second
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Minute
	}
	if c.Resync == 0 {
		c.Resync = time.Minute
	}
	if c.DriftMinInterval == 0 {
		c.DriftMinInterval = 5 * time.Minute
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = 5 * time.Second
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 5 * time.Minute
	}
	if c.BootstrapWait == 0 {
		c.BootstrapWait = 5 * time.Minute
	}
	if c.ObserveWait == 0 {
		c.ObserveWait = time.Minute
	}
	if c.KeepApplies == 0 {
		c.KeepApplies = 20
	}
	if c.Now == nil {
		c.Now = time.Now
		if c.Clock != nil {
			c.Now = c.Clock.Now
		}
	}
	if c.Clock == nil {
		c.Clock = controller.RealClock(c.Now)
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
}

// Worker is the apply worker: it queues tenants on tenant-affecting events and
// runs tofu for them, debounced, serial per tenant and parallel across tenants.
type Worker struct {
	cfg Config
	controller.Base

	// initMu serialises `tofu init`, which shares the plugin cache.
	initMu sync.Mutex
	// planSlots bound the dry-run plans running at once (PlanChange).
	planSlots chan struct{}

	mu      sync.Mutex
	running map[string]*activeRun // by tenant
	// applies counts runs started by this process (for tests and metrics).
	applies int
	// unchanged counts runs that found nothing for tofu to act on.
	unchanged int
}

type activeRun struct {
	apply    string
	cancel   context.CancelCauseFunc
	canceled bool
	// deferred runs did nothing and are tried again later without counting as a failure.
	deferred bool
}

// errCanceledByUser is the cause of a run's context when a user cancels it.
var errCanceledByUser = errors.New("canceled by a user")

// NewWorker returns a worker; Run starts it.
func NewWorker(cfg Config) *Worker {
	cfg.setDefaults()
	w := &Worker{cfg: cfg, running: map[string]*activeRun{}, planSlots: make(chan struct{}, maxPlans)}
	resync := max(cfg.Resync, 0)
	w.Base = controller.Build(controller.Spec{
		Store: cfg.Store, Holder: cfg.Holder, Tenants: cfg.Tenants, Name: "apply worker",
		Lease: WorkerLease, Consumer: WorkerConsumer, Queue: QueueBucket, Description: queueDescription,
		Kinds: tenantEventKinds, AckWait: 15 * time.Second, MaxSources: domain.MaxApplySources,
		Concurrency: cfg.Concurrency, Backoff: w.backoff, Resync: resync,
		Clock: cfg.Clock, Log: cfg.Log, ReadModel: cfg.Cache,
	}, applyController{w})
	return w
}

// Unchanged is how many runs of this process found nothing for tofu to
// act on and ran no tofu (no Apply).
func (w *Worker) Unchanged() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.unchanged
}

// Started is how many runs this process started.
func (w *Worker) Started() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.applies
}

// applyController is the worker as the controller runtime drives it: keys
// are tenants.
type applyController struct{ w *Worker }

// Lead finishes what a previous holder left and answers cancel requests
// while this replica leads (the builder caught up the read model first).
// With tenants shared over the replicas, what a previous holder left is
// finished tenant by tenant by the replica taking it (Acquired), and every
// replica answers the cancel requests of the runs it has.
func (c applyController) Lead(ctx context.Context, q *controller.Queue) (func(), error) {
	w := c.w
	if w.cfg.Tenants != nil {
		return nil, nil
	}
	if err := w.recover(ctx, q, ""); err != nil {
		return nil, err
	}
	sub, err := w.cfg.Store.Conn().Subscribe(cancelSubject+".>", w.onCancel)
	if err != nil {
		return nil, fmt.Errorf("apply worker: %w", err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// Acquired finishes what the previous holder of a tenant this replica took
// left: its process, or its hold, is gone, so no run of the tenant is in
// flight anywhere. The run about to start is the tenant's: queueing it
// again would run it twice.
func (c applyController) Acquired(ctx context.Context, tenant string, _ *controller.Queue) error {
	return c.w.recover(ctx, nil, tenant)
}

// recover finishes what a previous holder left (of one tenant, or of every
// one for ""): runs it recorded as going are marked failed (their process
// is gone) and their tenants queued again on q (unless nil).
func (w *Worker) recover(ctx context.Context, q *controller.Queue, of string) error {
	applies, err := projections.List[domain.Apply](w.cfg.Cache, domain.ApplyKind, projections.ListOptions{Tenant: of})
	if err != nil {
		return err
	}
	for _, a := range applies {
		if a.Status.Final() {
			continue
		}
		tenant := a.Metadata.Tenant
		w.cfg.Log.Warn("apply interrupted by a restart; queueing the tenant again", "tenant", tenant, "apply", a.Metadata.Name)
		note := "\n[rezuscloud] the server running this apply stopped; it will be retried\n"
		if err := w.cfg.Logs.MarkEnded(ctx, tenant, a.Metadata.Name, note); err != nil {
			w.cfg.Log.Warn("ending an interrupted apply's log", "tenant", tenant, "apply", a.Metadata.Name, "err", err)
		}
		now := w.cfg.Now().UTC()
		st := a.Status
		st.Phase, st.EndTime, st.Error = domain.ApplyFailed, &now, "interrupted: the server running it stopped"
		w.writeApplyStatus(ctx, tenant, a.Metadata.Name, st)
		if q == nil {
			continue
		}
		if err := q.Add(ctx, tenant, "Apply/"+a.Metadata.Name+"@interrupted"); err != nil {
			return err
		}
	}
	return nil
}

// Keys are the tenants whose infrastructure an event may change; the
// worker's own writes and status changes change none.
func (c applyController) Keys(ctx context.Context, ev *domain.Event, seq uint64) ([]string, error) {
	if ev.Actor == WorkerActor || strings.HasSuffix(ev.Type, "StatusUpdated") {
		return nil, nil
	}
	// Decided on a read model that has the event; and a run that starts
	// after this event is queued (or absorbed into a queued key) reads one
	// that has it.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := c.w.cfg.Cache.WaitFor(wctx, seq)
	cancel()
	if err != nil {
		return nil, err
	}
	if o := ev.Object; o.Kind == domain.TenantKind.Kind && ev.Action != domain.ActionDeleted &&
		o.Metadata.DeletionTimestamp == nil && !slices.Contains(o.Metadata.Finalizers, InfraFinalizer) &&
		!c.w.hasNodeGroups(o.Metadata.Name) {
		// Never applied (the finalizer comes before the first apply) and
		// nothing to build: a run would do nothing (decideRun), and the node
		// group that comes first queues the tenant.
		return nil, nil
	}
	return c.w.affected(ev), nil
}

// affected lists the tenants an event may change the infrastructure of.
func (w *Worker) affected(ev *domain.Event) []string {
	o := ev.Object
	switch o.Kind {
	case domain.TenantKind.Kind:
		return []string{o.Metadata.Name}
	case domain.NodeGroupKind.Kind, domain.ConfigPatchKind.Kind:
		return []string{o.Metadata.Tenant}
	case domain.RemediationKind.Kind:
		// Created: a machine to replace. Its later steps are the worker's
		// and the remediation controller's own records.
		if ev.Action == domain.ActionCreated {
			return []string{o.Metadata.Tenant}
		}
	case domain.ProviderKind.Kind:
		// The node groups naming the Provider, from the read model's index:
		// the cost is theirs, not every node group's.
		seen := map[string]bool{}
		var out []string
		for _, raw := range w.cfg.Cache.NodeGroupsOf(o.Metadata.Name) {
			var ng struct {
				Metadata struct {
					Tenant string `json:"tenant"`
				} `json:"metadata"`
			}
			if json.Unmarshal(raw, &ng) == nil && !seen[ng.Metadata.Tenant] {
				seen[ng.Metadata.Tenant] = true
				out = append(out, ng.Metadata.Tenant)
			}
		}
		return out
	}
	return nil
}

// Resync queues the tenants whose drift check is due, and those being
// deleted with infrastructure (their destroy is retried).
func (c applyController) Resync(context.Context) ([]string, error) {
	tenants, err := c.w.tenants()
	if err != nil {
		return nil, err
	}
	return c.w.resyncKeys(tenants, c.w.cfg.Now()), nil
}

// Due debounces: a tenant runs once its changes have been quiet for
// Debounce, or once the oldest waited MaxDelay.
func (c applyController) Due(_ string, e controller.Entry) time.Time {
	at := e.Last.Add(c.w.cfg.Debounce)
	if limit := e.First.Add(c.w.cfg.MaxDelay); limit.Before(at) {
		at = limit
	}
	return at
}

// Reconcile runs a tenant's apply, registered so a user can cancel it.
func (c applyController) Reconcile(ctx context.Context, tenant string, e controller.Entry, attempt int) controller.Result {
	w := c.w
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	run := &activeRun{cancel: cancel}
	w.mu.Lock()
	w.running[tenant] = run
	w.applies++
	w.mu.Unlock()
	ok := w.runTenant(ctx, tenant, e, attempt, run)
	w.mu.Lock()
	canceled, deferred := run.canceled, run.deferred
	delete(w.running, tenant)
	w.mu.Unlock()
	switch {
	case ok || canceled:
		return controller.Done()
	case deferred:
		return controller.Later(deferRetry)
	}
	return controller.Retry()
}

// deferRetry is how soon a deferred tenant (upgrade running) is looked at again.
const deferRetry = 10 * time.Second

// backoff is the wait before retry n (1-based): exponential, capped, jittered.
func (w *Worker) backoff(n int) time.Duration {
	return controller.Exponential(w.cfg.BackoffBase, w.cfg.BackoffMax)(n)
}

// Tofu is the tofu binary the worker runs.
func (w *Worker) Tofu() tofu.Binary { return w.cfg.Tofu }
